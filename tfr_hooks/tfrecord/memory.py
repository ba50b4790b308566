"""The in-memory pipeline: decode the shards once, then gather batches by index.

When the decoded data fits in memory, the fastest parse is the one that never happens:
:func:`load` reads and decodes every shard once (in parallel, one thread per core), into
one numpy array per feature, and :func:`memory_dataset` serves batches by gathering rows
of those arrays, each epoch along a fresh permutation of all the examples (what Keras
``fit`` does for numpy arrays). There is no per-example ``tf.data`` element: each
element of the pipeline is a slice of the permutation (several batches' worth), gathered
with one ``tf.gather`` per feature and cut into batches with ``rebatch``. Small dense
data (up to :data:`WHOLE_PASS_BYTES`) is gathered a whole pass at a time by one function
(the next pass while this one is consumed): every function a pass's pipeline runs costs
milliseconds to start at each new iterator, which is most of a pass over a few thousand
examples (bench/memory_epoch_cost.py measures it).

The arrays reach TensorFlow through a ``tf.numpy_function`` evaluated once per pass
(at each new iterator, or each initialization of a graph-mode iterator), which hands
numpy's 64-byte-aligned buffers over without a copy: the data is never embedded in a
graph or serialized with the dataset (no ``GraphDef`` 2 GB limit, no copy when tf.data
rewrites its graph) and lives in memory once. Small dense data gathered whole, in
TF2, is instead made eager tensors once, inputs of the gather function (a new iterator
then calls no Python), and its pipeline turns tf.data's default graph rewrites off: a
rewrite at each new iterator cost milliseconds and serialized those tensors (32 MiB at
most) into the rewritten graph. Its gather is a single-device function
(:func:`single_device_map`): Grappler does not optimize it anew at each iterator.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import CorruptRecordError, TFRecordError
from tfr_hooks.tfrecord.packed import pass_seed, unpack
from tfr_hooks.tfrecord.ragged import RaggedArray, batch_examples, is_list
from tfr_hooks.tfrecord.schema import Schema

__all__ = [
    "load",
    "load_mapped",
    "mapped_sample_nbytes",
    "fresh_randomness",
    "memory_dataset",
    "single_device_map",
    "decoded_nbytes",
    "mean_lengths",
    "default_memory_budget",
    "count_examples",
    "records_nbytes",
    "LENGTH_SAMPLE",
    "GATHER_EXAMPLES",
    "GATHER_BYTES",
    "WHOLE_PASS_BYTES",
    "PARALLEL_CALLS",
    "LOAD_CHUNK",
    "Held",
    "nbytes_of",
]

logger = logging.getLogger(__name__)

#: What is held for one feature: an array ``[examples, ...]``, or values and row offsets.
Held = np.ndarray | RaggedArray

#: Examples gathered by one element of the pipeline at most (then cut into batches).
GATHER_EXAMPLES = 4096
#: Bytes gathered by one element at most: large examples (images) are gathered a batch
#: at a time, as cutting a big gathered chunk into batches copies the data twice.
GATHER_BYTES = 1 << 20
#: Bytes held at most for a pass to be gathered whole: one function call a pass, the
#: permutation and the gather of every example at once, then cut into batches. Each
#: function a pass runs costs milliseconds to start at every new iterator, the cost that
#: dominates a pass over a small data set; the whole pass costs its bytes once more.
WHOLE_PASS_BYTES = 32 << 20
#: Examples decoded together while loading (small: the chunks in flight add to the peak).
LOAD_CHUNK = 1024
_ALIGN = 64  # TensorFlow takes a numpy buffer without copying when it is this aligned
_FALLBACK_BUDGET = 2 << 30
_WAIT_SECS = 60.0
#: Parallel calls of the pipelines' per-batch maps: one per core, at most 8.
PARALLEL_CALLS = max(1, min(os.cpu_count() or 1, 8))


def default_memory_budget() -> int:
    """Half of the memory available now (``MemAvailable`` on Linux), else 2 GiB.

    Half, because training needs memory of its own (the model, the optimizer state and
    TensorFlow's buffers), and a pipeline that pushes the machine into swap is far
    slower than streaming from disk.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages) // 2
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_BUDGET


def decoded_nbytes(
    schema: Schema,
    examples: int,
    file_bytes: int = 0,
    lengths: Mapping[str, float] | None = None,
) -> int:
    """Bytes the decoded examples take in memory.

    Fixed-size numeric features count exactly; string features are counted as the
    files' size (their bytes are in the files) plus a pointer per value. A feature of
    varying length counts its mean values per example, and a feature list its mean
    frames, from ``lengths`` (see :func:`mean_lengths`); one value or frame without it.

    Args:
        schema: The features decoded.
        examples: How many examples.
        file_bytes: The files' size, for string features.
        lengths: Mean values (varying length) or frames (feature list) per example, by
            feature name.
    """
    lengths = lengths or {}
    total = 0.0
    strings = False
    for feature in schema:
        count = lengths.get(feature.name, 1.0) if feature.varying or feature.sequence else 1.0
        if feature.dtype in ("string", "bytes"):
            strings = True
            total += examples * count * (feature.size or 1) * 8
        elif feature.varying:
            total += examples * count * np.dtype(feature.dtype).itemsize
        else:
            total += examples * count * feature.raw_nbytes
    return int(total) + (file_bytes if strings else 0)


