"""Writing numpy arrays to sharded TFRecord files of ``tf.train.Example`` records.

Numeric arrays with at least one dimension are stored as their raw little-endian bytes
(one value per record), scalars as ``int64``/``float`` lists and strings as ``bytes``
lists; see :mod:`tfr_hooks.tfrecord.schema.schema`. The schema, the shard list and the
compression go to a ``schema.json`` sidecar, written last, so readers need no feature
spec.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.checks import check_positive_int, expected
from tfr_hooks.tfrecord.formats.arrayrecord import write_array_record
from tfr_hooks.tfrecord.formats.framing import check_compression
from tfr_hooks.tfrecord.formats.packed import check_packable, serialize_blocks, to_bytes
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import SCHEMA_FILENAME, Sidecar, save_sidecar

__all__ = [
    "FORMATS",
    "ArrayData",
    "WriteResult",
    "check_format",
    "clear_dataset",
    "shard_name",
    "write",
    "write_shards",
]

logger = logging.getLogger(__name__)

#: What :func:`write` accepts: one array (named ``"x"``), an ``(x, y)`` pair, or a dict.
ArrayData: TypeAlias = "np.ndarray | tuple[Any, Any] | Mapping[str, Any]"

_SUFFIX = {"": "", "GZIP": ".gz", "ZLIB": ".zlib"}
#: The record formats written: TFRecord files, or ArrayRecord files (``group_size:1``,
#: as TensorFlow Datasets writes them, read by ``tfds.data_source`` and Grain).
FORMATS = ("tfrecord", "array_record")


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write` wrote.

    Attributes:
        directory: The output directory.
        files: The shard paths, in order.
        schema: The stored schema.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        num_records: Records written in all shards.
        schema_path: The path of the ``schema.json`` sidecar.
        format: ``"tfrecord"`` or ``"array_record"``.
    """

    directory: str
    files: list[str]
    schema: Schema
    compression: str
    num_records: int
    schema_path: str
    format: str = "tfrecord"


def shard_name(
    prefix: str, index: int, shards: int, compression: str = "", format: str = "tfrecord"
) -> str:
    """The file name of shard ``index`` of ``shards``, e.g. ``data-00000-of-00004.tfrecord``.

    ArrayRecord shards end in ``.array_record`` (``data-00000-of-00004.array_record``).
    """
    if format == "array_record":
        return f"{prefix}-{index:05d}-of-{shards:05d}.array_record"
    return f"{prefix}-{index:05d}-of-{shards:05d}.tfrecord{_SUFFIX[compression]}"


def check_format(format: object, compression: str, examples_per_record: int) -> str:
    """``format`` checked: one of :data:`FORMATS`, ArrayRecord neither compressed nor packed.

    Raises:
        ValueError: Naming the argument, if not.
    """
    if format not in FORMATS:
        raise ValueError(expected("format", "'tfrecord' or 'array_record'", format))
    if format == "array_record" and compression:
        raise ValueError(
            "Expected no `compression` with format='array_record' (ArrayRecord files "
            f"compress their own chunks). Received: compression={compression!r}"
        )
    if format == "array_record" and examples_per_record != 1:
        raise ValueError(
            "Expected examples_per_record=1 with format='array_record' (one example a "
            "record, as TensorFlow Datasets and Grain read them). "
            f"Received: examples_per_record={examples_per_record}"
        )
    return str(format)


def _as_array(value: object) -> np.ndarray:
    """One feature's examples as an array; rows of varying length as an object array."""
    if isinstance(value, tf.RaggedTensor):
        value = (
            value.to_list()
            if value.dtype == tf.string
            else [np.asarray(row) for row in value.numpy()]
        )
    if (
        isinstance(value, list)
        and value
        and all(isinstance(row, (list, tuple, np.ndarray)) for row in value)
    ):
        lengths = {len(row) for row in value}
        if len(lengths) > 1:  # a feature of varying length: one 1-D array per example
            rows = np.empty(len(value), dtype=object)
            for index, row in enumerate(value):
                rows[index] = np.asarray(row)
            return rows
    return np.asarray(value)


