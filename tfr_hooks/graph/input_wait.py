"""The time a graph-mode step waits for its input, measured inside its ``session.run``.

A step's batch comes from the graph's input ops: an iterator's ``IteratorGetNext`` or a
queue's dequeue. :func:`input_wait` finds those the step's fetches depend on and builds
a tensor that, fetched with them, is the seconds from the start of the ``session.run``
to the end of those ops (``tf.timestamp`` before and after): the time the step could
not go on for want of its batch. Fetching it costs two timestamp ops a step, not the
tracing ``RunMetadata`` would.

Under ``tf.config.experimental.enable_op_determinism()`` TensorFlow refuses to run a
timestamp op ("Timestamp cannot be called when determinism is enabled"), which would
fail every step: the wait is then not measured (no input verdict is logged), as in
``FunctionLoop`` (both ask :func:`tfr_hooks.tf_private.op_determinism_enabled`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from tfr_hooks.tf_private import op_determinism_enabled

__all__ = ["INPUT_OP_TYPES", "input_ops", "input_wait"]

logger = logging.getLogger(__name__)

#: The op types a step's batch comes out of.
INPUT_OP_TYPES = frozenset(
    {
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "QueueDequeue",
        "QueueDequeueV2",
        "QueueDequeueMany",
        "QueueDequeueManyV2",
        "QueueDequeueUpTo",
        "QueueDequeueUpToV2",
    }
)


def input_ops(fetches: Iterable[Any]) -> list[Any]:
    """The input ops (of :data:`INPUT_OP_TYPES`) that ``fetches`` depend on.

    Args:
        fetches: Graph ops or tensors (``None`` entries are skipped).

    Returns:
        The ops, in the order found; the search does not go past them.
    """
    stack = []
    for item in fetches:
        if item is not None:
            stack.append(item if isinstance(item, tf.Operation) else item.op)
    seen: set[int] = set()
    found = []
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        if op.type in INPUT_OP_TYPES:
            found.append(op)
            continue
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


def input_wait(fetches: Iterable[Any]) -> Any:
    """A float64 tensor: seconds the step of ``fetches`` waits for its input ops.

    Build it in the fetches' graph; fetch it in the same ``session.run``.

    Returns:
        The tensor, or ``None`` when ``fetches`` depend on no input op (data fed, or
        constants), or when op determinism is enabled (timestamps are refused then):
        the wait is then not measured.
    """
    if op_determinism_enabled():
        logger.info("Op determinism is enabled: the steps' input wait is not measured.")
        return None
    # the outputs through new Identity ops: a control dependency on an op marks it, and
    # marking an op a session has run already draws a warning from TensorFlow
    outputs = [op.outputs[0] for op in input_ops(fetches) if op.outputs]
    if not outputs:
        return None
    with tf.name_scope("tfr_hooks_input_wait"):
        start = tf.timestamp()
        with tf.control_dependencies([tf.identity(t) for t in outputs]):
            ready = tf.timestamp()
        return tf.maximum(ready - start, tf.constant(0.0, tf.float64))
