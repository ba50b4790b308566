"""Damaged records, found before a pipeline is built, skipped and bounded.

With ``max_corrupt_records=N`` (N > 0) the readers scan every file once when the pipeline
is built (:func:`scan_damage`) and read only the records that are whole. What counts as
damage, one :class:`CorruptRecord` each:

- a record whose data checksum (masked CRC32C) does not match;
- a record whose 12-byte length header does not match its checksum: the length cannot be
  trusted, so the scan looks for the next offset where a whole record starts (a header
  and data whose checksums match) and skips the bytes between, as one damaged record;
- a truncated tail: the file ends inside a record's header or data;
- a GZIP or ZLIB stream that cannot be read on (a damaged member, or data whose records
  fail their checksum once inflated): nothing after that point of the file can be found,
  so the rest of the file is skipped and counts as **one** damaged record;
- a record whose checksums match but whose bytes are not a ``tf.train.Example`` (nor a
  ``SequenceExample``).

The result is a :class:`DamageMap`: for each file, its whole records (byte offsets and
lengths of an uncompressed file, or the readable prefix and the indices to drop of a
compressed one) and its :class:`CorruptRecord` list. Past N in total, the (N+1)-th raises
:class:`~tfr_hooks.tfrecord.CorruptRecordError` naming its file and record, at build time.
Each skipped record is logged once (a warning naming file and record).

:class:`DamagedReads` turns the map into ``tf.data`` datasets of the whole records, with
TensorFlow ops only (no ``py_function``: a tf.data service worker can run them): a file
without damage is read by ``TFRecordDataset`` as before; an uncompressed damaged file by
``FixedLengthRecordDataset`` over the byte ranges of its runs of whole records (at most
:data:`CHUNK_BYTES` each), split into records with ``tf.strings.substr``; a compressed
damaged file by ``TFRecordDataset`` up to the damage, less the records that are no proto.

Record indices count the records as the scan finds them: a damaged stretch found by
resynchronizing after a bad length header is one index, whatever it held.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.example import example_pb2

import tfr_hooks.tf_private as tf_private
from tfr_hooks.tfrecord.errors import CorruptRecordError

__all__ = [
    "CorruptRecord",
    "FileDamage",
    "DamageMap",
    "DamagedReads",
    "scan_damage",
    "scan_file",
    "masked_crc32c",
    "CHUNK_BYTES",
]

logger = logging.getLogger(__name__)

#: The largest byte range of whole records read at once from a damaged file.
CHUNK_BYTES = 16 << 20
_HEADER = 12  # length (8) and its masked CRC (4)
_FOOTER = 4  # the data's masked CRC


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli, reflected
        table[byte] = crc
    return table


_TABLE = _crc_table()
_TABLE_LIST = [int(v) for v in _TABLE]
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """The masked CRC32C that TFRecord framing stores after the length and the data.

    The table-driven CRC32C (Castagnoli polynomial), then TensorFlow's mask: rotated right
    by 15 bits plus ``0xa282ead8``. A byte at a time in Python: for headers (8 bytes) and
    tests, not for bulk data (the scan leaves those to TensorFlow's C++ readers).
    """
    crc, table = 0xFFFFFFFF, _TABLE_LIST
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _header_starts(block: np.ndarray) -> np.ndarray:
    """The offsets in ``block`` where 8 bytes are followed by their masked CRC32C.

    Vectorized over every offset at once (8 table lookups per offset): the candidates
    where a record may start, found after a length header that failed its checksum.
    """
    count = len(block) - _HEADER + 1
    if count <= 0:
        return np.zeros(0, np.int64)
    crc = np.full(count, 0xFFFFFFFF, np.uint32)
    for j in range(8):
        crc = _TABLE[(crc ^ block[j : j + count]) & 0xFF] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
    stored = (
        block[8 : 8 + count].astype(np.uint32)
        | block[9 : 9 + count].astype(np.uint32) << np.uint32(8)
        | block[10 : 10 + count].astype(np.uint32) << np.uint32(16)
        | block[11 : 11 + count].astype(np.uint32) << np.uint32(24)
    )
    return np.flatnonzero(masked == stored)


@dataclass(frozen=True)
class CorruptRecord:
    """One damaged record, skipped under ``max_corrupt_records``.

    Attributes:
        file: The file holding it.
        index: Its 0-based index among the file's records, as the scan counts them (a
            stretch skipped after a damaged length header is one index).
        reason: What is wrong with it, in words.
    """

    file: str
    index: int
    reason: str


@dataclass(frozen=True)
class FileDamage:
    """The scan of one file: its whole records and its damaged ones.

    Attributes:
        file: The file.
        compression: Its compression (``""``, ``"GZIP"``, ``"ZLIB"``).
        records: The whole records it holds (those read).
        corrupt: Its damaged records, in file order.
        first: The bytes of its first whole record (``None`` when it has none).
        offsets: Uncompressed and damaged: the byte offsets of its whole records' data.
        lengths: Their lengths, in bytes.
        take: Compressed and damaged: the records readable before the stream breaks
            (``-1``: all).
        skip: Compressed: the indices, among those, of records that are no proto.
    """

    file: str
    compression: str
    records: int
    corrupt: tuple[CorruptRecord, ...] = ()
    first: bytes | None = field(default=None, repr=False)
    offsets: Any = field(default=None, compare=False, repr=False)  # numpy arrays
    lengths: Any = field(default=None, compare=False, repr=False)
    take: int = -1
    skip: tuple[int, ...] = ()

    @property
    def damaged(self) -> bool:
        """Whether the file holds a damaged record."""
        return bool(self.corrupt)

    @property
    def ranged(self) -> bool:
        """Whether its whole records are read by byte range (uncompressed and damaged)."""
        return self.damaged and not self.compression


@dataclass(frozen=True)
class DamageMap:
    """What :func:`scan_damage` found in every file, in the order of the files.

    Attributes:
        files: One :class:`FileDamage` per file scanned.
        limit: The ``max_corrupt_records`` it was scanned with.
    """

    files: tuple[FileDamage, ...]
    limit: int
    _by_path: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_path.update({f.file: i for i, f in enumerate(self.files)})

    @property
    def corrupt(self) -> tuple[CorruptRecord, ...]:
        """Every damaged record skipped, file by file."""
        return tuple(c for f in self.files for c in f.corrupt)

    def of(self, path: str) -> FileDamage:
        """The scan of ``path`` (one of the files scanned)."""
        return self.files[self._by_path[path]]

    def index(self, path: str) -> int:
        """The position of ``path`` among the files scanned."""
        return self._by_path[path]

    def damages(self, paths: Sequence[str]) -> bool:
        """Whether any of ``paths`` holds a damaged record."""
        return any(self.of(p).damaged for p in paths if p in self._by_path)

    def clean(self, paths: Sequence[str]) -> list[str]:
        """The files of ``paths`` without damage."""
        return [p for p in paths if not self.of(p).damaged]

    def inference(self, paths: Sequence[str], max_records: int) -> tuple[list[str], int]:
        """The files, and records of each, to infer a schema from without meeting damage.

        The files without damage; when every file has some, the one whose first damaged
        record comes latest, up to that record; failing that (every file damaged at its
        first record), all of them, which then raises the damage's error.
        """
        clean = self.clean(paths)
        if clean:
            return clean, max_records
        best = max(paths, key=lambda p: self.of(p).corrupt[0].index)
        first = self.of(best).corrupt[0].index  # the inference reads one record past
        return ([best], min(first - 1, max_records)) if first > 1 else (list(paths), max_records)


def _is_proto(record: bytes) -> bool:
    try:
        example_pb2.Example.FromString(record)
    except (DecodeError, RuntimeWarning, ValueError):
        return False
    return True


class _FileScan:
    """The mutable state of one file's scan; :meth:`done` freezes it."""

    def __init__(self, path: str, compression: str) -> None:
        self.path, self.compression = path, compression
        self.offsets, self.lengths = array("q"), array("q")
        self.corrupt: list[CorruptRecord] = []
        self.skip: list[int] = []
        self.first: bytes | None = None
        self.index = 0
        self.take = -1

    def record(self, data: bytes, offset: int) -> None:
        """A record whose framing is whole, at data offset ``offset``: kept, or no proto."""
        if _is_proto(data):
            self.offsets.append(offset)
            self.lengths.append(len(data))
            if self.first is None:
                self.first = data
            self.index += 1
        else:
            self.skip.append(self.index)
            self.damage("its checksums match but its bytes are not a tf.train.Example")

    def damage(self, reason: str) -> None:
        self.corrupt.append(CorruptRecord(self.path, self.index, reason))
        self.index += 1

    def done(self) -> FileDamage:
        damaged = bool(self.corrupt)
        ranged = damaged and not self.compression
        return FileDamage(
            self.path,
            self.compression,
            records=len(self.offsets),
            corrupt=tuple(self.corrupt),
            first=self.first,
            offsets=np.frombuffer(self.offsets, np.int64) if ranged else None,
            lengths=np.frombuffer(self.lengths, np.int64) if ranged else None,
            take=self.take if damaged else -1,
            skip=tuple(self.skip) if damaged and self.compression else (),
        )


