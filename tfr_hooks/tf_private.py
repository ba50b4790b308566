"""Every private TensorFlow API the package uses, behind one small function each.

Some things the package needs have no public API in TensorFlow: cancelling a
``tf.function`` blocked in a read (a tf.data service that lost its workers waits
forever), asking whether op determinism is on, telling the default strategy from a real
one, finding which tf.data services a dataset reads through, walking a pipeline's
stages back to the reader's own dataset, and a single-device map
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

import functools
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "PRIVATE_APIS",
    "call_cancellable",
    "cancellation_manager",
    "dataset_stages",
    "in_multi_worker_mode",
    "is_cancelled",
    "is_default_strategy",
    "op_determinism_enabled",
    "random_record_reader",
    "records_from_offset",
    "saver_hook_checkpoint_dir",
    "service_addresses",
    "single_device_map",
    "start_cancel",
]

logger = logging.getLogger(__name__)

#: The private TensorFlow modules this module imports, by the names it takes from them
#: (``tests/test_tf_private.py`` imports each on the installed TensorFlow).
PRIVATE_APIS: dict[str, tuple[str, ...]] = {
    "tensorflow.python.eager.cancellation": (
        "CancellationManager",
        "CancellationManagerContext",
    ),
    "tensorflow.python.framework.config": ("is_op_determinism_enabled",),
    "tensorflow.python.framework.op_def_registry": ("get",),
    "tensorflow.python.data.ops.dataset_ops": ("DatasetSource", "UnaryDataset"),
    "tensorflow.python.data.ops.structured_function": ("StructuredFunctionWrapper",),
    "tensorflow.python.ops.gen_dataset_ops": ("map_dataset", "tf_record_dataset_v2"),
    "tensorflow.python.lib.io.tf_record": ("tf_record_random_reader",),
}


# -- cancelling a blocked read ----------------------------------------------------------


def cancellation_manager() -> Any:
    """A new ``CancellationManager``, for :func:`call_cancellable` and :func:`start_cancel`."""
    # TF 2.21: tensorflow.python.eager.cancellation.CancellationManager(). 2.17 not checked.
    from tensorflow.python.eager.cancellation import CancellationManager

    return CancellationManager()


def call_cancellable(manager: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a ``tf.function``), which :func:`start_cancel` on ``manager`` ends.

    A read through a tf.data service that lost its workers or dispatcher waits forever
    on TensorFlow 2.21, and no option bounds it; a function called inside a
    ``CancellationManagerContext`` registers its ops with the manager, whose
    ``start_cancel`` (from another thread) ends them with ``tf.errors.CancelledError``.
    (``CancellationManager.get_cancelable_function`` does the same for one concrete
    function.)
    """
    # TF 2.21: tensorflow.python.eager.cancellation.CancellationManagerContext(manager),
    # read by a tf.function's call. 2.17 not checked.
    from tensorflow.python.eager.cancellation import CancellationManagerContext

    with CancellationManagerContext(manager):
        return fn(*args)


def start_cancel(manager: Any) -> None:
    """Cancel the calls :func:`call_cancellable` runs under ``manager`` (any thread).

    A cancelled manager stays cancelled: later calls under it fail at once.
    """
    # TF 2.21: CancellationManager.start_cancel(). 2.17 not checked.
    manager.start_cancel()


def is_cancelled(manager: Any) -> bool:
    """Whether ``manager`` was cancelled (the next call then needs a new one)."""
    # TF 2.21: the CancellationManager.is_cancelled property. 2.17 not checked.
    return bool(manager.is_cancelled)


# -- reading a TFRecord file from a byte offset -------------------------------------------


def random_record_reader(path: str) -> Any:
    """A reader of the record that starts at a given byte offset of an uncompressed file.

    Its ``read(offset)`` returns ``(record, next_offset)``, checking both CRCs in C++;
    it raises ``tf.errors.DataLossError`` on a checksum mismatch or a record cut short,
    and ``IndexError`` at the end of the file. TensorFlow's public readers
    (``TFRecordDataset``, ``tf_record_iterator``) cannot start after a damaged record;
    the damage scan (:mod:`tfr_hooks.tfrecord.formats.damage`) reads on from the next good one.
    """
    # TF 2.21: tensorflow.python.lib.io.tf_record.tf_record_random_reader(path).read(offset).
    # 2.17 not checked.
    from tensorflow.python.lib.io.tf_record import tf_record_random_reader

    return tf_record_random_reader(path)


