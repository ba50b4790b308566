"""Reading and decoding every example once into the arrays held in memory.

:func:`load` reads the shards (in parallel, one thread per core) and decodes them with the
schema into one numpy array per feature (a :class:`RaggedArray` for a feature of varying
length), allocated once when the count is known and aligned so that TensorFlow takes the
buffers without a copy; :func:`load_mapped` holds ``map_fn``'s output instead. Damaged
files and outputs that cannot be held are named (:mod:`tfr_hooks.tfrecord.pipelines.memory`).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import CorruptRecordError, TFRecordError
from tfr_hooks.tfrecord.formats.packed import unpack
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.ragged import RaggedArray, batch_examples, is_list
from tfr_hooks.tfrecord.schema.decoding import Decoding, parse_batch, stored_schema
from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = [
    "aligned",
    "aligned_empty",
    "collect_held",
    "mapped_examples",
    "load",
    "load_mapped",
    "nbytes_of",
    "Held",
    "LOAD_CHUNK",
]

#: What is held for one feature: an array ``[examples, ...]``, or values and row offsets.
Held = np.ndarray | RaggedArray
#: Examples decoded together while loading (small: the chunks in flight add to the peak).
LOAD_CHUNK = 1024
_ALIGN = 64  # TensorFlow takes a numpy buffer without copying when it is this aligned
_WAIT_SECS = 60.0


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized array whose buffer TensorFlow can use without copying."""
    dtype = np.dtype(dtype)
    if dtype.kind == "O":
        return np.empty(shape, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + _ALIGN, np.uint8)
    offset = (-buffer.ctypes.data) % _ALIGN
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


def aligned(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy of it in a buffer TensorFlow can use without copying."""
    if array.dtype.kind == "O":
        return array
    if array.flags.c_contiguous and array.ctypes.data % _ALIGN == 0:
        return array
    copy = aligned_empty(array.shape, array.dtype)
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
        self.lists: dict[str, list[list[tuple[np.ndarray, ...]]]] = {
            name: [[] for _ in range(slots)] for name in self.ragged
        }

    def allocate(self, count: int, dense: _Dense) -> None:
        """Allocate the dense features' arrays for ``count`` examples."""
        self.out = {
            name: aligned_empty((count, *shape), dtype) for name, (shape, dtype) in dense.items()
        }

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
        joined = {
            name: aligned_empty((total, *shape), dtype) for name, (shape, dtype) in dense.items()
        }
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

    def __init__(
        self,
        records: RecordFiles,
        schema: Schema,
        per_record: int,
        workers: int,
        decoding: Decoding | None = None,
    ) -> None:
        self.schema, self.records = schema, records
        self.stored = stored_schema(schema, decoding)  # what a record is checked against
        graph = tf.Graph()
        with graph.as_default():
            self.path = tf.compat.v1.placeholder(tf.string, [], name="path")
            self.position = tf.compat.v1.placeholder_with_default(np.int64(0), [])
            whole = records.file_records(self.path, self.position)  # max_corrupt_records
            chunks = whole.batch(max(1, LOAD_CHUNK // per_record))
            if per_record == 1:
                parsed = chunks.map(lambda serialized: parse_batch(schema, serialized, decoding))
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
        feed: dict[Any, Any] = {self.path: name, self.position: self.records.position(name)}
        self.session.run(self.iterators[worker].initializer, feed)
        while True:
            try:
                values = self.session.run(self.nexts[worker])
            except tf.errors.OutOfRangeError:
                return
            except tf.errors.OpError as error:
                raise _explain(error, name, self.stored, self.records.compression) from error
            for feature in self.schema:
                if feature.varying or feature.sequence:
                    value = values[feature.name]
                    values[feature.name] = RaggedArray.parts_of(value)
            yield values

    def close(self) -> None:
        self.session.close()


def load(
    records: RecordFiles,
    schema: Schema,
    *,
    per_record: int = 1,
    counts: Sequence[int | None] | None = None,
    progress: bool = True,
    decoding: Decoding | None = None,
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
        records: The shards, their compression, and the damaged records to skip
            (``max_corrupt_records``).
        schema: The features to decode (fixed shapes).
        per_record: Examples per record (packed shards).
        counts: Each file's examples, where known.
        progress: Show a progress bar on stderr when loading takes more than 2 s.
        decoding: How the records become the features, when they hold them in another
            form (:meth:`~tfr_hooks.tfrecord.sources.base.RecordSource.decoding`).

    Returns:
        Feature name to array of shape ``[examples, *feature.shape]`` (a
        :class:`RaggedArray` for a feature of varying length).

    Raises:
        CorruptRecordError: If a file is damaged, or holds another number of examples
            than ``schema.json`` says.
        SchemaMismatchError: If records do not match the schema.
    """
    files = records.files
    known = counts is not None and all(c is not None for c in counts)
    sizes = [int(c or 0) for c in counts] if counts is not None and known else []
    workers = max(1, min(len(files), os.cpu_count() or 1, 8))
    ragged = [f.name for f in schema if f.varying or f.sequence]  # feature lists: frames
    dense = {f.name: (f.shape, _numpy_dtype(f.dtype)) for f in schema if f.name not in ragged}
    join = _Join(ragged, slots=len(files))
    offsets = list(itertools.accumulate(sizes, initial=0))
    if known:
        join.allocate(offsets[-1], dense)
    readers = _FileReaders(records, schema, per_record, workers, decoding)
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
    from tfr_hooks.tfrecord.inspection.diagnose import explain_error

    found = explain_error(error, [path], schema, compression)
    if found is not None:
        return found
    text = (error.message if isinstance(error, tf.errors.OpError) else str(error)).strip()
    return TFRecordError(
        f"TFRecord file {path!r} could not be loaded into memory: "
        f"{text.splitlines()[0] if text else type(error).__name__}",
        file=path,
    )


def mapped_examples(
    records: RecordFiles,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    per_record: int,
    take: int | None = None,
    decoding: Decoding | None = None,
) -> tf.data.Dataset:
    """The examples of the files, in order, each through ``map_fn`` (in parallel)."""
    serialized = records.records()  # of a damaged file, only the whole records
    if take is not None:
        serialized = serialized.take(max(1, -(-take // per_record)))
    chunks = serialized.batch(max(1, LOAD_CHUNK // per_record))
    if per_record == 1:
        parsed = chunks.map(
            lambda serialized: parse_batch(schema, serialized, decoding),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
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


def collect_held(
    build: Callable[[], tf.data.Dataset], count: int | None, batch: int = LOAD_CHUNK
) -> dict[str, Held]:
    """The examples of the dataset ``build`` makes, held: one array (or ragged) a feature.

    ``count`` examples are expected when known (``None``: counted as read); they are read
    ``batch`` at a time.
    """

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
    records: RecordFiles,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    *,
    per_record: int = 1,
    count: int | None = None,
    decoding: Decoding | None = None,
) -> dict[str, Held]:
    """Read every example of ``records``' files once, through ``map_fn``, into numpy arrays.

    ``map_fn`` (the user's decoding function: ``tf.io.decode_jpeg``...) runs once per
    example, in parallel (``num_parallel_calls=AUTOTUNE``); its outputs are gathered
    into one array per output name, allocated once when ``count`` is known, so memory
    stays at about the decoded size.

    Raises:
        ValueError: If an output is not a dense tensor of one shape for all examples.
    """
    return collect_held(
        lambda: mapped_examples(records, schema, map_fn, per_record, decoding=decoding),
        count,
    )
