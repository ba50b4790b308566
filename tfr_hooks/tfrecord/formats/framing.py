"""Checking TFRecord files, detecting their compression, and iterating over their records.

Paths are local or on any file system ``tf.io.gfile`` knows; directories and globs are
listed by :func:`~tfr_hooks.tfrecord.sources.base.resolve_files`, which asks the sources.
Every failure raises an error of :mod:`tfr_hooks.tfrecord.errors` that names the file.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator, Sequence
from typing import TypeAlias

import tensorflow as tf

from tfr_hooks.tfrecord.errors import (
    CorruptRecordError,
    EmptyFileError,
    NoFilesError,
    NotTFRecordError,
    TFRecordError,
    UnreadableFileError,
)

__all__ = [
    "PathLike",
    "Files",
    "check_readable",
    "check_compression",
    "detect_compression",
    "guess_compression",
    "iter_records",
    "first_record",
    "check_framing",
    "FRAMING_CHECK_MAX_BYTES",
]

logger = logging.getLogger(__name__)

PathLike: TypeAlias = "str | os.PathLike[str]"
#: One path, directory or glob pattern, or a sequence of them.
Files: TypeAlias = "PathLike | Sequence[PathLike]"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class _OwnDeprecations(logging.Filter):
    """Drops TensorFlow's deprecation notices about calls made by this subpackage.

    The readers use ``tf_record_iterator`` and, when asked, the queue pipeline on
    purpose; the notices would only tell users to stop using what they did not call.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        return not ("deprecated" in message and _PACKAGE_DIR in message)


if not any(isinstance(f, _OwnDeprecations) for f in logging.getLogger("tensorflow").filters):
    logging.getLogger("tensorflow").addFilter(_OwnDeprecations())
_GZIP_MAGIC = b"\x1f\x8b"
_COMPRESSIONS = {"": "", "none": "", "gzip": "GZIP", "zlib": "ZLIB"}


def check_compression(compression: str | None, *, allow_auto: bool = True) -> str | None:
    """Normalise a compression name to TensorFlow's spelling.

    Args:
        compression: ``None`` (detect), ``""``/``"none"``, ``"gzip"`` or ``"zlib"``, in any
            case.
        allow_auto: Whether ``None`` (automatic detection) is accepted.

    Returns:
        ``None``, ``""``, ``"GZIP"`` or ``"ZLIB"``.

    Raises:
        ValueError: For any other value.
    """
    if compression is None and allow_auto:
        return None
    if isinstance(compression, str) and compression.lower() in _COMPRESSIONS:
        return _COMPRESSIONS[compression.lower()]
    allowed = "None (detect), " if allow_auto else ""
    raise ValueError(
        f"Expected `compression` to be one of {allowed}'', 'gzip' or 'zlib'. "
        f"Received: compression={compression!r}"
    )


def check_readable(path: str) -> None:
    """Raise a clear error if ``path`` does not exist or cannot be opened."""
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            handle.read(1)
    except tf.errors.NotFoundError as error:
        raise NoFilesError(f"TFRecord file {path!r} does not exist.", file=path) from error
    except (tf.errors.OpError, OSError) as error:
        raise UnreadableFileError(
            f"TFRecord file {path!r} cannot be read: {_first_line(error)}", file=path
        ) from error


def _first_line(error: BaseException) -> str:
    text = error.message if isinstance(error, tf.errors.OpError) else str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def _candidates(path: str) -> list[str]:
    """Compressions to try for ``path``, most likely first, from its first bytes."""
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            head = handle.read(2)
    except tf.errors.NotFoundError as error:
        raise NoFilesError(f"TFRecord file {path!r} does not exist.", file=path) from error
    except (tf.errors.OpError, OSError) as error:
        raise UnreadableFileError(
            f"TFRecord file {path!r} cannot be read: {_first_line(error)}", file=path
        ) from error
    if not head:
        raise EmptyFileError(
            f"TFRecord file {path!r} is empty (0 bytes); expected at least one record.",
            file=path,
        )
    if head.startswith(_GZIP_MAGIC):
        return ["GZIP", "", "ZLIB"]
    # A zlib stream starts with a header whose two bytes, read big-endian, divide by 31.
    if len(head) == 2 and head[0] & 0x0F == 8 and (head[0] * 256 + head[1]) % 31 == 0:
        return ["ZLIB", ""]
    return ["", "ZLIB"]


def detect_compression(path: PathLike) -> str:
    """Find the compression of a TFRecord file by reading its first record.

    GZIP is recognised by its magic bytes; ZLIB and no compression are told apart by
    trying to read the first record.

    Args:
        path: The file.

    Returns:
        ``""``, ``"GZIP"`` or ``"ZLIB"``.

    Raises:
        NoFilesError: If the file does not exist.
        UnreadableFileError: If it cannot be opened.
        EmptyFileError: If it holds no records.
        NotTFRecordError: If its first record cannot be read with any compression.
    """
    name = os.fspath(path)
    candidates = _candidates(name)
    failures: list[str] = []
    for compression in candidates:
        try:
            next(_raw_records(name, compression), None)
        except tf.errors.OpError as error:
            failures.append(f"{compression or 'no compression'}: {_first_line(error)}")
            continue
        return compression
    raise NotTFRecordError(
        f"File {name!r} is not a TFRecord file: its first record cannot be read with any "
        f"compression (expected a TFRecord, uncompressed, GZIP or ZLIB; found "
        f"{'; '.join(failures)}).",
        file=name,
        record=0,
    )