def scan_file(path: str, compression: str) -> FileDamage:
    """Scan one file's records: which are whole, which are damaged (see the module).

    An undamaged file is read once by TensorFlow's C++ record iterator (checksums
    included); from the first damaged record of an uncompressed file on, records are
    read by offset, resynchronizing after a damaged length header.
    """
    scan = _FileScan(path, compression)
    options = tf.io.TFRecordOptions(compression_type=compression)
    consumed = 0
    try:
        for data in tf.compat.v1.io.tf_record_iterator(path, options=options):
            scan.record(data, consumed + _HEADER)
            consumed += len(data) + _HEADER + _FOOTER
    except tf.errors.NotFoundError:
        raise
    except tf.errors.OpError as error:
        if compression:
            scan.take = scan.index
            scan.damage(
                f"the {compression} stream cannot be read on from here ({_first_line(error)}); "
                "the rest of the file is skipped (its records cannot be found), counted as "
                "one damaged record"
            )
            return scan.done()
        _scan_from(scan, consumed)
        return scan.done()
    if not compression:
        size = tf.io.gfile.stat(path).length
        if consumed < size:
            scan.damage(
                f"the file ends inside a record header: {size - consumed} stray byte(s) "
                "at its end (truncated)"
            )
    return scan.done()


def _scan_from(scan: _FileScan, offset: int) -> None:
    """Read the records of an uncompressed file by offset, from a damaged one on."""
    size = tf.io.gfile.stat(scan.path).length
    reader = tf_private.random_record_reader(scan.path)
    with tf.io.gfile.GFile(scan.path, "rb") as handle:
        while offset < size:
            if size - offset < _HEADER:
                scan.damage(f"the file ends inside a record header ({size - offset} byte(s))")
                return
            try:
                data, following = reader.read(offset)
            except IndexError:
                return
            except (tf.errors.OpError, RuntimeError, ValueError) as error:
                offset = _skip_damaged(scan, handle, reader, offset, size, error)
                continue
            scan.record(data, offset + _HEADER)
            offset = following