def mean_lengths(
    files: Sequence[str], compression: str | None, schema: Schema, sample: int = 256
) -> dict[str, float]:
    """Mean values (varying length) or frames (feature list) per example, sampled.

    Reads the first ``sample`` records of ``files`` as protos, in Python: it needs no
    TensorFlow graph or eager context, so it serves graph mode too. Packed shards and
    records that are no Example are not sampled.

    Args:
        files: The files.
        compression: Their compression, or ``None`` to detect it.
        schema: The features; only those of varying length and feature lists are counted.
        sample: Records read at most.

    Returns:
        The mean by feature name; empty if no record was read or nothing varies.
    """
    from tfr_hooks.tfrecord.files import iter_records
    from tfr_hooks.tfrecord.records import NEITHER, as_record_content

    counted = [f for f in schema if f.varying or f.sequence]
    totals = dict.fromkeys((f.name for f in counted), 0)
    read = 0
    records = itertools.chain.from_iterable(iter_records(p, compression) for p in files)
    for record in itertools.islice(records if counted else (), sample):
        content = as_record_content(record)
        if content.kind == NEITHER:
            continue
        read += 1
        for feature in counted:
            totals[feature.name] += _length(content, feature)
    return {name: total / read for name, total in totals.items()} if read else {}


def _length(content: Any, feature: Any) -> int:
    """Frames of a feature list, or values of a context feature, in one record."""
    if feature.sequence:
        lists = content.feature_lists
        return len(lists[feature.name].feature) if feature.name in lists else 0
    if feature.name not in content.context:
        return 0
    value = content.context[feature.name]
    kind = value.WhichOneof("kind")
    return 0 if kind is None else len(getattr(value, kind).value)


#: Examples read to estimate the memory of features of varying length.
LENGTH_SAMPLE = 256


def records_nbytes(
    files: Sequence[str],
    compression: str,
    schema: Schema,
    examples: int,
    file_bytes: int = 0,
    per_record: int = 1,
) -> int:
    """Bytes the parsed (decoded by the schema) examples take in memory.

    Exact for fixed-size numeric features (:func:`decoded_nbytes`); a feature of
    varying length or a feature list (its frames) is estimated from the first
    :data:`LENGTH_SAMPLE` examples.
    """
    if not any(f.varying or f.sequence for f in schema):  # frames: sampled too
        return decoded_nbytes(schema, examples, file_bytes)
    sample = mapped_sample_nbytes(
        files,
        compression,
        schema,
        lambda example: example,
        per_record=per_record,
        sample=LENGTH_SAMPLE,
    )
    if sample is None:
        return decoded_nbytes(schema, examples, file_bytes)
    return sample[0] * examples // max(1, sample[1])


def count_examples(files: Sequence[str], compression: str, per_record: int) -> int:
    """Count the examples of files that have no ``schema.json`` listing them."""
    from tfr_hooks.tfrecord.files import iter_records

    if per_record != 1:
        raise ValueError("Packed shards are counted from their schema.json")
    return sum(sum(1 for _ in iter_records(path, compression)) for path in files)


def _empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized array whose buffer TensorFlow can use without copying."""
    dtype = np.dtype(dtype)
    if dtype.kind == "O":
        return np.empty(shape, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + _ALIGN, np.uint8)
    offset = (-buffer.ctypes.data) % _ALIGN
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


def _aligned(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy of it in a buffer TensorFlow can use without copying."""
    if array.dtype.kind == "O":
        return array
    if array.flags.c_contiguous and array.ctypes.data % _ALIGN == 0:
        return array
    copy = _empty(array.shape, array.dtype)
    copy[...] = array
    return copy


def _numpy_dtype(dtype: str) -> Any:
    return object if dtype in ("string", "bytes") else np.dtype(dtype)


