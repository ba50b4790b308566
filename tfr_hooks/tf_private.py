"""Every private TensorFlow API the package uses, behind one small function each.

A TensorFlow release that moves one of them is one module to fix, and
``tests/test_tf_private.py`` checks each on the installed TensorFlow, so that such a
release fails a test instead of hanging a run. Each function names the versions it was
checked against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "cancellation_manager",
    "call_cancellable",
    "start_cancel",
    "is_cancelled",
    "service_addresses",
]


def cancellation_manager() -> Any:
    """A new ``CancellationManager`` (``tensorflow.python.eager.cancellation``).

    Checked on TensorFlow 2.21.
    """
    from tensorflow.python.eager.cancellation import CancellationManager

    return CancellationManager()


def call_cancellable(manager: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a ``tf.function``), cancelled by :func:`start_cancel` on ``manager``.

    A function called inside a ``CancellationManagerContext`` registers its ops with the
    manager, whose ``start_cancel`` (from any thread) ends them with ``CancelledError``.
    Checked on TensorFlow 2.21.
    """
    from tensorflow.python.eager.cancellation import CancellationManagerContext

    with CancellationManagerContext(manager):
        return fn(*args)


def start_cancel(manager: Any) -> None:
    """Cancel the ops of the calls made under ``manager`` (from any thread)."""
    manager.start_cancel()


def is_cancelled(manager: Any) -> bool:
    """Whether ``manager`` was cancelled (a new one is needed for the next call)."""
    return bool(manager.is_cancelled)


def service_addresses(dataset: Any) -> list[str]:
    """The addresses of the tf.data services ``dataset``'s pipeline reads through.

    Found in the dataset's own graph (``Dataset._as_serialized_graph``, its
    ``GraphDef`` and function library): the constant fed to the ``address`` input of
    every ``DataServiceDataset`` node, whoever called ``distribute`` or
    ``from_dataset_id`` and whatever was applied after it. Checked on TensorFlow 2.21.

    Returns:
        Each address as ``"grpc://HOST:PORT"``, in the graph's order; empty when none.
    """
    import tensorflow as tf

    from tfr_hooks.service.address import check_service_address

    if tf.executing_eagerly():
        serialized = dataset._as_serialized_graph().numpy()
    else:
        with tf.compat.v1.Session(graph=dataset._variant_tensor.graph) as session:
            serialized = session.run(dataset._as_serialized_graph())
    graph = tf.compat.v1.GraphDef.FromString(serialized)
    nodes = [list(graph.node)] + [list(f.node_def) for f in graph.library.function]
    found: list[str] = []
    for group in nodes:
        by_name = {node.name: node for node in group}
        for node in group:
            if not node.op.startswith("DataServiceDataset"):
                continue
            for address in _address_inputs(node, by_name):
                normalized = check_service_address(address)
                if normalized not in found:
                    found.append(normalized)
    return found


def _address_inputs(node: Any, by_name: dict[str, Any]) -> list[str]:
    """The string constant fed to ``node``'s input named ``address`` (its op's definition)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    names = [arg.name for arg in op_def.input_arg] if op_def is not None else []
    if "address" not in names or len(node.input) <= names.index("address"):
        return []
    source = by_name.get(node.input[names.index("address")].lstrip("^").split(":")[0])
    if source is None or source.op != "Const":
        return []
    return [value.decode() for value in source.attr["value"].tensor.string_val]
