"""Turning TensorFlow's read errors into messages that name the file, record and feature.

While a pipeline runs, a damaged shard or a record that does not match the schema shows
up as a ``DataLossError`` or ``InvalidArgumentError`` that rarely says which file is at
fault. :func:`explain_error` rescans the files with the schema to find out. It knows
nothing of loops or hooks: :class:`tfr_hooks.DataErrorHook` calls it for the loops of
this package when a run ends with an error.
"""

from __future__ import annotations

import logging

import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.tfrecord.errors import CorruptRecordError, TFRecordError
from tfr_hooks.tfrecord.formats.framing import Files, check_compression
from tfr_hooks.tfrecord.formats.packed import check_block
from tfr_hooks.tfrecord.formats.reading import format_of
from tfr_hooks.tfrecord.inspection.describe import infer_schema
from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.sources.base import open_source, resolve_files

__all__ = ["explain_error", "is_data_error"]

logger = logging.getLogger(__name__)

# Error types a bad file or record can cause while a pipeline runs.
_DATA_ERRORS = (
    tf.errors.DataLossError,
    tf.errors.InvalidArgumentError,
    tf.errors.NotFoundError,
    tf.errors.PermissionDeniedError,
)
# Words in the message of an InvalidArgumentError raised by parsing or decoding records.
_PARSE_WORDS = (
    "ParseExample",
    "parse_example",
    "Feature:",
    "Key:",
    "DecodeRaw",
    "Reshape",
    "reshape",
    "Input to reshape",
    "tf.train.Example",
    "Could not parse example",
    "ParseSequenceExample",
    "tf.train.SequenceExample",
    "Feature list",
)


def is_data_error(error: BaseException) -> bool:
    """Whether ``error`` may come from reading or parsing records (worth a rescan)."""
    if not isinstance(error, _DATA_ERRORS):
        return False
    if isinstance(error, tf.errors.InvalidArgumentError):
        message = error.message or ""
        return any(word in message for word in _PARSE_WORDS)
    return True


def explain_error(
    error: BaseException | None,
    files: Files,
    schema: Schema | None = None,
    compression: str | None = None,
) -> TFRecordError | None:
    """Find the file, record and feature behind a read error, by rescanning the files.

    Each record of each file is read and, when a schema is given, checked against it.
    The first problem found is returned as a clear exception; use it as
    ``raise explain_error(e, files) or e from e``.

    Args:
        error: The error a pipeline raised, or ``None`` to check the files anyway.
            Errors that cannot come from the data (not ``DataLossError``,
            ``InvalidArgumentError`` from parsing, ``NotFoundError`` or
            ``PermissionDeniedError``) are not explained.
        files: The pipeline's files: paths, directories or glob patterns.
        schema: The schema the pipeline parses with; ``None`` for the one stored in
            ``schema.json`` or inferred from the records.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.

    Returns:
        A :class:`~tfr_hooks.tfrecord.TFRecordError` naming the file (and the record and
        feature where they apply), or ``None`` if ``error`` is not a data error or the
        files show no problem.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> ds = tfrecord.dataset("data/", batch_size=32)  # doctest: +SKIP
        >>> try:
        ...     for batch in ds:
        ...         pass
        ... except tf.errors.OpError as e:
        ...     raise tfrecord.explain_error(e, "data/") or e from e  # doctest: +SKIP
    """
    if isinstance(error, TFRecordError):
        return None
    if error is not None and not is_data_error(error):
        return None
    try:
        codec = check_compression(compression)
        paths = resolve_files(files)
        source = open_source(paths)
        if schema is None:
            schema = infer_schema(paths, compression=codec)
        for path in paths:
            sidecar = source.sidecar(path)  # packed shards are checked block by block
            _check_file(path, codec, schema, 1 if sidecar is None else sidecar.examples_per_record)
    except TFRecordError as found:
        logger.debug("Read error explained: %s", found)
        return found
    return None


def _check_file(path: str, compression: str | None, schema: Schema, per_record: int) -> None:
    example = example_pb2.Example()
    reading = format_of(path)  # the file's records, through its format
    codec = reading.compression(path) if compression is None else compression
    for index, record in enumerate(reading.iter_records(path, codec)):
        if per_record == 1:  # an Example or SequenceExample, or an error saying what it is
            schema.check_example(record, file=path, record=index, warn=False)
            continue
        try:
            example.ParseFromString(record)
        except Exception as error:
            raise CorruptRecordError(
                f"Record {index} of file {path!r} is not a tf.train.Example: expected a "
                f"serialized tf.train.Example; found {len(record)} bytes that do not parse.",
                file=path,
                record=index,
            ) from error
        check_block(schema, example, per_record, file=path, record=index)  # a packed shard