def _as_arrays(data: object) -> dict[str, np.ndarray]:
    if isinstance(data, np.ndarray):
        named: dict[str, Any] = {"x": data}
    elif isinstance(data, tuple) and len(data) == 2:
        named = {"x": data[0], "y": data[1]}
    elif isinstance(data, Mapping):
        named = dict(data)
    else:
        what = "a numpy array, an (x, y) tuple of arrays, or a dict of named arrays"
        raise TypeError(f"{expected('data', what, data)} of type {type(data).__name__}")
    if not named:
        raise ValueError("Expected `data` to hold at least one array. Received: data={}")
    arrays: dict[str, np.ndarray] = {}
    for name, value in named.items():
        if not isinstance(name, str) or not name:
            raise TypeError(
                expected("name", "a non-empty string (an array's name in `data`)", name)
            )
        array = _as_array(value)
        if array.ndim == 0:
            raise ValueError(
                expected(f"data[{name!r}]", "an array whose first dimension counts examples", value)
            )
        arrays[name] = array
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            "Expected all arrays of `data` to have the same length (number of examples). "
            f"Received: lengths={lengths}"
        )
    if next(iter(lengths.values())) == 0:
        raise ValueError(
            "Expected the arrays of `data` to hold at least one example. "
            f"Received: lengths={lengths}"
        )
    return arrays


def _chunk_values(feature: Feature, chunk: np.ndarray) -> list[Any]:
    """One Python value (or list of values) per example of ``chunk``, ready for a proto."""
    count = len(chunk)
    if feature.varying:  # one 1-D array per example, of any length
        if feature.encoding == "bytes":
            return [[to_bytes(v, feature.name) for v in np.asarray(row).tolist()] for row in chunk]
        cast = np.int64 if feature.encoding == "int64" else np.float32
        return [np.asarray(row).astype(cast).tolist() for row in chunk]
    if feature.encoding == "raw":
        dtype = np.dtype("uint8" if feature.dtype == "bool" else feature.dtype).newbyteorder("<")
        blob = np.ascontiguousarray(chunk, dtype=dtype).tobytes()
        step = feature.raw_nbytes
        return [blob[i * step : (i + 1) * step] for i in range(count)]
    if feature.encoding == "int64":
        return list(chunk.astype(np.int64).tolist())
    if feature.encoding == "float":
        return list(chunk.astype(np.float32).tolist())
    flat = chunk.reshape(count, -1)
    if feature.shape == ():
        return [to_bytes(v, feature.name) for v in flat[:, 0].tolist()]
    return [[to_bytes(v, feature.name) for v in row] for row in flat.tolist()]


def _serialize(
    schema: Schema, arrays: Mapping[str, np.ndarray], start: int, stop: int
) -> list[bytes]:
    """Serialize examples ``start:stop``, with one numpy conversion per feature and chunk.

    With feature lists in ``schema``, the records are ``tf.train.SequenceExample``s (see
    :func:`_serialize_sequences`).
    """
    if schema.sequence_features:
        return _serialize_sequences(schema, arrays, start, stop)
    # (name, proto list, whether each value is a list of values, the values)
    columns = [
        (
            f.name,
            f.kind,
            f.varying or (f.encoding == "bytes" and f.shape != ()),
            _chunk_values(f, arrays[f.name][start:stop]),
        )
        for f in schema
    ]
    records = []
    for i in range(stop - start):
        example = example_pb2.Example()
        features = example.features.feature
        for name, kind, many, values in columns:
            target = getattr(features[name], kind).value
            if many:
                target.extend(values[i])
            else:
                target.append(values[i])
        records.append(example.SerializeToString())
    return records


