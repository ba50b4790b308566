"""ArrayRecord files: recognized, counted, read a batch of records by index, and written.

ArrayRecord (the ``array-record`` package, the format TensorFlow Datasets writes with
``file_format="array_record"`` and Grain reads) is a random-access container: each file
knows its record count, and any set of records is read by index in one call, with the
GIL released. There is no TensorFlow op for it, so a batch of indices becomes a batch
of serialized records in one :func:`tf.numpy_function` call (:func:`read_records`): the
batch, not the record, is the unit of work, and the parse that follows is one
``tf.io.parse_example`` a batch, as for TFRecord files.

The files hold the same serialized ``tf.train.Example`` (or ``SequenceExample``)
records as TFRecord shards. They are recognized by their name (``.array_record`` or
``.arrayrecord`` in it, TFDS's ``{name}-{split}.array_record-00000-of-00001`` included)
or by their content (the Riegeli file signature that starts every ArrayRecord file).

``array-record`` is an optional extra (``pip install tfr_hooks[arrayrecord]``): without
it, reading or writing such a file raises an :class:`ImportError` that names the extra.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent import futures
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import NoFilesError, UnreadableFileError
from tfr_hooks.tfrecord.formats.index import RecordIndex
from tfr_hooks.tfrecord.formats.records import READ_BUFFER, RecordFormat, index_of_offsets

__all__ = [
    "EXTRA",
    "READ_BATCH",
    "SIGNATURE",
    "ArrayRecordFiles",
    "ArrayRecordFormat",
    "is_array_record",
    "iter_array_records",
    "read_records",
    "write_array_record",
]

logger = logging.getLogger(__name__)

#: The extra that installs ``array-record``.
EXTRA = "arrayrecord"
#: The first 8 bytes of every ArrayRecord file: the Riegeli file signature.
SIGNATURE = b"\x83\xafp\xd1\r\x88J?"
_NAME_MARKS = (".array_record", ".arrayrecord")
#: What ``tfds`` and Grain write: one record a chunk, so a record is read alone.
WRITER_OPTIONS = "group_size:1"
#: Records a read of a file from a record reads in one call, at most.
READ_BATCH = 1024
_NO_END = 1 << 62
#: Random access reads only the chunks asked for (as ``ArrayRecordDataSource`` does).
_READER_OPTIONS = "readahead_buffer_size:0"
#: Bytes the file reader buffers (``ArrayRecordDataSource``'s; the reader's default,
#: 1 MiB, makes every random read of a small record read a MiB).
_FILE_BUFFER = 32 << 10
_BUFFER = {"file_reader_buffer_size": _FILE_BUFFER}
#: Files of one batch read at once, in threads (the reads release the GIL).
_FILE_THREADS = 8


def _module() -> Any:
    """``array_record``'s reader and writer module, or an ImportError naming the extra."""
    try:
        from array_record.python import array_record_module
    except ImportError as error:  # pragma: no cover - the extra is installed in the tests
        raise ImportError(
            "Reading or writing ArrayRecord files needs the `array-record` package: "
            f"pip install 'tfr_hooks[{EXTRA}]'. ({error})"
        ) from error
    return array_record_module


