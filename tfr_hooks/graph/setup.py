"""What a graph-mode run sets up before its first step.

Shared by ``SessionLoop`` and ``hooked_session``: the hooks the graph's input needs, a
default ``Saver`` for stock checkpoint hooks, and the initialization of variables not yet
initialized.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.data_errors import DataErrorHook
from tfr_hooks.graph.queue_runners import QueueRunnerHook
from tfr_hooks.tfrecord.pipelines.read import Batches

__all__ = [
    "TrainingGraph",
    "check_data",
    "input_hooks",
    "initialize_uninitialized",
    "ensure_saver",
    "training_of",
]

_v1 = tf.compat.v1

#: Per graph, the stacked ``is_variable_initialized`` flags and how many variables they
#: cover. Not a graph collection: a collection of tuples cannot go into a ``MetaGraphDef``,
#: and every ``Saver.export_meta_graph`` (a ``CheckpointSaverHook`` at session creation,
#: each checkpoint) would log "Issue encountered when serializing" about it.
_INITIALIZED_FLAGS: weakref.WeakKeyDictionary[Any, tuple[Any, int]] = weakref.WeakKeyDictionary()
_FLAGS_LOCK = threading.Lock()


def check_data(data: object) -> Batches | None:
    """Return ``data`` if it is ``None`` or a :class:`~tfr_hooks.tfrecord.Batches`."""
    if data is not None and not isinstance(data, Batches):
        raise TypeError(
            expected("data", "a tfr_hooks.tfrecord.Batches (from read_batches) or None", data)
        )
    return data


class TrainingGraph:
    """What a graph-mode run takes apart when given as its train op.

    The base of :class:`~tfr_hooks.graph.keras_graph.KerasTrainingGraph`, defined here so
    that ``SessionLoop`` and ``hooked_session`` recognize one without importing
    ``tf_keras``.

    Attributes:
        train_op: Runs one training step.
        fetches: Name to scalar tensor, for the loop's epoch means.
        batch_size: The batch size of the step, a scalar tensor.
        fetch_weights: Fetch name to the weight of its step in the epoch mean, for the
            fetches weighed otherwise than by ``batch_size`` (a weighted mean: the sum
            of the batch's example weights).
        hooks: Hooks the training step needs (run before the user's).
    """

    train_op: Any
    fetches: dict[str, Any]
    batch_size: Any
    hooks: list[Any]
    fetch_weights: dict[str, Any]


def training_of(train_op: Any) -> TrainingGraph | None:
    """``train_op`` if it is a :class:`TrainingGraph` (a ``KerasTrainingGraph``), else ``None``."""
    return train_op if isinstance(train_op, TrainingGraph) else None


def input_hooks(
    graph: Any,
    user_hooks: Sequence[Any],
    data: Batches | None,
    training: TrainingGraph | None = None,
) -> list[Any]:
    """The hooks a graph-mode run adds before the user's, in this order.

    A :class:`~tfr_hooks.QueueRunnerHook` when the graph has queue runners (unless the
    user gave one), the learning-phase feed of a ``KerasTrainingGraph``, and a
    :class:`~tfr_hooks.DataErrorHook` for the files of ``data``. Also makes the default
    ``Saver`` a stock ``CheckpointSaverHook`` looks for (see :func:`ensure_saver`).
    """
    hooks: list[Any] = []
    with graph.as_default():
        has_queues = _v1.get_collection(_v1.GraphKeys.QUEUE_RUNNERS)
        if has_queues and not any(isinstance(h, QueueRunnerHook) for h in user_hooks):
            hooks.append(QueueRunnerHook())
        if training is not None:
            hooks.extend(training.hooks)
        if data is not None:
            hooks.append(DataErrorHook.for_batches(data))
        ensure_saver(user_hooks)
    return hooks


def initialize_uninitialized(session: Any) -> None:
    """Initialize the graph's variables that are not yet initialized in ``session``.

    A new session gets every variable initialized; a session the user already worked
    in (restored from a checkpoint, or Keras' own) keeps the values it has.
    """
    graph = session.graph
    variables = graph.get_collection(_v1.GraphKeys.GLOBAL_VARIABLES)
    variables += graph.get_collection(_v1.GraphKeys.LOCAL_VARIABLES)
    if not variables:
        return
    with _FLAGS_LOCK:
        report = _INITIALIZED_FLAGS.get(graph)
        if report is None or report[1] != len(variables):
            # outside any enclosing device scope (a replica_device_setter's, when the loop
            # runs inside one): the placer puts each check beside its variable
            with graph.as_default(), graph.device(None):
                tensor = _v1.is_variable_initialized  # one small op per variable, made once
                report = (tf.stack([tensor(v) for v in variables]), len(variables))
            _INITIALIZED_FLAGS[graph] = report
    initialized = session.run(report[0])
    todo = [v.initializer for v, done in zip(variables, initialized, strict=True) if not done]
    if todo:
        session.run(todo)


def ensure_saver(hooks: Sequence[Any], *, needed: bool = False) -> None:
    """Give a ``CheckpointSaverHook`` the default saver ``MonitoredSession``'s scaffold makes.

    Stock checkpoint hooks built without a saver look for one in the ``SAVERS``
    collection; ``Scaffold`` puts a sharded saver there, so this does the same.

    Args:
        hooks: The run's hooks.
        needed: Make the saver even without a checkpoint hook (a cluster chief restores
            its ``log_dir`` with it).
    """
    wants_saver = needed or any(isinstance(h, _v1.train.CheckpointSaverHook) for h in hooks)
    if wants_saver and not _v1.get_collection(_v1.GraphKeys.SAVERS):
        saver = _v1.train.Saver(sharded=True, max_to_keep=5, save_relative_paths=True)
        _v1.add_to_collection(_v1.GraphKeys.SAVERS, saver)