def _skip_damaged(
    scan: _FileScan, handle: Any, reader: Any, offset: int, size: int, error: BaseException
) -> int:
    """Record the damaged record at ``offset``; the offset of the next one to read."""
    handle.seek(offset)
    header = handle.read(_HEADER)
    (length,) = struct.unpack("<Q", header[:8])
    if masked_crc32c(header[:8]) == struct.unpack("<I", header[8:])[0]:
        end = offset + _HEADER + length + _FOOTER
        if end > size:
            scan.damage(f"truncated: its {length} bytes of data run past the end of the file")
            return size
        scan.damage(f"its data checksum (CRC) does not match ({_first_line(error)})")
        return end
    found = _resync(handle, reader, offset + 1, size)
    skipped = (found if found is not None else size) - offset
    where = "the next whole record" if found is not None else "the end of the file"
    scan.damage(
        f"its length header's checksum (CRC) does not match: {skipped} byte(s) skipped to {where}"
    )
    return size if found is None else found


_RESYNC_BLOCK = 1 << 20


def _resync(handle: Any, reader: Any, start: int, size: int) -> int | None:
    """The first offset from ``start`` where a whole record starts, or ``None``."""
    position = start
    while position + _HEADER <= size:
        handle.seek(position)
        block = np.frombuffer(handle.read(_RESYNC_BLOCK + _HEADER - 1), np.uint8)
        for found in _header_starts(block):
            candidate = position + int(found)
            try:
                reader.read(candidate)
            except (tf.errors.OpError, RuntimeError, ValueError, IndexError):
                continue
            return candidate
        position += _RESYNC_BLOCK
    return None


