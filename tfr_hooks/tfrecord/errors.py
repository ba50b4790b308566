"""Exceptions raised when TFRecord files cannot be found, read or matched to a schema.

Every exception derives from :class:`TFRecordError` and also from the builtin exception
that fits (``FileNotFoundError``, ``PermissionError`` or ``ValueError``), so callers can
catch either. Each carries the offending file, and where it applies the record index and
the feature, as attributes as well as in its message.

Examples:
    >>> from tfr_hooks import tfrecord
    >>> try:
    ...     tfrecord.dataset("missing/*.tfrecord", batch_size=32)
    ... except tfrecord.NoFilesError as error:
    ...     print(error)  # doctest: +SKIP
    No files match the pattern 'missing/*.tfrecord'.
"""

from __future__ import annotations

__all__ = [
    "TFRecordError",
    "NoFilesError",
    "UnreadableFileError",
    "EmptyFileError",
    "CorruptRecordError",
    "NotTFRecordError",
    "SchemaMismatchError",
    "MissingFeatureError",
]


class TFRecordError(Exception):
    """Base class of the errors of :mod:`tfr_hooks.tfrecord`.

    Args:
        message: The full, user-facing message.
        file: The file concerned, if any.
        record: The 0-based index of the record concerned within ``file``, if any.
        feature: The feature concerned, if any.

    Attributes:
        file: The file concerned, or ``None``.
        record: The record index within ``file``, or ``None``.
        feature: The feature name, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        record: int | None = None,
        feature: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.record = record
        self.feature = feature

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:  # keep the keyword attributes when pickled
        return (_rebuild, (type(self), self.message, self.file, self.record, self.feature))


def _rebuild(
    cls: type[TFRecordError],
    message: str,
    file: str | None,
    record: int | None,
    feature: str | None,
) -> TFRecordError:
    return cls(message, file=file, record=record, feature=feature)


class NoFilesError(TFRecordError, FileNotFoundError):
    """No file matches a glob, a directory holds no records, or a named file is missing."""


class UnreadableFileError(TFRecordError, PermissionError):
    """A file exists but cannot be opened or read (for example: permission denied)."""


class EmptyFileError(TFRecordError, ValueError):
    """A file holds no records at all (zero bytes, or a compressed stream of nothing)."""


class CorruptRecordError(TFRecordError, ValueError):
    """A record cannot be read: bad CRC, truncated file, or wrong compression."""


class NotTFRecordError(CorruptRecordError):
    """Not even the first record of a file can be read: the file is not a TFRecord file."""


class SchemaMismatchError(TFRecordError, ValueError):
    """Records do not match the schema: wrong kind (bytes/float/int64), length or dtype."""


class MissingFeatureError(SchemaMismatchError):
    """A feature named in the schema is absent from a record."""
