"""Every private TensorFlow API the package uses, behind one small function each.

Some things the package needs have no public API in TensorFlow: cancelling a
``tf.function`` blocked in a read (a tf.data service that lost its workers waits
forever), asking whether op determinism is on, telling the default strategy from a real
one, finding which tf.data services a dataset reads through, and a single-device map
for the in-memory gather. They are used here only, so that a TensorFlow release that
moves one is one module to fix, and ``tests/test_tf_private.py`` checks each of them on
the installed TensorFlow with real objects, so that such a release fails a test instead
of a run.

Each function names the versions it was checked against: TensorFlow 2.21 (installed,
run by the tests). The oldest supported TensorFlow (2.17, ``tests/constraints-oldest.txt``)
was not at hand where this module was written: the functions that say "2.17 not checked"
rely on the oldest-constraints CI job (``tox -e py310-oldest-tests``) running
``tests/test_tf_private.py``. Each degrades as gracefully as its use allows (a fallback,
or an error naming the API), never silently to a wrong answer.

This module imports nothing of the package, and TensorFlow only inside its functions
(``tfr_hooks.task`` is read by launchers that never import TensorFlow).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["service_addresses"]

#: the op types of a tf.data service read (``distribute``, ``from_dataset_id``) start with
#: it (TF 2.21 builds ``DataServiceDatasetV4``), and so do the names of its dataset classes
_SERVICE_OP_PREFIX = "DataServiceDataset"


# -- the tf.data services a dataset reads through ---------------------------------------


def service_addresses(dataset: Any) -> list[str]:
    """The addresses (``"grpc://HOST:PORT"``) of every tf.data service ``dataset`` reads.

    Found in the pipeline itself, so a dataset keeps telling after any transformation the
    user adds (``.map``, ``.prefetch``, ``.with_options``, ``.apply(...)``): the dataset's
    inputs are walked back to its sources, and the graph of each function a stage runs
    (``flat_map``, ``interleave``, ...) is searched with its function library, so that a
    service read inside one is found too. Works in eager mode and in graph mode
    (``tf.compat.v1`` datasets included).

    The walk costs microseconds a stage and never serializes the data a pipeline embeds
    (``from_tensor_slices`` of a large array); only where TensorFlow's internals differ
    from those it was checked on does it fall back to the dataset's serialized graph,
    whose cost grows with such data.

    Args:
        dataset: A ``tf.data.Dataset`` (or ``tf.compat.v1.data.Dataset``).

    Returns:
        The addresses, each once, in the order the walk meets them (the last stage's
        first); ``[]`` when the dataset reads no tf.data service.

    Raises:
        TypeError: ``dataset`` is not a ``tf.data.Dataset``.
    """
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            f"Expected `dataset` to be a tf.data.Dataset. Received: dataset={dataset!r}"
        )
    try:
        found = list(_walk_services(dataset))
    except (AttributeError, NotImplementedError, TypeError):  # another TF's internals
        found = list(_graph_services(_serialized_graph(dataset)))
    return list(dict.fromkeys(found))


def _walk_services(dataset: Any) -> Iterator[str]:
    """The services of ``dataset``'s stages, walked through its inputs and functions."""
    # TF 2.21: DatasetV2._inputs() (abstract, implemented by every dataset class, the
    # V1 adapter's forwards to the V2 dataset it wraps) and _functions() (the
    # StructuredFunctionWrapper of each function a stage runs; `.function` is a
    # ConcreteFunction); the service dataset (data_service_ops._DataServiceDatasetV2)
    # keeps its `_address` and `_protocol` tensors; a tf.compat.v1 dataset
    # (DatasetV1Adapter, _DataServiceDatasetV1) wraps its V2 dataset as `_dataset`.
    # 2.17 not checked.
    import tensorflow as tf

    pending, seen = [dataset], set()
    while pending:
        current = pending.pop()
        while isinstance(current, tf.compat.v1.data.Dataset) and isinstance(
            getattr(current, "_dataset", None), tf.data.Dataset
        ):
            current = current._dataset
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _SERVICE_OP_PREFIX in type(current).__name__:
            yield _address_of(current._protocol, current._address)
        for wrapper in current._functions():
            yield from _graph_services(wrapper.function.graph.as_graph_def())
        pending.extend(reversed(current._inputs()))


def _address_of(protocol: Any, address: Any) -> str:
    """``"PROTOCOL://ADDRESS"`` from the service dataset's two string tensors."""
    import tensorflow as tf

    texts = []
    for tensor in (protocol, address):
        value = tf.get_static_value(tensor)
        if value is None:  # fed at run time (a placeholder): not known here
            raise TypeError(f"a tf.data service address fed at run time: {tensor!r}")
        value = getattr(value, "item", lambda v=value: v)()  # graph mode: a 0-d array
        if not isinstance(value, bytes):
            raise TypeError(f"a tf.data service address that is not a string: {value!r}")
        texts.append(value.decode())
    return f"{texts[0]}://{texts[1]}"


def _serialized_graph(dataset: Any) -> Any:
    """The ``GraphDef`` of ``dataset``'s whole pipeline, its functions in the library."""
    from tensorflow.core.framework import graph_pb2

    # TF 2.21: DatasetV2._as_serialized_graph() (a scalar string tensor). 2.17 not checked.
    serialized = dataset._as_serialized_graph()
    return graph_pb2.GraphDef.FromString(bytes(serialized.numpy()))


def _graph_services(graph_def: Any) -> Iterator[str]:
    """The services read by the ``DataServiceDataset*`` nodes of ``graph_def``.

    Searches the graph's nodes and those of each function of its library; the address
    and protocol are the string constants fed to the node's ``address`` and ``protocol``
    inputs (a node whose address is not a constant in its graph is skipped).
    """
    yield from _nodes_services(graph_def.node)
    for function in graph_def.library.function:
        yield from _nodes_services(function.node_def)


def _nodes_services(nodes: Iterable[Any]) -> Iterator[str]:
    """:func:`_graph_services` in one graph or function body (``NodeDef``s)."""
    nodes = list(nodes)
    by_name = {node.name: node for node in nodes}
    for node in nodes:
        if not node.op.startswith(_SERVICE_OP_PREFIX):
            continue
        protocol = _constant_input(node, "protocol", by_name)
        address = _constant_input(node, "address", by_name)
        if protocol is not None and address is not None:
            yield f"{protocol}://{address}"


def _constant_input(node: Any, name: str, by_name: dict[str, Any]) -> str | None:
    """The string constant fed to ``node``'s input argument ``name``, or ``None``."""
    import tensorflow as tf

    index = _input_index(node.op, name)
    inputs = [text for text in node.input if not text.startswith("^")]
    if index is None or index >= len(inputs):
        return None
    # "name", "name:0" in a GraphDef; "name:output:0" in a FunctionDef
    source = by_name.get(inputs[index].split(":")[0])
    if source is None or source.op != "Const":
        return None
    value = tf.make_ndarray(source.attr["value"].tensor)
    text = value.item() if value.shape == () else None
    return text.decode() if isinstance(text, bytes) else None


def _input_index(op_type: str, name: str) -> int | None:
    """The position of input argument ``name`` of the op ``op_type``, or ``None``."""
    # TF 2.21: op_def_registry.get(type) -> OpDef (every DataServiceDataset* version has
    # a single-tensor `address` and `protocol` input). 2.17 not checked.
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    names = [arg.name for arg in op_def.input_arg] if op_def is not None else []
    return names.index(name) if name in names else None