def _first_line(error: BaseException) -> str:
    text = error.message if isinstance(error, tf.errors.OpError) else str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def scan_damage(files: Sequence[str], compression: str | Sequence[str], limit: int) -> DamageMap:
    """Scan ``files`` for damaged records, allowing ``limit`` in all.

    Each damaged record is logged once, as a warning naming its file and index.

    Args:
        files: The files, in reading order.
        compression: Their compression, or each file's.
        limit: ``max_corrupt_records``: the damaged records a run may skip.

    Returns:
        The :class:`DamageMap`.

    Raises:
        CorruptRecordError: For the (``limit`` + 1)-th damaged record, naming its file
            and index.
    """
    scanned: list[FileDamage] = []
    total = 0
    codecs = [compression] * len(files) if isinstance(compression, str) else list(compression)
    for path, codec in zip(files, codecs, strict=True):
        found = scan_file(path, codec)
        for record in found.corrupt:
            total += 1
            if total > limit:
                raise _too_many(record, codec, limit)
            logger.warning(
                "Skipping damaged record %d of TFRecord file %r (%d of max_corrupt_records=%d): "
                "%s.",
                record.index,
                record.file,
                total,
                limit,
                record.reason,
            )
        scanned.append(found)
    return DamageMap(tuple(scanned), limit)


def _too_many(record: CorruptRecord, compression: str, limit: int) -> CorruptRecordError:
    how = f"{compression} compressed" if compression else "uncompressed"
    return CorruptRecordError(
        f"TFRecord file {record.file!r} ({how}) is damaged at record {record.index}: "
        f"{record.reason}. That is damaged record {limit + 1}, more than "
        f"max_corrupt_records={limit} allows (the others were logged as skipped).",
        file=record.file,
        record=record.index,
    )


