"""TFRecord files through the record seam: framing, damage and the index, composed.

The :class:`~tfr_hooks.tfrecord.formats.records.RecordFormat` of every file no other
registered format recognizes: its compression is detected from its framing
(:mod:`~tfr_hooks.tfrecord.formats.framing`), its records read by ``TFRecordDataset``,
damaged records scanned for by :mod:`~tfr_hooks.tfrecord.formats.damage`, and an
uncompressed file entered at a record through its record index
(:mod:`~tfr_hooks.tfrecord.formats.index`, built once and kept beside the file).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

import tfr_hooks.tf_private as tf_private
from tfr_hooks.tfrecord.formats.damage import DamageMap, scan_damage
from tfr_hooks.tfrecord.formats.framing import (
    check_framing,
    detect_compression,
    first_record,
    guess_compression,
    iter_records,
)
from tfr_hooks.tfrecord.formats.index import RecordIndex, record_index
from tfr_hooks.tfrecord.formats.records import READ_BUFFER, RecordFormat

__all__ = ["TFRecordFormat"]


class TFRecordFormat(RecordFormat):
    """TFRecord files (any name), uncompressed, GZIP or ZLIB."""

    name = "TFRecord"
    key = "tfrecord"
    queue_readable = True

    @classmethod
    def recognizes(cls, path: str) -> bool:
        """Any file: the format of the files no other format recognizes."""
        del path
        return True

    def compression(self, path: str, *, tolerant: bool = False) -> str:
        """Detected from the framing; ``tolerant``, guessed past a damaged first record."""
        return guess_compression(path) if tolerant else detect_compression(path)

    def check(self, path: str, compression: str) -> None:
        """TensorFlow stops silently at a header cut short: the framing is checked."""
        check_framing(path, compression)

    def iter_records(self, path: str, compression: str) -> Iterator[bytes]:
        """The records, through ``tf.data`` (see :func:`~.framing.iter_records`)."""
        return iter_records(path, compression)

    def first_record(self, path: str, compression: str) -> bytes:
        """The first record (see :func:`~.framing.first_record`)."""
        return first_record(path, compression)

    def records(self, path: Any, compression: str) -> tf.data.Dataset:
        """``TFRecordDataset`` of the file."""
        return tf.data.TFRecordDataset(path, compression_type=compression)

    def records_of_files(self, paths: Sequence[str], compression: str) -> tf.data.Dataset:
        """One ``TFRecordDataset`` of all the files."""
        return tf.data.TFRecordDataset(list(paths), compression_type=compression)

    def seekable(self, compression: str) -> bool:
        """Uncompressed files only: a GZIP or ZLIB stream is read from its start."""
        return not compression

    def index(self, path: str, compression: str) -> RecordIndex:
        """The record index, built once and kept (:func:`~.index.record_index`)."""
        return record_index(path, compression)

    def records_from(self, path: Any, offset: Any, buffer_size: Any = READ_BUFFER) -> Any:
        """The records from ``offset`` on, with one seek."""
        return tf_private.records_from_offset(path, offset, buffer_size)

    def scan(self, files: Sequence[str], compression: str, limit: int) -> DamageMap:
        """The damaged records of ``files`` (:func:`~.damage.scan_damage`)."""
        return scan_damage(files, compression, limit)