class _Progress:
    """A progress bar on stderr that shows only when loading takes more than 2 s."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        self.lock = threading.Lock()
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is a dependency
                return
            self.bar = tqdm(
                total=total, unit="ex", desc="loading", file=sys.stderr, leave=False, delay=2.0
            )

    def update(self, count: int) -> None:
        if self.bar is not None:
            with self.lock:
                self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: Shape (after the examples' dimension) and numpy dtype of each dense feature held.
_Dense = Mapping[str, tuple[tuple[Any, ...], Any]]


class _Join:
    """Decoded chunks, joined into one array per feature in the order of their slots.

    Dense features go into arrays allocated once when the number of examples is known
    (:meth:`allocate`, then :meth:`put` at an offset), else the chunks are kept and
    copied into one array at the end (twice the memory for a moment). Features of
    varying length arrive as ``(values, row_splits)`` and are joined into a
    :class:`RaggedArray` at the end. A slot is one file: its examples follow those of
    the slots before it. Threads may fill different slots at once.
    """

    def __init__(self, ragged: Sequence[str], slots: int = 1) -> None:
        self.ragged = list(ragged)
        self.out: dict[str, np.ndarray] | None = None
        self.parts: list[list[dict[str, np.ndarray]]] = [[] for _ in range(slots)]
        self.lists: dict[str, list[list[tuple[np.ndarray, np.ndarray]]]] = {
            name: [[] for _ in range(slots)] for name in self.ragged
        }

    def allocate(self, count: int, dense: _Dense) -> None:
        """Allocate the dense features' arrays for ``count`` examples."""
        self.out = {name: _empty((count, *shape), dtype) for name, (shape, dtype) in dense.items()}

    def split(self, values: dict[str, Any], slot: int = 0) -> int:
        """Take the features of varying length out of the chunk ``values``; its examples."""
        for name in self.ragged:
            self.lists[name][slot].append(values.pop(name))
        if values:
            return len(next(iter(values.values())))
        return len(self.lists[self.ragged[0]][slot][-1][1]) - 1

    def put(self, values: dict[str, np.ndarray], slot: int = 0, at: int = 0) -> None:
        """Store the dense features of a chunk: in place from example ``at`` if allocated."""
        if self.out is None:
            if values:
                self.parts[slot].append(values)
            return
        for name, value in values.items():
            self.out[name][at : at + len(value)] = value

    def join(self, dense: _Dense, count: int | None = None) -> dict[str, Held]:
        """The held arrays (the allocated ones cut to ``count`` examples, if given)."""
        held: dict[str, Held] = {
            name: RaggedArray.join([part for of_slot in self.lists[name] for part in of_slot])
            for name in self.ragged
        }
        if self.out is not None:
            held.update({k: v if count is None else v[:count] for k, v in self.out.items()})
            return held
        total = sum(len(next(iter(p.values()))) for of_slot in self.parts for p in of_slot)
        joined = {name: _empty((total, *shape), dtype) for name, (shape, dtype) in dense.items()}
        start = 0
        for of_slot in self.parts:
            for values in of_slot:
                size = len(next(iter(values.values())))
                for name, value in values.items():
                    joined[name][start : start + size] = value
                start += size
            of_slot.clear()
        held.update(joined)
        return held


