"""The record seam: what a file format gives the readers, and the formats registered.

A :class:`RecordFormat` says how the records of one kind of file are found: whether a
file is of the format (by name or content), its compression, its records in Python
(for the checks, the schema inference and the counts), a ``tf.data`` dataset of a
file's serialized records, and, when the format can seek, a record index (where every
block of records starts) and the records from a place in the file. The orders read
through it only (:mod:`tfr_hooks.tfrecord.pipelines.orders`): the file order asks for
a file's records, the global order and a resumed pass for an index and the records
from an offset.

TFRecord files are the format every file is taken for unless another registered format
recognizes it (:mod:`tfr_hooks.tfrecord.formats.tfrecord`). A new format is one module:
a subclass of :class:`RecordFormat`, added with
:func:`~tfr_hooks.tfrecord.formats.reading.register_format`.

Examples:
    >>> from tfr_hooks.tfrecord.formats.reading import register_format
    >>> @register_format  # doctest: +SKIP
    ... class Mine(RecordFormat):
    ...     name = "mine"
    ...     ...
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.index import INDEX_BLOCK, RecordIndex, file_key

__all__ = ["READ_BUFFER", "RecordFormat", "index_of_offsets"]

#: Bytes a read from an offset buffers (``tf.data.TFRecordDataset``'s default).
READ_BUFFER = 256 << 10


class RecordFormat(abc.ABC):
    """How the records of one file format are found and read (one module a format).

    A format holds no state: the readers make one with ``cls()``. ``compression`` is
    the one the source found (``""`` for a format without compression).
    """

    #: The format's name, in messages.
    name: ClassVar[str] = ""
    #: The format's key in files and options (``schema.json``, ``inspect``'s reports).
    key: ClassVar[str] = ""
    #: Whether ``tf.compat.v1.TFRecordReader`` reads it (``pipeline="queue"``).
    queue_readable: ClassVar[bool] = False
    #: Whether a tf.data service worker can run its reads (no Python function in them).
    servable: ClassVar[bool] = True
    #: Whether any records are read by their number in one call (:meth:`records_at`):
    #: a random-access format, whose index's offsets are record numbers.
    by_index: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def recognizes(cls, path: str) -> bool:
        """Whether ``path`` is a file of this format (by its name or its first bytes)."""

    def compression(self, path: str, *, tolerant: bool = False) -> str:
        """The compression of ``path`` (``tolerant``: a damaged start may be guessed past)."""
        del path, tolerant
        return ""

    def check(self, path: str, compression: str) -> None:
        """Raise when ``path`` is cut short or badly framed (before any pipeline is built)."""
        del path, compression

    @abc.abstractmethod
    def iter_records(self, path: str, compression: str) -> Iterator[bytes]:
        """The serialized records of ``path``, in Python, in file order."""

    def first_record(self, path: str, compression: str) -> bytes:
        """The first record of ``path``.

        Raises:
            ValueError: The file holds no record.
        """
        for record in self.iter_records(path, compression):
            return record
        raise ValueError(f"Expected a record in the file. Received: file={path!r} (empty)")

    def count(self, path: str, compression: str) -> int:
        """The records of ``path``."""
        return sum(1 for _ in self.iter_records(path, compression))

    @abc.abstractmethod
    def records(self, path: Any, compression: str) -> tf.data.Dataset:
        """A dataset of the scalar serialized records of file ``path`` (a string tensor)."""

    def records_of_files(self, paths: Sequence[str], compression: str) -> tf.data.Dataset:
        """The records of ``paths``, file after file."""
        files = tf.data.Dataset.from_tensor_slices(list(paths))
        return files.flat_map(lambda path: self.records(path, compression))

    def seekable(self, compression: str) -> bool:
        """Whether a read can enter a file at a record (an index and :meth:`records_from`)."""
        del compression
        return False

    def index(self, path: str, compression: str) -> RecordIndex:
        """Where the blocks of records of ``path`` start (see :func:`index_of_offsets`).

        Raises:
            ValueError: The format (or this compression) cannot be entered at a record.
        """
        del compression
        raise ValueError(
            f"Expected a format a read can enter at a record ({self.name} files can only "
            f"be read from their start). Received: file={path!r}"
        )

    def records_from(self, path: Any, offset: Any, buffer_size: Any = READ_BUFFER) -> Any:
        """The records of ``path`` from byte ``offset`` (where a record starts) on.

        The arguments may be tensors (a function of ``interleave``); ``buffer_size`` is
        a hint: about the bytes the caller reads.
        """
        del offset, buffer_size
        raise ValueError(
            f"Expected a format a read can enter at a record ({self.name} files can only "
            f"be read from their start). Received: file={path!r}"
        )

    def entry(self, index: RecordIndex, record: int) -> tuple[int, int]:
        """Where a read of ``index``'s file enters to give its record ``record`` first.

        Returns:
            ``(offset, skip)``: the offset :meth:`records_from` starts at, and the
            records it reads there before ``record`` (to drop). By default the start of
            the record's block, the block's records before it skipped; a format that
            starts at any record (:attr:`by_index`) reads nothing before it.
        """
        if self.by_index:
            return int(record), 0
        return int(index.bounds[record // index.block]), record % index.block

    def records_at(self, paths: Sequence[str], files: Any, offsets: Any) -> tf.Tensor:
        """The records at ``offsets`` of files ``files`` (places in ``paths``), one read.

        For a format read by index (:attr:`by_index`): its offsets are record numbers,
        so any records, in any order, are read with one call (the batch, not the record,
        is the unit of work). ``files`` and ``offsets`` are ``int64`` vector tensors of
        one length.

        Returns:
            A ``tf.string`` vector of the serialized records, in the order asked.
        """
        del files, offsets
        raise ValueError(
            f"Expected a format whose records are read by their number ({self.name} "
            f"files are read as a stream). Received: files={list(paths)[:3]!r}"
        )

    def scan(self, files: Sequence[str], compression: str, limit: int) -> Any:
        """A scan for damaged records (``max_corrupt_records``), when the format has one."""
        del files, compression
        raise ValueError(
            f"Expected max_corrupt_records=0 with {self.name} files (their damage is not "
            f"scanned). Received: max_corrupt_records={limit}"
        )


def index_of_offsets(
    path: str, starts: Sequence[int] | np.ndarray, end: int, *, block: int = INDEX_BLOCK
) -> RecordIndex:
    """The :class:`~tfr_hooks.tfrecord.formats.index.RecordIndex` of records at ``starts``.

    For a format's :meth:`RecordFormat.index`: ``starts`` are the byte offsets where its
    records start, in file order; ``end`` where the last one ends.
    """
    offsets = np.asarray(starts, np.int64)
    bounds = np.concatenate([offsets[::block], np.array([end], np.int64)])
    return RecordIndex(path, "", file_key(path), len(offsets), block, bounds)