class DamagedReads:
    """``tf.data`` datasets of the whole records of files scanned into a :class:`DamageMap`.

    Everything is TensorFlow ops and constant tables (flat arrays: a chunk's byte range
    and the span of its records, a file's span of chunks), so the datasets can be served
    by the tf.data service and rebuilt in graph mode.
    """

    def __init__(self, damage: DamageMap) -> None:
        self.damage = damage
        files = damage.files
        self.compression = tf.constant([f.compression for f in files], tf.string)
        self.streamed = tf.constant([not f.ranged for f in files])
        self.take = tf.constant([f.take for f in files], tf.int64)
        self.skips = any(f.skip for f in files)
        self.skip_spans = _spans([len(f.skip) for f in files])
        self.skip = tf.constant(_joined([np.array(f.skip, np.int64) for f in files]))
        chunks = [_chunks(f) for f in files]
        self.chunk_spans = _spans([len(c[0]) for c in chunks])
        self.starts = tf.constant(_joined([c[0] for c in chunks]))
        self.sizes = tf.constant(_joined([c[1] for c in chunks]))
        self.footers = tf.constant(_joined([c[2] for c in chunks]))
        self.record_spans = _spans([n for c in chunks for n in c[3]])
        self.offsets = tf.constant(_joined([c[4] for c in chunks]))
        self.lengths = tf.constant(_joined([c[5] for c in chunks]))

    def paths(self, files: Sequence[str]) -> tf.data.Dataset:
        """``(path, position)`` of each of ``files``, for :meth:`records`."""
        positions = np.array([self.damage.index(p) for p in files], np.int64)
        return tf.data.Dataset.from_tensor_slices((list(files), positions))

    def records(self, path: Any, position: Any) -> tf.data.Dataset:
        """The whole records of the file at ``position`` of the map (``path``: its name)."""
        names = tf.reshape(path, [1])[: tf.cast(self.streamed[position], tf.int32)]
        streamed = tf.data.TFRecordDataset(names, compression_type=self.compression[position])
        streamed = streamed.take(self.take[position])
        if self.skips:
            skip = self.skip[self.skip_spans[position] : self.skip_spans[position + 1]]
            streamed = (
                streamed.enumerate()
                .filter(lambda n, _: tf.logical_not(tf.reduce_any(tf.equal(n, skip))))
                .map(lambda _, record: record)
            )
        chunks = tf.data.Dataset.range(self.chunk_spans[position], self.chunk_spans[position + 1])

        def chunk_records(chunk: Any) -> tf.data.Dataset:
            blob = tf.data.FixedLengthRecordDataset(
                path,
                self.sizes[chunk],
                header_bytes=self.starts[chunk],
                footer_bytes=self.footers[chunk],
            )
            first, last = self.record_spans[chunk], self.record_spans[chunk + 1]
            offsets, lengths = self.offsets[first:last], self.lengths[first:last]
            return blob.flat_map(
                lambda data: tf.data.Dataset.from_tensor_slices(
                    tf.strings.substr(data, offsets, lengths)
                )
            )

        return streamed.concatenate(chunks.flat_map(chunk_records))

    def all_records(self, files: Sequence[str]) -> tf.data.Dataset:
        """The whole records of ``files``, file after file."""
        return self.paths(files).flat_map(self.records)


def _joined(rows: list[Any]) -> np.ndarray:
    return np.concatenate([np.zeros(0, np.int64), *[np.asarray(r, np.int64) for r in rows]])


def _spans(counts: list[int]) -> tf.Tensor:
    """Where each row's items start in a flat table, and (last) where the last ends."""
    return tf.constant(np.cumsum([0, *counts]), tf.int64)


def _chunks(found: FileDamage) -> tuple[Any, ...]:
    """The byte ranges of a ranged file's runs of whole records, at most CHUNK_BYTES each.

    Returns:
        Each chunk's start, size and footer (bytes after it), its records' count, and
        their offsets (from the chunk's start) and lengths.
    """
    empty = np.zeros(0, np.int64)
    if not found.ranged or not found.records:
        return empty, empty, empty, [], empty, empty
    offsets, lengths = found.offsets, found.lengths
    ends = offsets + lengths
    follows = offsets[1:] == ends[:-1] + _FOOTER + _HEADER  # the next record is adjacent
    starts, sizes, counts = [], [], []
    first = 0
    for i in range(1, len(offsets) + 1):
        if i < len(offsets) and follows[i - 1] and ends[i] - offsets[first] <= CHUNK_BYTES:
            continue
        starts.append(int(offsets[first]))
        sizes.append(int(ends[i - 1] - offsets[first]))
        counts.append(i - first)
        first = i
    chunk_of = np.repeat(np.array(starts, np.int64), counts)
    size = os.path.getsize(found.file) if "://" not in found.file else _size(found.file)
    start = np.array(starts, np.int64)
    footer = size - (start + np.array(sizes, np.int64))
    return start, np.array(sizes, np.int64), footer, counts, offsets - chunk_of, lengths


def _size(path: str) -> int:
    return int(tf.io.gfile.stat(path).length)