def is_array_record(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an ArrayRecord file, by its name or its first bytes."""
    name = os.path.basename(os.fspath(path)).lower()
    if any(mark in name for mark in _NAME_MARKS):
        return True
    try:
        with tf.io.gfile.GFile(os.fspath(path), "rb") as f:
            return bytes(f.read(len(SIGNATURE))) == SIGNATURE
    except (OSError, tf.errors.OpError):
        return False


class ArrayRecordFiles:
    """Several ArrayRecord files read as one sequence of records, by global index.

    Record ``i`` of the sequence is record ``i - start`` of the file whose range holds
    it, the files in the order given. A batch of indices is split among the files with
    one vectorized search and read with one ``read`` call a file; several files are read
    in parallel threads (the reads release the GIL). Readers are opened at the first
    read, in the process that reads (so the object can be handed to a ``tf.data``
    function and pickled).

    Args:
        paths: The files, in order.

    Raises:
        NoFilesError: If ``paths`` is empty.
        UnreadableFileError: If a file cannot be opened as an ArrayRecord file.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise NoFilesError("Expected at least one ArrayRecord file. Received: paths=[]")
        module = _module()
        counts = []
        for path in self.paths:
            try:
                reader = module.ArrayRecordReader(path, _READER_OPTIONS, **_BUFFER)
            except Exception as error:  # the module raises plain RuntimeErrors/ValueErrors
                raise UnreadableFileError(
                    f"Cannot open {path!r} as an ArrayRecord file: {error}", file=path
                ) from error
            counts.append(int(reader.num_records()))
            reader.close()
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._readers: list[Any] = [None] * len(self.paths)
        self._lock = threading.Lock()
        self._pool: futures.ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_readers"] = [None] * len(self.paths)
        state["_lock"] = None
        state["_pool"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _reader(self, file: int) -> Any:
        reader = self._readers[file]
        if reader is None:
            with self._lock:
                reader = self._readers[file]
                if reader is None:
                    reader = _module().ArrayRecordReader(
                        self.paths[file], _READER_OPTIONS, **_BUFFER
                    )
                    self._readers[file] = reader
        return reader

    def read(self, indices: Iterable[int] | np.ndarray) -> np.ndarray:
        """The serialized records at global ``indices``, in that order.

        Args:
            indices: Global record indices, each in ``[0, len(self))``.

        Returns:
            A 1-D object array of ``bytes``.

        Raises:
            IndexError: If an index is out of range (naming it and the range).
        """
        keys = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = np.empty(keys.shape[0], dtype=object)
        if keys.size == 0:
            return out
        low, high = int(keys.min()), int(keys.max())
        if low < 0 or high >= len(self):
            bad = low if low < 0 else high
            raise IndexError(
                f"Expected record indices in [0, {len(self)}) of the ArrayRecord files "
                f"{self.paths}. Received: index={bad}"
            )
        files = np.searchsorted(self.starts, keys, side="right") - 1
        return self._read_grouped(files, keys - self.starts[files], out)

    def read_at(self, files: np.ndarray, records: np.ndarray) -> np.ndarray:
        """The serialized records ``records[k]`` of file ``files[k]``, in that order.

        Args:
            files: Places in :attr:`paths` (an integer vector).
            records: Record numbers in those files (an integer vector of the same length).

        Returns:
            A 1-D object array of ``bytes``.

        Raises:
            IndexError: If a file or a record number is out of range (naming it).
        """
        which = np.asarray(files, dtype=np.int64).reshape(-1)
        local = np.asarray(records, dtype=np.int64).reshape(-1)
        out = np.empty(which.shape[0], dtype=object)
        if which.size == 0:
            return out
        counts = np.diff(self.starts)
        bad = (which < 0) | (which >= len(self.paths))
        if not bad.any():
            bad = (local < 0) | (local >= counts[which])
        if bad.any():
            k = int(np.argmax(bad))
            raise IndexError(
                f"Expected record numbers within the ArrayRecord files {self.paths} "
                f"(records {self.counts}). Received: file={int(which[k])}, "
                f"record={int(local[k])}"
            )
        return self._read_grouped(which, local, out)

    def _read_grouped(self, files: np.ndarray, local: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Fill ``out`` with record ``local[k]`` of file ``files[k]``: one read a file."""
        groups = [int(f) for f in np.unique(files)]

        def one(file: int) -> None:
            where = np.nonzero(files == file)[0]
            out[where] = self._reader(file).read(local[where].tolist())

        if len(groups) == 1 or _FILE_THREADS < 2:
            for group in groups:
                one(group)
        else:
            if self._pool is None:
                self._pool = futures.ThreadPoolExecutor(min(_FILE_THREADS, len(self.paths)))
            list(self._pool.map(one, groups))
        return out

    def close(self) -> None:
        """Close the open readers and the thread pool."""
        for reader in self._readers:
            if reader is not None:
                reader.close()
        self._readers = [None] * len(self.paths)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def read_records(files: ArrayRecordFiles, indices: Any) -> tf.Tensor:
    """A ``tf.string`` vector of the records at ``indices``: one Python call a batch.

    Args:
        files: The files to read.
        indices: An ``int64`` vector tensor of global record indices.

    Returns:
        The serialized records, in the order of ``indices``.
    """
    records = tf.numpy_function(files.read, [indices], tf.string, stateful=False)
    records.set_shape([None])
    return records


def write_array_record(
    path: str | os.PathLike[str], records: Iterable[bytes], *, options: str = WRITER_OPTIONS
) -> int:
    """Write serialized records to one ArrayRecord file (``group_size:1`` by default).

    Args:
        path: The file to write (replaced if it exists).
        records: The serialized records, in order.
        options: ``ArrayRecordWriter`` options; the default writes one record a chunk,
            as TensorFlow Datasets does, so any record is read alone.

    Returns:
        The number of records written.
    """
    writer = _module().ArrayRecordWriter(os.fspath(path), options)
    count = 0
    try:
        for record in records:
            writer.write(record)
            count += 1
    finally:
        writer.close()
    return count


def iter_array_records(path: str | os.PathLike[str], *, batch_size: int = 1024) -> Iterator[bytes]:
    """The records of one ArrayRecord file, in order, read ``batch_size`` at a time.

    What :func:`~tfr_hooks.tfrecord.formats.framing.iter_records` is for a TFRecord file
    (inspection reads every record through one of the two).

    Args:
        path: The file.
        batch_size: Records read in one call.

    Raises:
        ImportError: Without the ``array-record`` package (the message names the extra).
        UnreadableFileError: If the file cannot be opened as an ArrayRecord file.
    """
    files = ArrayRecordFiles([path])
    try:
        for start in range(0, len(files), batch_size):
            yield from files.read(np.arange(start, min(start + batch_size, len(files))))
    finally:
        files.close()


def _stamp(name: str) -> tuple[str, int, int]:
    """``name`` with its modification time and size: a file rewritten in place is new."""
    if "://" in name:
        stat = tf.io.gfile.stat(name)
        return name, stat.mtime_nsec, stat.length
    local = os.stat(name)  # a local file: the cheaper system call
    return name, local.st_mtime_ns, local.st_size


class _Readers:
    """One open reader a file in this process, shared by the ``tf.data`` reads (thread-safe)."""

    def __init__(self) -> None:
        self._files: dict[tuple[tuple[str, int, int], ...], ArrayRecordFiles] = {}
        self._lock = threading.Lock()
        self._reading = 0  # reads in flight
        self._ending = False  # the interpreter ends: no new read starts

    def of(self, *paths: str | bytes) -> ArrayRecordFiles:
        """The open reader of ``paths``, in order (opened again when a file changed)."""
        names = [p.decode() if isinstance(p, bytes) else str(p) for p in paths]
        key = tuple(_stamp(name) for name in names)
        files = self._files.get(key)
        if files is None:
            with self._lock:
                files = self._files.get(key)
                if files is None:
                    files = ArrayRecordFiles(names)
                    self._files[key] = files
        return files

    def count(self, path: str | bytes) -> np.int64:
        return np.int64(len(self.of(path)))

    def read(self, path: str | bytes, start: np.int64, stop: np.int64) -> np.ndarray:
        """Records ``start`` to ``stop`` of ``path`` (fewer at its end: none past it)."""
        with self._reads() as going:
            if not going:
                return np.empty(0, dtype=object)
            files = self.of(path)
            return files.read(np.arange(int(start), min(int(stop), len(files)), dtype=np.int64))

    def read_at(self, paths: Sequence[str], files: np.ndarray, records: np.ndarray) -> np.ndarray:
        """Record ``records[k]`` of ``paths[files[k]]``, for each ``k``: one batch read."""
        with self._reads() as going:
            if not going:
                return np.empty(0, dtype=object)
            return self.of(*paths).read_at(files, records)

    @contextlib.contextmanager
    def _reads(self) -> Iterator[bool]:
        """A read in flight (``False``: the interpreter ends, read nothing)."""
        with self._lock:
            going = not self._ending
            self._reading += going
        if not going:
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                self._reading -= 1

    def end(self, timeout: float = 10.0) -> None:
        """At the interpreter's end: wait for the reads in flight, then close the readers.

        A ``tf.data`` thread still inside ``array_record`` when the interpreter finalizes
        aborts the process when it takes the GIL back (``terminate called``), so reads in
        flight finish first and no new one starts.
        """
        with self._lock:
            self._ending = True
        deadline = time.monotonic() + timeout
        while self._reading and time.monotonic() < deadline:
            time.sleep(0.005)
        self.forget()

    def forget(self) -> None:
        """Close every reader (files rewritten in place are opened again)."""
        with self._lock:
            for files in self._files.values():
                files.close()
            self._files.clear()


#: The readers of this process's ``tf.data`` reads.
READERS = _Readers()
# closed before the interpreter ends: a reader left to the process's end aborts it
atexit.register(READERS.end)


class ArrayRecordFormat(RecordFormat):
    """ArrayRecord files, through the record seam: read by index, a batch a call.

    A file's records are numbered, so its "offsets" are record numbers: its index
    (:meth:`index`) is built from its record count alone, with nothing read or kept,
    :meth:`records_from` starts at any record, and :meth:`records_at` reads any records
    of several files in one call (:attr:`by_index`). So a resumed unshuffled pass
    enters each file at its record itself, and the global order reads a window's records
    in its order, a piece of them a call by number
    (:mod:`~tfr_hooks.tfrecord.pipelines.orders.index_reads`): neither reads a record
    before its position. Each call reads a batch of records by index through one
    :func:`tf.numpy_function` (the batch, not the record, is the unit of work).

    No ``tf.compat.v1`` queue reads it, and no tf.data service worker can run the
    Python read; its chunks are checked by ``array_record`` itself, so there is no
    damage scan (``max_corrupt_records`` is refused).
    """

    name = "ArrayRecord"
    key = "array_record"
    servable = False
    by_index = True

    @classmethod
    def recognizes(cls, path: str) -> bool:
        """By its name (``.array_record`` in it) or its first bytes (the signature)."""
        return bool(path) and is_array_record(path)

    def check(self, path: str, compression: str) -> None:
        """The file opens as an ArrayRecord file (else :class:`UnreadableFileError`)."""
        del compression
        ArrayRecordFiles([path]).close()

    def iter_records(self, path: str, compression: str) -> Iterator[bytes]:
        """The records in file order, read :data:`READ_BATCH` at a time."""
        del compression
        return iter_array_records(path, batch_size=READ_BATCH)

    def count(self, path: str, compression: str) -> int:
        """The file's record count (written in its footer: nothing is read)."""
        del compression
        return int(READERS.count(path))

    def records(self, path: Any, compression: str) -> tf.data.Dataset:
        """The file's records, from the first, :data:`READ_BATCH` a call."""
        del compression
        return self.records_from(path, 0, READ_BATCH)

    def seekable(self, compression: str) -> bool:
        """Always: any record is read by its number."""
        del compression
        return True

    def index(self, path: str, compression: str) -> RecordIndex:
        """The index of the record numbers ``0 .. n`` (nothing built, nothing kept)."""
        del compression
        count = int(READERS.count(path))
        return index_of_offsets(path, np.arange(count, dtype=np.int64), count)

    def records_from(self, path: Any, offset: Any, buffer_size: Any = READ_BUFFER) -> Any:
        """The records from record number ``offset`` on, in batches read by index.

        ``buffer_size`` (for this format, records) sets the batch a call reads, at most
        :data:`READ_BATCH`: a global order's block of 128 records is one call.
        """
        batch = tf.clip_by_value(tf.cast(buffer_size, tf.int64), 1, READ_BATCH)
        start = tf.cast(offset, tf.int64)

        def read(at: Any) -> Any:
            records = tf.numpy_function(
                READERS.read, [path, at, at + batch], tf.string, stateful=False
            )
            records.set_shape([None])
            return records

        # batches until one comes back empty (past the file's end): no count asked, so a
        # block read (``take(n)`` of its first batch) is one call
        starts = tf.data.Dataset.range(start, _NO_END, batch)
        batches = starts.map(read).take_while(lambda records: tf.size(records) > 0)
        return batches.unbatch()

    def records_at(self, paths: Sequence[str], files: Any, offsets: Any) -> tf.Tensor:
        """The records at record numbers ``offsets`` of files ``files``: one call.

        One :func:`tf.numpy_function` reads the batch (each file's part in one
        ``ArrayRecordReader.read``, the files in parallel threads, the GIL released).
        """
        names = tuple(paths)

        def read(which: np.ndarray, records: np.ndarray) -> np.ndarray:
            return READERS.read_at(names, which, records)

        records = tf.numpy_function(read, [files, offsets], tf.string, stateful=False)
        records.set_shape([None])
        return records

    def scan(self, files: Sequence[str], compression: str, limit: int) -> Any:
        """Refused: ``array_record`` checks its own chunks, there is no damage to skip."""
        del compression
        raise ValueError(
            "Expected max_corrupt_records=0 with ArrayRecord files: array_record checks "
            "its own chunks, and a damaged one fails the read, so no record is skipped "
            f"(first file: {files[0] if files else None!r}). Received: "
            f"max_corrupt_records={limit}"
        )