def _serialize_sequences(
    schema: Schema, arrays: Mapping[str, np.ndarray], start: int, stop: int
) -> list[bytes]:
    """Serialize examples ``start:stop`` as ``tf.train.SequenceExample`` records.

    Context features go to the context, stored as in an Example; each feature list's
    example is an array ``[frames, *shape]`` (or a list of frames), one frame a
    ``tf.train.Feature`` stored as a context feature of the frame's shape would be. An
    example of 0 frames gets an empty feature list.
    """
    context = Schema(schema.context_features)
    contexts = _serialize(context, arrays, start, stop) if len(context) else [b""] * (stop - start)
    records = []
    for i, serialized in enumerate(contexts):
        lists = example_pb2.SequenceExample()
        for feature in schema.sequence_features:
            frames = arrays[feature.name][start + i]
            target = lists.feature_lists.feature_list[feature.name].feature
            frame = feature.frame
            values = _chunk_values(frame, _frames_array(frame, frames)) if len(frames) else []
            for value in values:
                proto = getattr(target.add(), frame.kind).value
                if isinstance(value, list):
                    proto.extend(value)
                else:
                    proto.append(value)
        # an Example's field 1 (features) is a SequenceExample's field 1 (context), so the
        # context's bytes and the feature lists' bytes concatenated are the whole record
        records.append(serialized + lists.SerializeToString())
    return records


def _frames_array(frame: Feature, frames: Any) -> np.ndarray:
    """One example's frames as ``_chunk_values`` takes them (rows of varying frames)."""
    if frame.varying:
        rows = np.empty(len(frames), dtype=object)
        for index, row in enumerate(frames):
            rows[index] = np.asarray(row)
        return rows
    return np.asarray(frames).reshape(-1, *frame.shape)


def write(
    data: ArrayData,
    directory: str | os.PathLike[str],
    *,
    shards: int = 1,
    compression: str | None = None,
    prefix: str = "data",
    overwrite: bool = False,
    chunk_size: int = 4096,
    progress: Callable[[int], object] | None = None,
    examples_per_record: int = 1,
    format: str = "tfrecord",
) -> WriteResult:
    """Write arrays to TFRecord shards of ``tf.train.Example`` records, plus their schema.

    Example ``i`` holds ``array[i]`` of every array. Shards get contiguous, nearly equal
    ranges of examples and are named ``{prefix}-00000-of-0000N.tfrecord[.gz|.zlib]``. The
    schema is saved to ``schema.json`` in ``directory`` after the shards.

    Args:
        data: A numpy array (feature ``"x"``), an ``(x, y)`` tuple (features ``"x"`` and
            ``"y"``), or a dict of named arrays. All arrays share their first dimension.
            Supported dtypes: bool, (u)int8/16/32/64, float16/32/64, and strings or bytes.
            A feature of varying length (token ids, box labels) is a ``tf.RaggedTensor``,
            a list of lists of different lengths, or a 1-D object array of 1-D arrays;
            it is stored as a list per example, also in packed shards.
        directory: Output directory, created if needed.
        shards: Number of files, at least 1 and at most the number of examples.
        compression: ``None``/``""`` (none), ``"gzip"`` or ``"zlib"``.
        prefix: File name prefix of the shards.
        overwrite: Whether to replace an existing ``schema.json`` and shards with the same
            prefix in ``directory``; otherwise their presence is an error.
        chunk_size: Examples converted together (affects speed and memory only).
        progress: Called with the number of examples just written, after each chunk
            (for a progress bar).
        examples_per_record: Examples stored in each record: 1 (the default) writes one
            ``tf.train.Example`` per example; ``N > 1`` writes packed shards, each
            record a block of ``N`` consecutive examples (the last of a shard may hold
            fewer), recorded in ``schema.json`` and unpacked by the readers (see
            :mod:`tfr_hooks.tfrecord.formats.packed`). Packing cuts the parse cost per example
            by about ``N``: use it for data larger than memory.
        format: ``"tfrecord"`` (the default), or ``"array_record"``: ArrayRecord files
            of the same records (``{prefix}-00000-of-0000N.array_record``, one record a
            chunk, as TensorFlow Datasets writes them), which ``tfds.data_source`` and
            Grain's ``ArrayRecordDataSource`` read by index; ``schema.json`` records
            the format. It needs the ``arrayrecord`` extra, no ``compression`` and
            ``examples_per_record=1``.

    Returns:
        A :class:`WriteResult` with the shard paths and the schema.

    Raises:
        TypeError: If ``data`` is not arrays, or holds an unsupported dtype.
        ValueError: If the arrays' lengths differ, or an argument is out of range.
        FileExistsError: If ``directory`` already holds a dataset and not ``overwrite``.

    Examples:
        >>> import numpy as np
        >>> from tfr_hooks import tfrecord
        >>> images = np.zeros((100, 28, 28), np.uint8)
        >>> labels = np.arange(100) % 10
        >>> result = tfrecord.write({"image": images, "label": labels}, "/tmp/mnist",
        ...                         shards=4, compression="gzip")  # doctest: +SKIP
        >>> result.files[0]  # doctest: +SKIP
        '/tmp/mnist/data-00000-of-00004.tfrecord.gz'
    """
    arrays = _as_arrays(data)
    num_records = len(next(iter(arrays.values())))
    check_positive_int(shards, "shards")
    check_positive_int(chunk_size, "chunk_size")
    check_positive_int(examples_per_record, "examples_per_record")
    if shards > num_records:
        raise ValueError(
            f"Expected `shards` to be at most the number of examples ({num_records}), so no "
            f"shard is empty. Received: shards={shards}"
        )
    codec = check_compression("" if compression is None else compression, allow_auto=False) or ""
    record_format = check_format(format, codec, examples_per_record)
    if not isinstance(prefix, str) or not prefix or os.sep in prefix:
        raise ValueError(expected("prefix", "a plain file name prefix", prefix))
    schema = Schema.from_arrays(arrays)
    check_packable(schema, examples_per_record)
    out_dir = os.fspath(directory)
    tf.io.gfile.makedirs(out_dir)
    clear_dataset(out_dir, prefix, overwrite)
    return write_shards(
        schema,
        iter([arrays]),
        out_dir,
        num_examples=num_records,
        shards=shards,
        compression=codec,
        prefix=prefix,
        chunk_size=chunk_size,
        examples_per_record=examples_per_record,
        progress=progress,
        format=record_format,
    )


