"""Converting TFRecord files written by any tool into this package's layout.

:func:`convert` reads ``tf.train.Example`` (or ``tf.train.SequenceExample``) records
(any compression, detected per file), parses them with a schema (inferred, given, or
changed with ``decode`` as :func:`~tfr_hooks.tfrecord.dataset` takes it) and writes
them again with :func:`~tfr_hooks.tfrecord.write`'s shard writer: shards plus a
``schema.json`` sidecar, optionally packed. The records stream through in chunks; only
one chunk is in memory at a time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.checks import check_non_negative_int, check_positive_int, expected
from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles, is_array_record, read_records
from tfr_hooks.tfrecord.formats.damage import DamageMap, scan_damage
from tfr_hooks.tfrecord.formats.framing import (
    Files,
    check_compression,
    check_framing,
    detect_compression,
    first_record,
)
from tfr_hooks.tfrecord.formats.packed import check_block, check_packable, unpack
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.inspection.describe import infer_schema
from tfr_hooks.tfrecord.inspection.diagnose import explain_error
from tfr_hooks.tfrecord.pipelines.ragged import batch_examples, is_list
from tfr_hooks.tfrecord.schema.decoding import Decoding, parse_batch, stored_schema
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import Sidecar, load_schema
from tfr_hooks.tfrecord.sources.base import open_source
from tfr_hooks.tfrecord.writing.write import (
    WriteResult,
    check_format,
    clear_dataset,
    write_shards,
)

__all__ = ["convert"]

logger = logging.getLogger(__name__)


def convert(
    files: Files,
    directory: str | os.PathLike[str],
    *,
    schema: Schema | str | os.PathLike[str] | None = None,
    decode: Mapping[str, Any] | None = None,
    shards: int = 1,
    compression: str | None = None,
    prefix: str = "data",
    overwrite: bool = False,
    chunk_size: int = 4096,
    progress: Callable[[int], object] | None = None,
    examples_per_record: int = 1,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
    format: str = "tfrecord",
) -> WriteResult:
    """Rewrite TFRecord files of ``tf.train.Example`` records, from any producer, as shards.

    ``tf.train.SequenceExample`` records keep their feature lists: written again as
    SequenceExamples, or packed (``examples_per_record > 1``) as each block's frames one
    after the other beside each example's frame count (see
    :mod:`tfr_hooks.tfrecord.formats.packed`).

    The examples keep their order (the files' order, as :func:`resolve_files` gives it,
    then each file's). Each feature is stored as :func:`~tfr_hooks.tfrecord.write` stores
    an array of its dtype and shape (raw bytes for numeric arrays, lists for scalars and
    strings), a feature of varying length as a list of values, and ``schema.json`` gets
    the schema, so :func:`~tfr_hooks.tfrecord.dataset` reads the result without a
    ``decode``. A feature with a default is stored with the default filled in.

    Args:
        files: Paths, directories or glob patterns of the input files. Their compression
            is detected per file. Files written by this package (with a ``schema.json``,
            packed or not) are read with their stored schema.
        directory: Output directory, created if needed. It must not hold the input files.
        schema: The schema to read the input with: a :class:`Schema`, the path of a
            ``schema.json``, or ``None`` (the default) to infer it (see
            :func:`~tfr_hooks.tfrecord.infer_schema`). Features not in it are dropped.
        decode: Changes to that schema, as :meth:`Schema.replace` and
            :func:`~tfr_hooks.tfrecord.dataset` take them, e.g.
            ``{"image_raw": ("uint8", (28, 28, 1))}`` to store raw image bytes as a
            ``uint8`` array.
        shards: Number of output files, at least 1 and at most the number of examples.
        compression: Of the output: ``None``/``""`` (none), ``"gzip"`` or ``"zlib"``.
        prefix: File name prefix of the shards.
        overwrite: Whether to replace an existing dataset in ``directory``.
        chunk_size: Examples parsed and written together (affects speed and memory only).
        progress: Called with the number of examples just written, after each chunk.
        examples_per_record: Examples per output record; ``N > 1`` writes packed shards
            (see :func:`~tfr_hooks.tfrecord.write`); a feature of varying length is kept,
            beside its row lengths (see :mod:`tfr_hooks.tfrecord.formats.packed`).
        map_fn: Applied to each parsed example (a dict of tensors), in parallel, before
            writing: its outputs (a dict of dense tensors of one shape for every
            example, or 1-D lists of varying length) are what is stored, under their
            names. Decoding the JPEG bytes of ``image/encoded`` here stores raw pixels,
            so that reading the result never decodes an image again (several times the
            disk space of the JPEGs; packed, the fastest pipeline for data larger than
            memory).
        max_corrupt_records: The damaged input records to skip, as for
            :func:`~tfr_hooks.tfrecord.dataset` (``--max-corrupt-records``): each is
            logged with its file and index, and left out of the output; past it, the
            named error. 0 (the default): the first damaged record raises.
        split: For a TensorFlow Datasets directory, the split to convert (``None``:
            ``"train"``); its features are stored decoded, as
            :func:`~tfr_hooks.tfrecord.dataset` reads them (images as pixels,
            sequences as feature lists). An error with other files.
        format: Of the output: ``"tfrecord"`` (the default) or ``"array_record"``
            (ArrayRecord files, which TFDS and Grain read; see
            :func:`~tfr_hooks.tfrecord.write`).

    Returns:
        A :class:`~tfr_hooks.tfrecord.WriteResult` with the shard paths and the schema.

    Raises:
        ValueError: If an argument is out of range, a feature cannot be stored in the
            chosen layout (no values with ``examples_per_record > 1``), or
            ``directory`` holds the input files.
        FileExistsError: If ``directory`` already holds a dataset and not ``overwrite``.
        TFRecordError: If an input file is missing, not a TFRecord file, or its records
            do not match the schema (the file, record and feature named).

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> result = tfrecord.convert(
        ...     "mnist_train.tfrecords", "data/mnist-converted",
        ...     decode={"image_raw": ("uint8", (28, 28, 1))}, shards=2)  # doctest: +SKIP
        >>> ds = tfrecord.dataset("data/mnist-converted", batch_size=32)  # doctest: +SKIP
    """
    codec = _check_convert_args(
        shards, chunk_size, examples_per_record, max_corrupt_records, compression, prefix, decode
    )
    check_format(format, codec, examples_per_record)
    if map_fn is not None and not callable(map_fn):
        raise TypeError(expected("map_fn", "callable or None", map_fn))
    origin = open_source(files, split)
    paths = list(origin.files)
    decoding = origin.decoding()  # how the records become the features (TFDS), or None
    if origin.declares_schema:  # e.g. a TFDS split, read with the features it declares
        stored_as = origin.compression(None, tolerant=False)
        schema, decode = origin.schema(schema, decode, stored_as), None
    out_dir = os.fspath(directory)
    _check_not_input(paths, out_dir)
    sources = [_InputFile(path, origin.sidecar(path)) for path in paths]
    inferred_from = paths
    if max_corrupt_records:  # the whole records only; inferred from undamaged files
        _check_framed(sources, max_corrupt_records)
        damage = scan_damage(paths, [s.compression for s in sources], max_corrupt_records)
        for source in sources:
            source.damage = damage
        inferred_from = damage.clean(paths) or paths
    read_schema = _read_schema(inferred_from, schema, decode, sources)
    for source in sources:
        source.check(stored_schema(read_schema, decoding))
    if map_fn is None:
        stored = Schema(Feature(f.name, f.dtype, f.shape, sequence=f.sequence) for f in read_schema)
    else:
        stored = _mapped_schema(sources[0], read_schema, map_fn, decoding)
    _check_layout(stored, stored if map_fn is not None else read_schema, examples_per_record)
    num_examples = None if shards == 1 else sum(s.count() for s in sources)
    if num_examples is not None and shards > num_examples:
        raise ValueError(
            f"Expected `shards` to be at most the number of examples ({num_examples}), so no "
            f"shard is empty. Received: shards={shards}"
        )
    tf.io.gfile.makedirs(out_dir)
    clear_dataset(out_dir, prefix, overwrite)
    chunks = _chunks(sources, read_schema, chunk_size, map_fn, stored, decoding)
    result = write_shards(
        stored,
        chunks,
        out_dir,
        num_examples=num_examples,
        shards=shards,
        compression=codec,
        prefix=prefix,
        chunk_size=chunk_size,
        examples_per_record=examples_per_record,
        progress=progress,
        format=format,
    )
    logger.info("Converted %d file(s) to %s", len(paths), out_dir)
    return result


def _check_convert_args(
    shards: object,
    chunk_size: object,
    examples_per_record: object,
    max_corrupt_records: object,
    compression: str | None,
    prefix: object,
    decode: object,
) -> str:
    """Check :func:`convert`'s plain arguments on entry; return the output's compression.

    Raises:
        TypeError: If one has the wrong type.
        ValueError: If one is out of range.
    """
    check_positive_int(shards, "shards")
    check_positive_int(chunk_size, "chunk_size")
    check_positive_int(examples_per_record, "examples_per_record")
    check_non_negative_int(max_corrupt_records, "max_corrupt_records")
    codec = check_compression("" if compression is None else compression, allow_auto=False) or ""
    if not isinstance(prefix, str) or not prefix or os.sep in prefix:
        raise ValueError(expected("prefix", "a plain file name prefix", prefix))
    if decode is not None and (
        not isinstance(decode, Mapping) or not all(isinstance(k, str) for k in decode)
    ):
        raise TypeError(
            expected(
                "decode",
                "None or a dict of feature name -> change, such as "
                "{'image_raw': ('uint8', (28, 28, 1))} (see Schema.replace)",
                decode,
            )
        )
    return codec


class _InputFile:
    """One input file: its compression, sidecar (if written by this package) and packing.

    An ArrayRecord file (told by name or content) is read by index, in batches.
    """

    def __init__(self, path: str, sidecar: Sidecar | None) -> None:
        self.path = path
        self.damage: DamageMap | None = None  # max_corrupt_records: what the scan found
        self.sidecar = sidecar
        self.array = ArrayRecordFiles([path]) if is_array_record(path) else None
        if self.sidecar is not None:
            self.compression = self.sidecar.compression
            self.per_record = self.sidecar.examples_per_record
        else:
            self.compression = "" if self.array else detect_compression(path)
            self.per_record = 1

    def check(self, schema: Schema) -> None:
        """Raise a clear error if the file's first record does not match ``schema``."""
        if self.damage is not None:
            first = self.damage.of(self.path).first
            if first is None:  # no whole record
                return
        elif self.array is not None:
            first = self.array.read([0])[0]
        else:
            if self.sidecar is None:  # TensorFlow would stop silently at a record cut short
                check_framing(self.path, self.compression)
            first = first_record(self.path, self.compression)
        example = example_pb2.Example()
        example.ParseFromString(first)
        if self.per_record > 1:
            check_block(schema, example, self.per_record, file=self.path, record=0)
        else:
            schema.check_example(example, file=self.path, record=0)

    def count(self) -> int:
        """The examples in the file (from ``schema.json``, or by counting the records)."""
        if self.damage is not None and self.per_record == 1:
            return self.damage.of(self.path).records
        if self.sidecar is not None and self.damage is None:
            known = self.sidecar.examples_of(os.path.basename(self.path))
            if known is not None:
                return known
        if self.array is not None:
            return len(self.array)
        records = self.records()
        return int(records.reduce(np.int64(0), lambda n, _: n + 1))

    def records(self) -> tf.data.Dataset:
        """The file's records (the whole ones only, under ``max_corrupt_records``)."""
        if self.array is not None:  # a batch of records read by index in one call
            keys = tf.data.Dataset.range(len(self.array)).batch(1024)
            return keys.map(lambda k, a=self.array: read_records(a, k)).unbatch()
        return RecordFiles((self.path,), self.compression, self.damage).records()


def _check_framed(sources: Sequence[_InputFile], max_corrupt_records: int) -> None:
    """Refuse ``max_corrupt_records`` for ArrayRecord input: it counts TFRecord damage."""
    arrays = [source.path for source in sources if source.array is not None]
    if arrays:
        raise ValueError(
            f"Expected max_corrupt_records=0 for ArrayRecord input ({arrays[0]!r}): "
            "it skips damaged TFRecord records, and array_record checks its own chunks. "
            f"Received: max_corrupt_records={max_corrupt_records}"
        )


def _check_not_input(paths: Sequence[str], out_dir: str) -> None:
    target = os.path.abspath(out_dir)
    for path in paths:
        if os.path.dirname(os.path.abspath(path)) == target:
            raise ValueError(
                "Expected `directory` to be another directory than the input files' "
                f"(the output would replace them). Received: directory={out_dir!r}, which "
                f"holds the input {path!r}"
            )


def _read_schema(
    paths: list[str],
    schema: Schema | str | os.PathLike[str] | None,
    decode: Mapping[str, Any] | None,
    sources: list[_InputFile],
) -> Schema:
    """The schema to parse the input with: given or inferred, changed by ``decode``."""
    if schema is None:
        chosen = infer_schema(paths)
    elif isinstance(schema, Schema):
        chosen = schema
    elif isinstance(schema, (str, os.PathLike)):
        chosen = load_schema(schema)
    else:
        raise TypeError(
            expected(
                "schema",
                "None (stored or inferred), a tfrecord.Schema or the path of a schema.json",
                schema,
            )
        )
    if decode:
        chosen = chosen.replace(**decode)
    for source in sources:
        if source.sidecar is not None and (schema is not None or decode):
            chosen = chosen.with_stored_encodings(source.sidecar.schema)
            chosen.check_compatible(
                source.sidecar.schema, source=f"the schema stored for {source.path!r}"
            )
    return chosen


def _check_layout(stored: Schema, read: Schema, examples_per_record: int) -> None:
    """Raise, naming the feature and what to pass, if ``stored`` cannot be written."""
    if examples_per_record == 1:
        return
    for feature in stored:
        if not feature.varying and not feature.size:
            raise ValueError(
                f"Expected every feature to hold values to pack {examples_per_record} "
                f"examples per record. Received: feature {feature.name!r} of shape "
                f"{feature.shape}; drop it (decode or schema), or pass "
                "examples_per_record=1 (--examples-per-record 1)."
            )
    check_packable(stored, examples_per_record)


def _to_numpy(feature: Feature, value: Any) -> np.ndarray:
    """A parsed batch of one feature as the arrays ``write_shards`` takes."""
    if isinstance(value, tf.RaggedTensor):
        inner = value.values  # a feature list's frames ([frames, *shape], or ragged)
        ragged = isinstance(inner, tf.RaggedTensor)
        flat = _to_numpy(feature.frame, inner) if ragged else inner.numpy()
        splits = value.row_splits.numpy()
        rows = np.empty(len(splits) - 1, dtype=object)
        for i in range(len(rows)):
            rows[i] = flat[splits[i] : splits[i + 1]]
        return rows
    array = value.numpy()
    if feature.dtype not in ("string", "bytes"):
        array = array.astype(feature.dtype, copy=False)
    return array


def _parsed(
    source: _InputFile, schema: Schema, chunk_size: int, decoding: Decoding | None = None
) -> tf.data.Dataset:
    """The batches of ``source``'s examples, ``chunk_size`` records at a time."""
    records = source.records()
    if source.per_record > 1:
        per_record = source.per_record
        return records.batch(max(1, chunk_size // per_record)).map(
            lambda serialized, n=per_record: unpack(schema, serialized, n)
        )
    return records.batch(chunk_size).map(
        lambda serialized: parse_batch(schema, serialized, decoding)
    )


def _mapped(
    batches: tf.data.Dataset, map_fn: Callable[[dict[str, Any]], Any], chunk_size: int
) -> tf.data.Dataset:
    examples = batches.unbatch().map(
        map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return batch_examples(examples, chunk_size, drop_remainder=False)


def _mapped_schema(
    source: _InputFile,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    decoding: Decoding | None = None,
) -> Schema:
    """The schema of ``map_fn``'s outputs: what ``convert`` stores."""
    spec = _parsed(source, schema, 1, decoding).unbatch().map(map_fn).element_spec
    if not isinstance(spec, dict) or not all(isinstance(k, str) for k in spec):
        raise TypeError(expected("map_fn", "a function returning a dict of name -> tensor", spec))
    features = []
    for name, value in spec.items():
        dtype = "bytes" if value.dtype == tf.string else value.dtype.name
        if is_list(value):
            features.append(Feature(name, dtype, (None,)))
        elif isinstance(value, tf.TensorSpec) and value.shape.is_fully_defined():
            features.append(Feature(name, dtype, tuple(value.shape.as_list())))
        else:
            raise ValueError(
                f"Expected `map_fn` to return dense tensors of a static shape, or 1-D "
                f"lists of varying length, to store them (set_shape or resize {name!r} to "
                f"one shape). Received: {name!r}: {value}"
            )
    return Schema(features)


def _chunks(
    sources: list[_InputFile],
    schema: Schema,
    chunk_size: int,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    stored: Schema | None = None,
    decoding: Decoding | None = None,
) -> Iterator[dict[str, Any]]:
    """The examples of ``sources``, in order, parsed ``chunk_size`` records at a time."""
    out = stored if stored is not None else schema
    for source in sources:
        batches = _parsed(source, schema, chunk_size, decoding)
        if map_fn is not None:
            batches = _mapped(batches, map_fn, chunk_size)
        iterator = iter(batches)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            except tf.errors.OpError as error:
                records = stored_schema(schema, decoding)  # checked as stored
                clear = explain_error(error, [source.path], records, source.compression)
                raise (clear or error) from error
            yield {f.name: _to_numpy(f, batch[f.name]) for f in out}