def guess_compression(path: PathLike) -> str:
    """:func:`detect_compression`, or, when the first record is damaged, a guess.

    The guess comes from the first bytes (GZIP's magic, a zlib header, else none), for
    readers that skip damaged records (``max_corrupt_records``): their scan then finds
    what the file holds.
    """
    try:
        return detect_compression(path)
    except NotTFRecordError:
        return _candidates(os.fspath(path))[0]


def _raw_records(path: str, compression: str) -> Iterator[bytes]:
    options = tf.io.TFRecordOptions(compression_type=compression)
    yield from tf.compat.v1.io.tf_record_iterator(path, options=options)


def iter_records(path: PathLike, compression: str | None = None) -> Iterator[bytes]:
    """Yield the serialized records of one file, turning read failures into clear errors.

    Works in eager and in graph mode.

    Args:
        path: The file.
        compression: ``""``, ``"GZIP"``, ``"ZLIB"``, or ``None`` to detect it.

    Yields:
        Each record's bytes.

    Raises:
        NoFilesError: If the file does not exist.
        UnreadableFileError: If it cannot be opened.
        NotTFRecordError: If the first record cannot be read at all.
        CorruptRecordError: If a later record is corrupt or truncated.
    """
    name = os.fspath(path)
    compression = check_compression(compression)
    if compression is None:
        compression = detect_compression(name)
    index = 0
    consumed = 0  # bytes of the records read, to catch a file cut inside a record header
    records = _raw_records(name, compression)
    while True:
        try:
            record = next(records)
        except StopIteration:
            if compression == "":
                _check_size(name, index, consumed)
            return
        except tf.errors.NotFoundError as error:
            raise NoFilesError(f"TFRecord file {name!r} does not exist.", file=name) from error
        except tf.errors.DataLossError as error:
            raise _corrupt(name, index, compression, error) from error
        except tf.errors.OpError as error:
            raise UnreadableFileError(
                f"TFRecord file {name!r} cannot be read: {_first_line(error)}", file=name
            ) from error
        yield record
        index += 1
        consumed += len(record) + 16  # length (8), its CRC (4), data, data CRC (4)


#: Files up to this size get their record framing checked when a pipeline is built.
FRAMING_CHECK_MAX_BYTES = 2 << 30


def check_framing(path: str, compression: str) -> None:
    """Find a file cut inside a record header, which TensorFlow's readers skip silently.

    Walks the 12-byte record headers of an uncompressed local file (a read and a seek
    per record, no data read). A file cut inside a record's data is left alone: the
    readers fail loudly there, and :func:`explain_error` names the file. A file that
    ends in the middle of a header, where the readers stop without a word, raises here.
    Compressed, remote and very large files (over :data:`FRAMING_CHECK_MAX_BYTES`) are
    left to :func:`explain_error`.

    Args:
        path: The file.
        compression: Its compression (``""`` for none).

    Raises:
        CorruptRecordError: If the file ends inside a record header.
    """
    if compression or "://" in path:
        return
    size = os.path.getsize(path)
    if size > FRAMING_CHECK_MAX_BYTES:
        return
    count = consumed = 0
    with open(path, "rb") as handle:
        while consumed + 12 <= size:
            handle.seek(consumed)
            (length,) = struct.unpack("<Q", handle.read(8))
            end = consumed + 12 + length + 4
            if end > size:
                return  # cut inside the data: TensorFlow reports it when it gets there
            consumed = end
            count += 1
    _check_size(path, count, consumed)


def _check_size(path: str, count: int, consumed: int) -> None:
    """TensorFlow stops silently at a partial record header; find it from the size."""
    size = tf.io.gfile.stat(path).length
    if size != consumed:
        raise CorruptRecordError(
            f"TFRecord file {path!r} (uncompressed) is damaged after record {count - 1}: "
            f"the file is truncated, or has stray bytes at its end. Expected {consumed} bytes "
            f"for its {count} complete record(s); found {size} bytes.",
            file=path,
            record=count,
        )


def _corrupt(path: str, index: int, compression: str, error: BaseException) -> TFRecordError:
    found = _first_line(error)
    how = f"{compression} compressed" if compression else "uncompressed"
    if index == 0 and ("Is this even a TFRecord" in found or "inflate" in found):
        return NotTFRecordError(
            f"File {path!r} is not a TFRecord file ({how}): expected a record at the start "
            f"of the file; found unreadable data ({found}).",
            file=path,
            record=0,
        )
    if "truncated" in found.lower() or "less bytes" in found.lower():
        what = "the file is truncated"
    else:
        what = "its checksum (CRC) does not match: the file is corrupted"
    return CorruptRecordError(
        f"TFRecord file {path!r} ({how}) is damaged at record {index}: {what}. "
        f"{index} record(s) before it are readable. TensorFlow said: {found}",
        file=path,
        record=index,
    )


def first_record(path: PathLike, compression: str | None = None) -> bytes:
    """Return the first record of a file, or raise a clear error if there is none.

    Args:
        path: The file.
        compression: ``""``, ``"GZIP"``, ``"ZLIB"``, or ``None`` to detect it.

    Returns:
        The first record's bytes.

    Raises:
        EmptyFileError: If the file holds no records.
        TFRecordError: Any error of :func:`iter_records`.
    """
    for record in iter_records(path, compression):
        return record
    raise EmptyFileError(
        f"TFRecord file {os.fspath(path)!r} holds no records; expected at least one.",
        file=os.fspath(path),
    )