def records_from_offset(path: Any, offset: Any, buffer_size: Any) -> tf.data.Dataset:
    """The records of an uncompressed TFRecord file from byte ``offset`` on, as a dataset.

    ``offset`` must be where a record starts (a record index gives them): the file is
    entered there with a seek, nothing before it is read. ``buffer_size`` is the read
    buffer in bytes (about the bytes the caller will take keeps a short read short).
    Checksums are checked as by ``tf.data.TFRecordDataset``. The arguments may be tensors
    (a function of ``interleave``). ``tf.data.TFRecordDataset`` has no offset argument;
    the op under it has one.
    """
    # TF 2.21 (run by the tests): the op TFRecordDatasetV2(filenames, compression_type,
    # buffer_size, byte_offsets, metadata), gen_dataset_ops.tf_record_dataset_v2, wrapped
    # as tf.data's own _TFRecordDataset wraps TFRecordDataset (dataset_ops.DatasetSource,
    # `_name`, `_metadata`). The op and its `byte_offsets` input are in the raw_ops API of r2.14
    # and after (TensorFlow's API pages), so on the oldest supported 2.17: not run there
    # by hand, the oldest-constraints CI job runs tests/test_tf_private.py.
    # TF 2.21's C++ AsGraphDef of this dataset writes 3 of the op's 4 inputs, so a
    # pipeline whose top level holds it fails at its first iterator ("3 inputs specified
    # of 4 inputs"); made inside a dataset function (interleave, flat_map) it is never
    # serialized. Outside one, it is made inside a flat_map.
    import tensorflow as tf

    if tf.inside_function():
        return _offset_dataset_class()(path, offset, buffer_size)
    arguments = (
        tf.convert_to_tensor(path, tf.string),
        tf.cast(offset, tf.int64),
        tf.cast(buffer_size, tf.int64),
    )
    return tf.data.Dataset.from_tensors(arguments).flat_map(_offset_dataset_class())


@functools.cache
def _offset_dataset_class() -> Any:
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_dataset_ops

    class OffsetRecords(dataset_ops.DatasetSource):
        def __init__(self, path: Any, offset: Any, buffer_size: Any) -> None:
            self._name = None
            variant = gen_dataset_ops.tf_record_dataset_v2(
                tf.convert_to_tensor(path, tf.string),
                tf.constant("", tf.string),
                tf.cast(buffer_size, tf.int64),
                tf.cast(offset, tf.int64),
                metadata=self._metadata.SerializeToString(),
            )
            super().__init__(variant)

        @property
        def element_spec(self) -> Any:
            return tf.TensorSpec([], tf.string)

    return OffsetRecords


# -- what TensorFlow has no public getter for -------------------------------------------


def op_determinism_enabled() -> bool:
    """Whether ``tf.config.experimental.enable_op_determinism()`` is in effect.

    TensorFlow has no public getter; its own ``is_op_determinism_enabled`` is used where
    it exists, else the ``TF_DETERMINISTIC_OPS`` variable that also turns it on.
    """
    # TF 2.21: tensorflow.python.framework.config.is_op_determinism_enabled(). 2.17 not
    # checked (the variable is the fallback where the import fails).
    try:
        from tensorflow.python.framework.config import is_op_determinism_enabled
    except ImportError:  # moved in another TensorFlow: the variable is the fallback
        return os.environ.get("TF_DETERMINISTIC_OPS", "").lower() in ("1", "true")
    return bool(is_op_determinism_enabled())


def is_default_strategy(strategy: Any) -> bool:
    """Whether ``strategy`` is TensorFlow's default (no distribution) strategy.

    The one ``tf.distribute.get_strategy()`` returns outside any strategy's scope.
    """
    # TF 2.21: distribute_lib._DefaultDistributionStrategy, by its class name (the class
    # itself is private). 2.17 not checked.
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


def in_multi_worker_mode(strategy: Any) -> bool:
    """Whether ``strategy`` spans more than one worker process (``False`` for ``None``)."""
    # TF 2.21: StrategyExtendedV2._in_multi_worker_mode() (MultiWorkerMirroredStrategy's
    # is True with a cluster of several workers). 2.17 not checked. A strategy without it
    # counts as one worker.
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


def saver_hook_checkpoint_dir(saver: Any) -> str | None:
    """The ``checkpoint_dir`` a ``tf.compat.v1.train.CheckpointSaverHook`` was made with.

    ``None`` when it has none (or another TensorFlow keeps it elsewhere).
    """
    # TF 2.21: CheckpointSaverHook.__init__ sets `_checkpoint_dir`. 2.17 not checked.
    directory = getattr(saver, "_checkpoint_dir", None)
    return os.fspath(directory) if directory else None


# -- a single-device map ----------------------------------------------------------------


def single_device_map(data: tf.data.Dataset, fn: Callable[[Any], Any]) -> tf.data.Dataset:
    """``data.map(fn)``, its function instantiated as a single-device function.

    TensorFlow instantiates every function of a pipeline at each new iterator (in graph
    mode, at each initialization of the iterator). A tf.data function is by default a
    multi-device one, which Grappler's meta optimizer optimizes at every instantiation:
    most of the start of a small in-memory pass (measured in
    ``bench/results/memory_epoch_cost.md``). A function with the
    ``experimental_ints_on_device`` attribute is instantiated as a single-device function
    (``tensorflow/core/data/captured_function.cc``), without that pass. The attribute
    only keeps ``int32`` tensors in the memory of the function's device, and tf.data
    functions run on the host. The same elements, in the same order.

    Where TensorFlow's internals differ from those it was checked on, a plain ``map``.
    """
    try:
        return single_device_map_class()(data, fn)
    except (AttributeError, ImportError, TypeError) as error:  # another TF's internals
        logger.debug("plain map for the in-memory gather: %s", error)
        return data.map(fn)