class _FileReaders:
    """One graph and session reading (and decoding) whole files, one iterator per worker."""

    def __init__(self, compression: str, schema: Schema, per_record: int, workers: int) -> None:
        self.schema, self.compression = schema, compression
        graph = tf.Graph()
        with graph.as_default():
            self.path = tf.compat.v1.placeholder(tf.string, [], name="path")
            records = tf.data.TFRecordDataset(self.path, compression_type=compression)
            chunks = records.batch(max(1, LOAD_CHUNK // per_record))
            if per_record == 1:
                parsed = chunks.map(schema.parse_batch)
            else:
                parsed = chunks.map(lambda serialized: unpack(schema, serialized, per_record))
            self.iterators = [
                tf.compat.v1.data.make_initializable_iterator(parsed) for _ in range(workers)
            ]
            self.nexts = [iterator.get_next() for iterator in self.iterators]
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=workers + 1)
        self.session = tf.compat.v1.Session(graph=graph, config=config)

    def chunks(self, worker: int, name: str) -> Iterator[dict[str, Any]]:
        """The decoded chunks of file ``name`` (ragged features as values and splits)."""
        self.session.run(self.iterators[worker].initializer, {self.path: name})
        while True:
            try:
                values = self.session.run(self.nexts[worker])
            except tf.errors.OutOfRangeError:
                return
            except tf.errors.OpError as error:
                raise _explain(error, name, self.schema, self.compression) from error
            for feature in self.schema:
                if feature.varying or feature.sequence:
                    value = values[feature.name]
                    values[feature.name] = (value.values, value.row_splits)
            yield values

    def close(self) -> None:
        self.session.close()


def load(
    files: Sequence[str],
    compression: str,
    schema: Schema,
    *,
    per_record: int = 1,
    counts: Sequence[int | None] | None = None,
    progress: bool = True,
) -> dict[str, Held]:
    """Read and decode every example of ``files`` into one numpy array per feature.

    Files are read in parallel (one thread per core, at most 8), in order: the result
    holds the examples of ``files[0]``, then ``files[1]``... With every file's example
    count known (from ``schema.json``), the arrays are allocated once and filled in
    place; otherwise the decoded chunks are joined at the end (twice the memory for a
    moment). A feature of varying length is held as a :class:`RaggedArray` (its values
    and row offsets), joined from the chunks at the end; so is a feature list (its
    frames, ``[total frames, *frame shape]``, and their offsets).

    Args:
        files: The shards.
        compression: Their compression.
        schema: The features to decode (fixed shapes).
        per_record: Examples per record (packed shards).
        counts: Each file's examples, where known.
        progress: Show a progress bar on stderr when loading takes more than 2 s.

    Returns:
        Feature name to array of shape ``[examples, *feature.shape]`` (a
        :class:`RaggedArray` for a feature of varying length).

    Raises:
        CorruptRecordError: If a file is damaged, or holds another number of examples
            than ``schema.json`` says.
        SchemaMismatchError: If records do not match the schema.
    """
    known = counts is not None and all(c is not None for c in counts)
    sizes = [int(c or 0) for c in counts] if counts is not None and known else []
    workers = max(1, min(len(files), os.cpu_count() or 1, 8))
    _check_frames(schema)
    ragged = [f.name for f in schema if f.varying or f.sequence]  # feature lists: frames
    dense = {f.name: (f.shape, _numpy_dtype(f.dtype)) for f in schema if f.name not in ragged}
    join = _Join(ragged, slots=len(files))
    offsets = list(itertools.accumulate(sizes, initial=0))
    if known:
        join.allocate(offsets[-1], dense)
    readers = _FileReaders(compression, schema, per_record, workers)
    bar = _Progress(offsets[-1] if known else None, progress)

    def read(worker: int, index: int) -> None:
        name, got = files[index], 0
        for values in readers.chunks(worker, name):
            size = join.split(values, index)
            if known and got + size > sizes[index]:
                raise _wrong_count(name, f"more than {sizes[index]}", sizes[index])
            join.put(values, index, offsets[index] + got if known else 0)
            got += size
            bar.update(size)
        if known and got != sizes[index]:
            raise _wrong_count(name, str(got), sizes[index])

    try:
        _in_parallel(read, len(files), workers)
    finally:
        bar.close()
        readers.close()
    held = join.join(dense)
    return {f.name: held[f.name] for f in schema}


def _check_frames(schema: Schema) -> None:
    """Refuse feature lists whose frames vary in length: they are not held in memory."""
    varying = [f.name for f in schema.sequence_features if f.varying]
    if varying:
        raise ValueError(
            "Expected feature lists of frames of one fixed shape to hold them in memory; "
            f"the frames of {varying} vary in length. Stream them with in_memory=False, "
            f"or pad each frame to one length in map_fn. Received: feature lists {varying}"
        )


def _in_parallel(read: Callable[[int, int], None], count: int, workers: int) -> None:
    """``read(worker, index)`` for every index below ``count``, on ``workers`` threads.

    Worker ``w`` takes the indices ``w``, ``w + workers``...; the first error raised
    cancels the work not yet started and is raised here.
    """

    def run_group(worker: int) -> None:
        for index in range(worker, count, workers):
            read(worker, index)

    with concurrent.futures.ThreadPoolExecutor(workers, "tfr_hooks_load") as pool:
        pending = {pool.submit(run_group, w) for w in range(workers)}
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=_WAIT_SECS, return_when=concurrent.futures.FIRST_EXCEPTION
            )
            for future in done:
                error = future.exception()
                if error is not None:
                    for other in pending:
                        other.cancel()
                    raise error


def nbytes_of(held: Held) -> int:
    """Bytes held in memory for one feature (with the bytes of its strings)."""
    if isinstance(held, RaggedArray):
        return held.nbytes
    if held.dtype.kind == "O":
        return int(sum(len(x) + 8 for x in held.ravel()))
    return int(held.nbytes)


def _wrong_count(path: str, found: str, expected: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"TFRecord file {path!r} does not hold the examples its schema.json lists: "
        f"expected {expected} examples; found {found}. It was probably overwritten or "
        "damaged; write it again.",
        file=path,
    )


def _explain(error: BaseException, path: str, schema: Schema, compression: str) -> BaseException:
    from tfr_hooks.tfrecord.diagnose import explain_error

    found = explain_error(error, [path], schema, compression)
    if found is not None:
        return found
    text = (error.message if isinstance(error, tf.errors.OpError) else str(error)).strip()
    return TFRecordError(
        f"TFRecord file {path!r} could not be loaded into memory: "
        f"{text.splitlines()[0] if text else type(error).__name__}",
        file=path,
    )