class _Examples:
    """Examples taken ``n`` at a time from a stream of chunks (dicts of equal-length arrays).

    A piece within one chunk is a view of it; only a piece spanning chunks is copied.
    """

    def __init__(self, chunks: Iterator[Mapping[str, np.ndarray]]) -> None:
        self._chunks = chunks
        self._current: Mapping[str, np.ndarray] = {}
        self._length = 0
        self._offset = 0

    def take(self, count: int) -> dict[str, np.ndarray] | None:
        """The next ``count`` examples (fewer at the end), or ``None`` when none are left."""
        parts: list[dict[str, np.ndarray]] = []
        needed = count
        while needed:
            if self._offset >= self._length:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._current = chunk
                self._length = len(next(iter(chunk.values())))
                self._offset = 0
                continue
            stop = min(self._length, self._offset + needed)
            parts.append({name: a[self._offset : stop] for name, a in self._current.items()})
            needed -= stop - self._offset
            self._offset = stop
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def write_shards(
    schema: Schema,
    chunks: Iterator[Mapping[str, np.ndarray]],
    out_dir: str,
    *,
    num_examples: int | None,
    shards: int,
    compression: str,
    prefix: str,
    chunk_size: int,
    examples_per_record: int,
    progress: Callable[[int], object] | None,
    format: str = "tfrecord",
) -> WriteResult:
    """Write the examples of ``chunks`` to shards and ``schema.json`` (checked arguments).

    Shared by :func:`write` and :func:`~tfr_hooks.tfrecord.convert`. Each chunk is a dict
    of arrays with one row per example (for a feature of varying length, a 1-D object
    array of 1-D arrays); the stream is consumed once, ``chunk_size`` examples at a time.

    Args:
        schema: The features to store (their dtype, shape and encoding).
        chunks: The examples, in order.
        out_dir: The output directory, existing and cleared.
        num_examples: The examples ``chunks`` holds; may be ``None`` only for one shard.
        shards: Number of files.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        prefix: File name prefix of the shards.
        chunk_size: Examples serialized together.
        examples_per_record: Examples per record (see :func:`write`).
        progress: Called with the number of examples just written.
        format: ``"tfrecord"`` or ``"array_record"`` (see :func:`write`).

    Returns:
        The :class:`WriteResult`.

    Raises:
        ValueError: If ``chunks`` holds another number of examples than ``num_examples``.
    """
    if examples_per_record > 1:  # whole blocks per chunk, so only a shard's last is short
        chunk_size = max(1, chunk_size // examples_per_record) * examples_per_record
    if num_examples is None:
        if shards != 1:
            raise ValueError(expected("num_examples", "known for more than one shard", None))
        bounds: list[int | None] = [0, None]
    else:
        bounds = list(np.linspace(0, num_examples, shards + 1).round().astype(int).tolist())
    stream = _Examples(chunks)
    options = tf.io.TFRecordOptions(compression_type=compression)
    files: list[str] = []
    counts: list[tuple[str, int]] = []
    sizes: list[int] = []
    examples: list[int] = []
    for index in range(shards):
        name = shard_name(prefix, index, shards, compression, format)
        path = os.path.join(out_dir, name)
        start, stop = bounds[index], bounds[index + 1]
        target = None if start is None or stop is None else stop - start  # None: all left
        written = [0]
        records = _shard_records(schema, stream, target, chunk_size, examples_per_record)
        if format == "array_record":
            write_array_record(path, _counted(records, written, progress))
        else:
            with tf.io.TFRecordWriter(path, options=options) as writer:
                for record in _counted(records, written, progress):
                    writer.write(record)
        files.append(path)
        counts.append((name, -(-written[0] // examples_per_record)))
        examples.append(written[0])
        sizes.append(tf.io.gfile.stat(path).length)
    total = sum(examples)
    if stream.take(1) is not None or (num_examples is not None and total != num_examples):
        raise ValueError(
            f"Expected the input to hold {num_examples} examples, as counted before "
            f"writing. Received: a different number (did the input change meanwhile?)"
        )
    if total == 0:
        raise ValueError("Expected the input to hold at least one example. Received: none")
    schema_path = os.path.join(out_dir, SCHEMA_FILENAME)
    packing = (examples_per_record, tuple(examples) if examples_per_record > 1 else ())
    sidecar = Sidecar(schema, compression, tuple(counts), tuple(sizes), *packing, format)
    save_sidecar(schema_path, sidecar)
    logger.info("Wrote %d examples to %d shard(s) in %s", total, shards, out_dir)
    return WriteResult(out_dir, files, schema, compression, total, schema_path, format)


def _shard_records(
    schema: Schema,
    stream: _Examples,
    target: int | None,
    chunk_size: int,
    examples_per_record: int,
) -> Iterator[tuple[int, list[bytes]]]:
    """The serialized records of one shard of ``target`` examples (``None``: all left).

    Yields each chunk's example count and records.
    """
    written = 0
    while target is None or written < target:
        size = chunk_size if target is None else min(chunk_size, target - written)
        piece = stream.take(size)
        if piece is None:
            return
        count = len(next(iter(piece.values())))
        if examples_per_record > 1:
            yield count, serialize_blocks(schema, piece, 0, count, examples_per_record)
        else:
            yield count, _serialize(schema, piece, 0, count)
        written += count


def _counted(
    chunks: Iterator[tuple[int, list[bytes]]],
    written: list[int],
    progress: Callable[[int], object] | None,
) -> Iterator[bytes]:
    """The records of ``chunks``, adding each chunk's examples to ``written[0]``."""
    for count, records in chunks:
        yield from records
        written[0] += count
        if progress is not None:
            progress(count)


def clear_dataset(directory: str, prefix: str, overwrite: bool) -> None:
    """Refuse, or with ``overwrite`` remove, an earlier dataset in ``directory``."""
    old = [os.path.join(directory, SCHEMA_FILENAME)]
    old += tf.io.gfile.glob(os.path.join(directory, f"{prefix}-*-of-*.tfrecord*"))
    old += tf.io.gfile.glob(os.path.join(directory, f"{prefix}-*-of-*.array_record"))
    existing = [path for path in old if tf.io.gfile.exists(path)]
    if not existing:
        return
    if not overwrite:
        raise FileExistsError(
            f"Expected `directory` to hold no dataset, or `overwrite=True`. Received: "
            f"directory={directory!r}, which holds {os.path.basename(existing[0])!r}"
            + (f" and {len(existing) - 1} more file(s)" if len(existing) > 1 else "")
        )
    for path in existing:
        tf.io.gfile.remove(path)