@functools.cache
def single_device_map_class() -> Any:
    """The dataset class of :func:`single_device_map`: ``_MapDataset``, one attribute added.

    Raises:
        ImportError: This TensorFlow has not the modules it is built from.
    """
    # TF 2.21 (and the memory.py class it replaces, written against 2.17 and 2.21):
    # dataset_ops.UnaryDataset(input, variant) with `_input_dataset`, `_name`,
    # `_functions()`, `_common_args`, `_variant_tensor`;
    # structured_function.StructuredFunctionWrapper(fn, name, dataset=, defun_kwargs=);
    # gen_dataset_ops.map_dataset(variant, captured, f=, use_inter_op_parallelism=,
    # preserve_cardinality=, output_types/output_shapes/metadata in _common_args).
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops

    class SingleDeviceMap(dataset_ops.UnaryDataset):
        def __init__(self, data: Any, fn: Callable[[Any], Any]) -> None:
            self._input_dataset, self._name = data, None
            self._map_func = structured_function.StructuredFunctionWrapper(
                fn,
                "Dataset.map()",
                dataset=data,
                defun_kwargs={"experimental_ints_on_device": True},
            )
            variant = gen_dataset_ops.map_dataset(
                data._variant_tensor,
                self._map_func.function.captured_inputs,
                f=self._map_func.function,
                use_inter_op_parallelism=True,
                preserve_cardinality=True,
                **self._common_args,
            )
            super().__init__(data, variant)

        def _functions(self) -> list[Any]:
            return [self._map_func]

        @property
        def element_spec(self) -> Any:
            return self._map_func.output_structure

    return SingleDeviceMap


#: the op types of a tf.data service read (``distribute``, ``from_dataset_id``) start with
#: it (TF 2.21 builds ``DataServiceDatasetV4``), and so do the names of its dataset classes
_SERVICE_OP_PREFIX = "DataServiceDataset"


# -- the stages of a pipeline, and which keep every batch --------------------------------

#: the stages (their dataset classes, without ``_`` and ``Dataset``) that give one element
#: for each element of their input, in its order: a reader behind them still seeks
_BATCH_KEEPING = frozenset({"Map", "ParallelMap", "Prefetch", "Options"})


def dataset_stages(dataset: tf.data.Dataset) -> Iterator[tuple[Any, str, bool]]:
    """The stages of ``dataset``'s pipeline, from its last back along its single input.

    Each is ``(stage, name, keeps)``: the dataset of the stage, its name (``"Map"``,
    ``"Prefetch"``, ``"Filter"``, ``"Take"``, ...) and whether it gives exactly one
    element for each element of its input, in its order (``map``, ``prefetch``,
    ``with_options``), so that a reader behind such stages can be entered at a batch
    and the pipeline goes on from there. The walk ends at a source or at a stage of
    several inputs (``zip``, ``concatenate``). A ``tf.compat.v1`` dataset is walked as
    the dataset it wraps.

    Where TensorFlow's internals differ from those it was checked on, it yields the
    given dataset alone, as a stage that does not keep every batch: a reader behind it
    is not found, and a resumed run replays (never a wrong seek).
    """
    # TF 2.21: DatasetV2._inputs() (every dataset class; a DatasetV1Adapter wraps its V2
    # dataset as `_dataset`); the classes of map (map_op._MapDataset,
    # _ParallelMapDataset), prefetch (prefetch_op._PrefetchDataset) and with_options
    # (options_op._OptionsDataset). 2.17 not checked.
    import tensorflow as tf

    current: Any = dataset
    seen: set[int] = set()
    while id(current) not in seen:
        seen.add(id(current))
        while isinstance(current, tf.compat.v1.data.Dataset) and isinstance(
            getattr(current, "_dataset", None), tf.data.Dataset
        ):
            current = current._dataset
        name = re.sub(r"^_+|Dataset(V\d+)?$", "", type(current).__name__)
        try:
            inputs = list(current._inputs())
        except (AttributeError, NotImplementedError, TypeError):  # another TF's internals
            yield current, name, False
            return
        yield current, name, name in _BATCH_KEEPING and len(inputs) == 1
        if len(inputs) != 1:
            return
        current = inputs[0]


# -- the tf.data services a dataset reads through ---------------------------------------


def service_addresses(dataset: tf.data.Dataset) -> list[str]:
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
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    # TF 2.21: DatasetV2._as_serialized_graph() (a scalar string tensor, evaluated in a
    # session of the dataset's graph in graph mode). 2.17 not checked.
    serialized = dataset._as_serialized_graph()
    if tf.executing_eagerly():
        data = serialized.numpy()
    else:
        with tf.compat.v1.Session(graph=serialized.graph) as session:
            data = session.run(serialized)
    return graph_pb2.GraphDef.FromString(bytes(data))


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