def memory_dataset(
    arrays: Mapping[str, Held],
    batch_size: int,
    *,
    shuffle: bool,
    seed: int | None,
    drop_remainder: bool,
    num_epochs: int | None,
    prefetch: int | None,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    buckets: np.ndarray | None = None,
    batch_fn: Callable[[dict[str, Any]], Any] | None = None,
    select: Callable[[dict[str, Any]], Any] | None = None,
) -> tf.data.Dataset:
    """Batches gathered from in-memory arrays, a fresh permutation every pass.

    Each pass (epoch) ends with its own final batch (smaller, or dropped with
    ``drop_remainder``). Shuffled passes follow a sequence of permutations fixed by
    ``seed``: a new iterator (or, in graph mode, each initialization of the iterator)
    starts the next pass of that sequence.

    A :class:`RaggedArray` (a feature of varying length) is gathered as ragged rows.
    With ``buckets``, each batch holds examples of one bucket: a pass takes its
    permutation, keeps each bucket's examples in that order, cuts every bucket into
    batches (each with its own final, smaller batch) and serves those batches in a
    random order. The number of batches of a pass is the same every pass.

    Args:
        arrays: Feature name to array (or :class:`RaggedArray`), all of the same length.
        batch_size: Examples per batch.
        shuffle: Whether each pass follows a new permutation (else the stored order).
        seed: Seed of the sequence of permutations.
        drop_remainder: Whether to drop each pass's (each bucket's) final, smaller batch.
        num_epochs: Passes; ``None`` for endless.
        prefetch: Batches to prefetch (0 or ``None`` for none).
        map_fn: Applied to each gathered example, in parallel, before batching (the
            arrays then hold encoded examples that ``map_fn`` decodes every pass).
        buckets: The bucket of each example (``int64``), or ``None``.
        batch_fn: Applied to each gathered batch in the same parallel step as the
            gather (padding), when there is no ``map_fn``.
        select: Applied last to each batch (a dict): the features ``as_tuple`` names.
            It must select features, not compute: it runs on a whole pass at once when
            the pass is gathered whole.

    Returns:
        A dataset of dicts of batch tensors (or what ``select`` returns), of exact
        known cardinality.

    Raises:
        ValueError: If ``drop_remainder`` leaves no batch.
    """
    gather = _Gather(arrays, batch_size, shuffle, drop_remainder, buckets)
    if batch_fn is not None and map_fn is not None:
        raise ValueError("Expected `batch_fn` without `map_fn` (apply it to the batches)")
    gather.map_fn, gather.batch_fn, gather.select = map_fn, batch_fn, select
    if tf.executing_eagerly():
        salts = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    else:
        start = pass_seed(seed)
        salts = single_device_map(
            tf.data.Dataset.random(seed=seed), lambda s: tf.bitwise.bitwise_xor(s, start)
        )
    if num_epochs is not None:
        salts = salts.take(num_epochs)
    if gather.whole:  # the next pass gathered while this one is consumed, if there is one
        batches = gather.whole_passes(salts, overlap=num_epochs != 1)
    else:
        batches = salts.flat_map(gather.one_pass)
    total = tf.data.INFINITE_CARDINALITY if num_epochs is None else num_epochs * gather.per_pass
    batches = batches.apply(tf.data.experimental.assert_cardinality(total))
    if prefetch:
        batches = batches.prefetch(prefetch)
    if select is not None and not gather.whole:  # gathered whole, selected with the gather
        # after the prefetch, as the structure map was before: selecting on the prefetch
        # thread halved the TF2 in-memory input-alone rate (input_memory_tf2, 60,000 digits)
        batches = batches.map(select)
    if gather.whole:  # a new iterator would rewrite the graph (4 ms, and copy the held data)
        options = tf.data.Options()
        options.experimental_optimization.apply_default_optimizations = False
        batches = batches.with_options(options)
    return batches


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

    Private API (``structured_function``, ``gen_dataset_ops.map_dataset``), checked on
    TensorFlow 2.17 and 2.21; where it differs, a plain ``map``.
    """
    try:
        return _single_device_map_class()(data, fn)
    except (AttributeError, ImportError, TypeError) as error:  # another TF's internals
        logger.debug("plain map for the in-memory gather: %s", error)
        return data.map(fn)


@functools.cache
def _single_device_map_class() -> Any:
    """The dataset class of :func:`single_device_map`: ``_MapDataset``, one attribute added."""
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops

    class SingleDeviceMap(dataset_ops.UnaryDataset):
        def __init__(self, data: tf.data.Dataset, fn: Callable[[Any], Any]) -> None:
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


class _Gather:
    """The passes of :func:`memory_dataset`: slices of a permutation, gathered in batches.

    Each gathered element is one batch when rows vary in length or batches follow
    buckets, else several batches' worth (up to :data:`GATHER_BYTES`), cut into batches.
    """

    def __init__(
        self,
        arrays: Mapping[str, Held],
        batch_size: int,
        shuffle: bool,
        drop_remainder: bool,
        buckets: np.ndarray | None,
    ) -> None:
        self.names = list(arrays)
        # TensorFlow copies an unaligned buffer at every hand-over (0.1 ms a MB): copy once
        self.held: list[Held] = [
            RaggedArray(_aligned(value.values), _aligned(value.row_splits))
            if isinstance(value, RaggedArray)
            else _aligned(value)
            for value in (arrays[name] for name in self.names)
        ]
        self.flat: list[np.ndarray] = []
        for value in self.held:
            if isinstance(value, RaggedArray):
                self.flat.extend([value.values, value.row_splits])
            else:
                self.flat.append(value)
        self.bucketed = buckets is not None
        if buckets is not None:
            self.flat.append(_aligned(np.ascontiguousarray(buckets, np.int64)))
        self.count = count = len(self.held[0])
        self.batch_size, self.shuffle, self.drop_remainder = batch_size, shuffle, drop_remainder
        self.plan = _batch_plan(count, batch_size, drop_remainder, buckets)
        self.per_pass = (
            len(self.plan[0])
            if self.plan is not None
            else (count // batch_size if drop_remainder else math.ceil(count / batch_size))
        )
        if self.per_pass == 0:
            raise ValueError(
                f"Expected at least `batch_size` examples with `drop_remainder`. Received: "
                f"batch_size={batch_size} for {count} examples"
            )
        self.dtypes = [
            tf.string if v.dtype.kind in "OSU" else tf.as_dtype(v.dtype) for v in self.flat
        ]
        per_example = max(1, sum(v.nbytes for v in self.flat) // max(1, count))
        gather = min(GATHER_EXAMPLES, GATHER_BYTES // per_example)
        ragged = any(isinstance(value, RaggedArray) for value in self.held)
        self.chunk = batch_size if ragged else batch_size * max(1, gather // batch_size)
        self.full = count // self.chunk
        self.map_fn: Callable[[dict[str, Any]], Any] | None = None
        self.batch_fn: Callable[[dict[str, Any]], Any] | None = None
        self.select: Callable[[dict[str, Any]], Any] | None = None
        self.small = not ragged and sum(v.nbytes for v in self.flat) <= WHOLE_PASS_BYTES
        self.small = self.small and all(v.dtype.kind not in "OSU" for v in self.flat)

    @property
    def whole(self) -> bool:
        """Whether each pass is gathered whole (small dense data, no buckets or functions)."""
        return self.small and self.plan is None and self.map_fn is None and self.batch_fn is None

    def whole_passes(self, salts: tf.data.Dataset, overlap: bool) -> tf.data.Dataset:
        """The batches of the passes ``salts`` shuffle, each pass gathered whole.

        One function a pass (hand the arrays over, permute, gather every example, and
        ``select``), then cut into the batches :meth:`one_pass` gives: the same
        examples in the same order. With ``overlap``, the next pass is gathered while
        this one is consumed (a thread started at each new iterator: for one pass an
        iterator, it would only add to the start).
        """
        full = self.count // self.batch_size
        sizes = [self.batch_size] * full
        if self.count % self.batch_size and not self.drop_remainder:
            sizes.append(self.count % self.batch_size)
        kept = sum(sizes)

        # eager: tensors made once, inputs of the function (no Python call a new iterator)
        held = [tf.convert_to_tensor(v) for v in self.flat] if tf.executing_eagerly() else None

        def gather_all(salt: Any) -> dict[str, Any]:
            _, *data = self.columns(held)
            order = self.permutation(salt)[:kept]
            gathered = {name: tf.gather(t, order) for name, t in zip(self.names, data, strict=True)}
            return gathered if self.select is None else self.select(gathered)

        passes = single_device_map(salts, gather_all)
        if overlap:
            passes = passes.prefetch(1)
        return passes.rebatch(sizes if len(set(sizes)) > 1 else sizes[0])

    @property
    def fused(self) -> bool:
        """Whether ``batch_fn`` runs with the gather (each gathered element is a batch)."""
        return self.map_fn is None and (self.chunk == self.batch_size or self.plan is not None)

    def source(self) -> list[np.ndarray]:
        return self.flat

    def columns(self, held: list[Any] | None = None) -> list[Any]:
        """The buckets (or ``None``), then the held features, as tensors of this pass.

        Args:
            held: The flat arrays as eager tensors, if made already (else a
                ``numpy_function`` hands them over, evaluated once per pass).
        """
        # the numpy_function hands numpy's (aligned) buffers over without a copy
        data = held
        if data is None:
            data = tf.numpy_function(
                self.source, [], self.dtypes, stateful=True, name="in_memory_data"
            )
        for tensor, array in zip(data, self.flat, strict=True):
            tensor.set_shape(array.shape)
        out: list[Any] = [data[-1] if self.bucketed else None]  # the buckets first
        position = 0
        for value in self.held:
            if isinstance(value, RaggedArray):
                values, splits = data[position], data[position + 1]
                out.append(tf.RaggedTensor.from_row_splits(values, splits, validate=False))
                position += 2
            else:
                out.append(data[position])
                position += 1
        return out

    def permutation(self, salt: Any) -> Any:
        order = tf.range(self.count, dtype=tf.int64)
        if self.shuffle:
            order = tf.random.experimental.stateless_shuffle(
                order, seed=tf.stack([salt, tf.constant(7, tf.int64)])
            )
        return order

    def slices_of(self, salt: Any, bucket: Any) -> tf.data.Dataset:
        """The index slices of a pass: one per gathered element."""
        order = self.permutation(salt)
        if self.plan is not None:
            starts, sizes = (tf.constant(a) for a in self.plan)
            by_bucket = tf.gather(order, tf.argsort(tf.gather(bucket, order), stable=True))
            batch_order = tf.range(self.per_pass, dtype=tf.int64)
            if self.shuffle:
                batch_order = tf.random.experimental.stateless_shuffle(
                    batch_order, seed=tf.stack([salt, tf.constant(11, tf.int64)])
                )
            bounds = tf.data.Dataset.from_tensor_slices(
                (tf.gather(starts, batch_order), tf.gather(sizes, batch_order))
            )
            return bounds.map(lambda start, size: by_bucket[start : start + size])
        full, chunk = self.full, self.chunk
        slices = tf.data.Dataset.from_tensor_slices(
            tf.reshape(order[: full * chunk], [full, chunk])
        )
        if self.count % chunk:
            slices = slices.concatenate(tf.data.Dataset.from_tensors(order[full * chunk :]))
        return slices

    def one_pass(self, salt: Any) -> tf.data.Dataset:
        """The batches of the pass that ``salt`` shuffles."""
        bucket, *data = self.columns()
        batch_fn = self.batch_fn if self.fused else None

        def gather(index: Any) -> dict[str, Any]:
            batch = {name: tf.gather(t, index) for name, t in zip(self.names, data, strict=True)}
            return batch_fn(batch) if batch_fn is not None else batch

        gathered = self.slices_of(salt, bucket).map(
            gather, num_parallel_calls=PARALLEL_CALLS, deterministic=True
        )
        if self.map_fn is not None:  # encoded examples: decode each pass, in parallel
            return self._decoded(gathered, self.map_fn)
        whole = self.chunk == self.batch_size
        if whole and self.plan is None and self.drop_remainder and self.count % self.chunk:
            return gathered.take(self.full)
        if whole or self.plan is not None:
            return gathered
        batches = gathered.rebatch(self.batch_size, drop_remainder=self.drop_remainder)
        return batches if self.batch_fn is None else batches.map(self.batch_fn)

    def _decoded(
        self, gathered: tf.data.Dataset, map_fn: Callable[[dict[str, Any]], Any]
    ) -> tf.data.Dataset:
        """Gathered encoded examples through ``map_fn``, in parallel, then batched."""
        if self.plan is not None:  # each gathered element is a whole batch of one bucket
            return gathered.flat_map(
                lambda batch: batch_examples(
                    tf.data.Dataset.from_tensor_slices(batch).map(
                        map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
                    ),
                    self.batch_size,
                    drop_remainder=False,
                )
            )
        examples = gathered.unbatch().map(
            map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        return batch_examples(examples, self.batch_size, self.drop_remainder)


def _batch_plan(
    count: int, batch_size: int, drop_remainder: bool, buckets: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and size of every batch of a pass over examples sorted by bucket."""
    if buckets is None:
        return None
    if len(buckets) != count:
        raise ValueError(f"Expected a bucket for each of the {count} examples")
    per_bucket = np.bincount(buckets) if count else np.zeros([0], np.int64)
    starts: list[int] = []
    sizes: list[int] = []
    offset = 0
    for size in per_bucket.tolist():
        for first in range(0, size, batch_size):
            taken = min(batch_size, size - first)
            if taken == batch_size or not drop_remainder:
                starts.append(offset + first)
                sizes.append(taken)
        offset += size
    return np.asarray(starts, np.int64), np.asarray(sizes, np.int64)


