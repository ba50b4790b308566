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

    Found in the dataset's own structure, whoever called ``distribute`` or
    ``from_dataset_id`` and whatever was applied after it: first by walking its input
    datasets (``Dataset._inputs()``, the ``_address`` of a ``_DataServiceDatasetV2``),
    which costs microseconds; when the walk meets a dataset made by a function
    (``flat_map``, ``interleave``), whose inner datasets it cannot see, in its serialized
    graph (``Dataset._as_serialized_graph``: its ``GraphDef`` and function library, the
    constant fed to the ``address`` input of every ``DataServiceDataset`` node), which
    costs the serialization of the data a pipeline holds. Checked on TensorFlow 2.21.

    Returns:
        Each address as ``"grpc://HOST:PORT"``; empty when none.
    """
    from tfr_hooks.service.address import check_service_address

    found, opaque = _walk_services(dataset)
    if opaque and not found:
        found = _graph_services(dataset)
    normalized: list[str] = []
    for address in found:
        address = check_service_address(address)
        if address not in normalized:
            normalized.append(address)
    return normalized


def _walk_services(dataset: Any) -> tuple[list[str], bool]:
    """Addresses found by walking ``dataset``'s inputs; whether a function hid some."""
    import tensorflow as tf

    found: list[str] = []
    opaque = False
    seen: set[int] = set()
    stack = [dataset]
    while stack:
        data = stack.pop()
        if id(data) in seen:
            continue
        seen.add(id(data))
        name = type(data).__name__
        address = getattr(data, "_address", None)
        if "DataService" in name and address is not None:
            value = tf.get_static_value(address)  # a 0-d array, or bytes
            value = value.item() if hasattr(value, "item") else value
            if isinstance(value, bytes):
                found.append(value.decode())
        opaque = opaque or "FlatMap" in name or "Interleave" in name
        stack.extend(data._inputs())
    return found, opaque


def _graph_services(dataset: Any) -> list[str]:
    """Addresses fed to the ``DataServiceDataset`` nodes of ``dataset``'s serialized graph."""
    import tensorflow as tf

    if tf.executing_eagerly():
        serialized = dataset._as_serialized_graph().numpy()
    else:
        with tf.compat.v1.Session(graph=dataset._variant_tensor.graph) as session:
            serialized = session.run(dataset._as_serialized_graph())
    graph = tf.compat.v1.GraphDef.FromString(serialized)
    groups = [list(graph.node)] + [list(f.node_def) for f in graph.library.function]
    found: list[str] = []
    for group in groups:
        by_name = {node.name: node for node in group}
        for node in group:
            if node.op.startswith("DataServiceDataset"):
                found.extend(_address_inputs(node, by_name))
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