def fresh_randomness(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` traced with no graph-level seed, so its random ops draw anew every epoch.

    A ``tf.data`` function is instantiated again at each new iterator (each epoch in
    ``FunctionLoop``, each initialization in graph mode); a stateful random op seeded from
    ``tf.random.set_seed`` (or the graph's seed) would then repeat the same values every
    epoch. Traced without the graph-level seed, an op with no seed of its own starts
    from a new random state at each instantiation.
    """

    def traced(*args: Any) -> Any:
        graph = tf.compat.v1.get_default_graph()
        seed = graph.seed
        graph.seed = None
        try:
            return fn(*args)
        finally:
            graph.seed = seed

    return traced


def _mapped(
    files: Sequence[str],
    compression: str,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    per_record: int,
    take: int | None = None,
) -> tf.data.Dataset:
    """The examples of ``files``, in order, each through ``map_fn`` (in parallel)."""
    records = tf.data.TFRecordDataset(list(files), compression_type=compression)
    if take is not None:
        records = records.take(max(1, -(-take // per_record)))
    chunks = records.batch(max(1, LOAD_CHUNK // per_record))
    if per_record == 1:
        parsed = chunks.map(schema.parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        parsed = chunks.map(lambda serialized: unpack(schema, serialized, per_record))
    examples = parsed.unbatch()
    if take is not None:
        examples = examples.take(take)
    return examples.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _check_dense(spec: Any) -> list[str]:
    """The output names of ``map_fn``, checked to be dense tensors or 1-D lists."""
    if not isinstance(spec, dict):
        raise TypeError(
            "Expected `map_fn` to return a dict of tensors (feature name -> tensor) to "
            f"hold its output in memory. Received: {spec!r}"
        )
    names = list(tf.nest.flatten({name: name for name in spec}))
    for name in names:
        if not (isinstance(spec[name], tf.TensorSpec) or is_list(spec[name])):
            raise ValueError(
                "Expected `map_fn` to return dense tensors, or 1-D lists of varying "
                f"length, to hold its output in memory (pad or crop {name!r} to one "
                f"shape, or stream). Received: {name!r}: {spec[name]}"
            )
    return names


def _numpy(value: Any) -> Any:
    """A fetched value as numpy: an array, or ``(values, row_splits)`` of a ragged one."""
    if isinstance(value, tf.RaggedTensor):
        return value.values.numpy(), value.row_splits.numpy()
    if isinstance(value, tf.compat.v1.ragged.RaggedTensorValue):
        return value.values, value.row_splits
    return value.numpy() if hasattr(value, "numpy") else value


def _iterate(data: tf.data.Dataset) -> Iterator[dict[str, Any]]:
    """Numpy values of ``data``: eagerly, or through a session of the dataset's graph."""
    if tf.executing_eagerly():
        for value in data:
            yield {k: _numpy(v) for k, v in value.items()}
        return
    iterator = tf.compat.v1.data.make_initializable_iterator(data)
    value = iterator.get_next()
    with tf.compat.v1.Session() as session:
        session.run(iterator.initializer)
        while True:
            try:
                yield {k: _numpy(v) for k, v in session.run(value).items()}
            except tf.errors.OutOfRangeError:
                return


def _varying(data: tf.data.Dataset, names: list[str]) -> BaseException:
    """The error for outputs of varying shape, naming the first feature that varies."""
    first: dict[str, tuple[int, ...]] = {}
    for index, values in enumerate(_iterate(data)):
        for name in names:
            shape = tuple(values[name].shape)
            if name not in first:
                first[name] = shape
            elif shape != first[name]:
                return _varying_feature(name, f"{list(first[name])} and {list(shape)}", index)
    return ValueError("Expected `map_fn` to return tensors of one shape for every example")


def _varying_feature(name: str, shapes: str, index: int | None = None) -> ValueError:
    where = f" (example {index})" if index is not None else ""
    return ValueError(
        "Expected `map_fn` to return tensors of one shape for every example to hold its "
        f"output in memory, but feature {name!r} varies (pad or resize it to a fixed shape "
        f"in map_fn, or stream with in_memory=False). Received: shapes {shapes}{where}"
    )


def _collect(
    build: Callable[[], tf.data.Dataset], count: int | None, batch: int = LOAD_CHUNK
) -> dict[str, Held]:
    def run() -> dict[str, Held]:
        data = build()
        names = _check_dense(data.element_spec)
        lists = [name for name in names if is_list(data.element_spec[name])]
        dense = [name for name in names if name not in lists]
        join = _Join(lists)
        first: dict[str, np.ndarray] = {}
        got = 0
        try:
            for values in _iterate(batch_examples(data, batch, drop_remainder=False)):
                size = join.split(values)
                if not first:
                    first = values
                    if count is not None:
                        join.allocate(count, _dense_of(values))
                for k in dense:
                    if values[k].shape[1:] != first[k].shape[1:]:
                        shapes = f"{list(first[k].shape[1:])} and {list(values[k].shape[1:])}"
                        raise _varying_feature(k, shapes)
                if join.out and got + size > len(join.out[dense[0]]):
                    raise ValueError("map_fn returned more examples than were read")
                join.put(values, at=got)
                got += size
        except tf.errors.InvalidArgumentError as error:
            if "Cannot batch tensors" in error.message or "Cannot add tensor" in error.message:
                raise _varying(build(), dense) from None
            raise
        if not got:
            raise ValueError("Expected at least one example to hold in memory; found none")
        held = join.join(_dense_of(first), got)
        return {k: held[k] for k in names}

    if tf.executing_eagerly():
        return run()
    with tf.Graph().as_default():  # its own graph: nothing added to the caller's
        return run()


def _dense_of(values: Mapping[str, np.ndarray]) -> _Dense:
    """The shape (after the examples' dimension) and dtype of each chunk's array."""
    return {name: (value.shape[1:], value.dtype) for name, value in values.items()}


def load_mapped(
    files: Sequence[str],
    compression: str,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    *,
    per_record: int = 1,
    count: int | None = None,
) -> dict[str, Held]:
    """Read every example of ``files`` once, through ``map_fn``, into numpy arrays.

    ``map_fn`` (the user's decoding function: ``tf.io.decode_jpeg``...) runs once per
    example, in parallel (``num_parallel_calls=AUTOTUNE``); its outputs are gathered
    into one array per output name, allocated once when ``count`` is known, so memory
    stays at about the decoded size.

    Raises:
        ValueError: If an output is not a dense tensor of one shape for all examples.
    """
    return _collect(lambda: _mapped(files, compression, schema, map_fn, per_record), count)


def mapped_sample_nbytes(
    files: Sequence[str],
    compression: str,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    *,
    per_record: int = 1,
    sample: int = 16,
) -> tuple[int, int] | None:
    """Bytes of ``map_fn``'s output for the first ``sample`` examples, and their number.

    ``None`` when the outputs cannot be held in memory (not dense, or of varying shape).
    """
    try:
        arrays = _collect(
            lambda: _mapped(files, compression, schema, map_fn, per_record, take=sample),
            None,
            batch=sample,
        )
    except (ValueError, TypeError) as error:
        logger.debug("map_fn's output cannot be held in memory: %s", error)
        return None
    size = sum(nbytes_of(a) for a in arrays.values())
    return size, len(next(iter(arrays.values())))
