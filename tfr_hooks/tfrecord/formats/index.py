"""A record index: where the records of a TFRecord file start, one offset a block.

A reader that knows where records start can enter a file at a position instead of
reading everything before it: a resume seeks, and an order over the whole data set
(:mod:`tfr_hooks.tfrecord.pipelines.orders.global_order`) reads blocks of
consecutive records in any order.

**What it holds.** For a file of ``count`` records, the byte offset of every
:data:`INDEX_BLOCK`-th record (records ``0, B, 2B, ...``) and the file's end: 8 bytes a
block, about 64 MB for a billion records (one offset and length a record, as the index
files of NVIDIA DALI and the ``tfrecord`` package hold, would be 16 GB). A seek then
reads at most one block before its record. The index is built in one sequential pass
through TensorFlow's own reader (checksums checked), the first time a file is read or
ahead of time with ``tfr-hooks index FILES...``.

**Compressed files** (GZIP, ZLIB) cannot be entered at an offset: their index holds the
record count only (:attr:`RecordIndex.seekable` is ``False``), so positions in them have
file granularity: a read can start at a file's start, and reaching a record inside it
reads the records before it.

**Where it is kept** (:func:`index_locations`): beside the file, as ``FILE.tfrindex``,
when the file's directory is writable; else (or for a remote path such as ``gs://``) in a
cache directory, ``$XDG_CACHE_HOME/tfr_hooks/index`` (``~/.cache/tfr_hooks/index``).
``$TFR_HOOKS_INDEX_DIR``, when set, is the one directory used for every index. An index
found beside a read-only file (built there ahead of time) is used too.

**Keyed** by the file's size, its modification time (``mtime_ns``) and a hash of its
first and last 4 KiB: a file changed in any of these is indexed again.

**Written atomically under a lock**: the builder holds an exclusive ``fcntl`` lock
(on the index's ``.lock`` file), looks again for an index another process finished
meanwhile, and writes to a temporary file in the same directory that ``os.replace``
puts in place. Several workers building the same index at once build it once and never
leave a partial file (tfd-utils shipped exactly that bug).

**A damaged file** (a checksum mismatch, a truncated record) cannot be indexed: the build
raises :class:`~tfr_hooks.tfrecord.CorruptRecordError` naming the file and the record.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import CorruptRecordError

__all__ = [
    "is_index_file",
    "INDEX_BLOCK",
    "INDEX_DIR_ENV",
    "INDEX_SUFFIX",
    "FileKey",
    "RecordIndex",
    "build_index",
    "file_key",
    "index_files",
    "index_locations",
    "index_runs",
    "load_index",
    "read_index_file",
    "record_index",
    "write_index_file",
]

logger = logging.getLogger(__name__)

#: Records a block: the index holds the offset of every ``INDEX_BLOCK``-th record, and
#: the global order reads blocks of this many consecutive records (see
#: :mod:`tfr_hooks.tfrecord.pipelines.orders.global_order` for why 128).
INDEX_BLOCK = 128
#: The suffix of an index file (beside its TFRecord file: ``FILE.tfrindex``).
INDEX_SUFFIX = ".tfrindex"


def is_index_file(path: str) -> bool:
    """Whether ``path`` is a record index kept beside its file (``FILE.tfrindex``) or its lock."""
    return path.endswith((INDEX_SUFFIX, INDEX_SUFFIX + ".lock"))


#: The environment variable naming the one directory that holds every index.
INDEX_DIR_ENV = "TFR_HOOKS_INDEX_DIR"

_MAGIC = b"TFRHIDX1"
_EDGE = 4096  # bytes hashed at each end of a file
_BATCH = 1 << 16  # record lengths fetched from TensorFlow at once (a multiple of blocks)
_FRAME = 16  # a record's framing: length (8), its CRC (4), the data's CRC (4)
_HEADER = 12  # before a record's data: its length and the length's CRC


@dataclass(frozen=True)
class FileKey:
    """What identifies a file's content for its index: a changed file gets a new key.

    Attributes:
        size: Its size in bytes.
        mtime_ns: Its modification time, in nanoseconds.
        edges: A hash (BLAKE2b, hex) of its first and last 4 KiB.
    """

    size: int
    mtime_ns: int
    edges: str


@dataclass(frozen=True, eq=False)
class RecordIndex:
    """Where the records of one file start, one offset a block.

    Attributes:
        file: The file.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        key: The :class:`FileKey` of the file it was built from.
        count: The records in the file.
        block: Records a block.
        bounds: Uncompressed: ``int64`` byte offsets of records ``0, block, 2*block, ...``
            then the end of the last record (``blocks + 1`` values). Compressed: empty.
    """

    file: str
    compression: str
    key: FileKey
    count: int
    block: int = INDEX_BLOCK
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    @property
    def seekable(self) -> bool:
        """Whether a read can enter the file at a block (uncompressed files only)."""
        return not self.compression

    @property
    def blocks(self) -> int:
        """Its blocks (the last one may hold fewer than ``block`` records)."""
        return -(-self.count // self.block)

    def offset(self, record: int) -> tuple[int, int]:
        """Where to enter the file to read ``record``: ``(byte offset, records to skip)``.

        Raises:
            ValueError: The file is compressed, or ``record`` is not one of its records.
        """
        if not self.seekable:
            raise ValueError(
                f"Expected an uncompressed file to enter at a record: {self.compression} "
                "files can only be read from their start. "
                f"Received: file={self.file!r}"
            )
        if not 0 <= record < self.count:
            raise ValueError(
                f"Expected a record of {self.file!r} (0 to {self.count - 1}). "
                f"Received: record={record}"
            )
        return int(self.bounds[record // self.block]), record % self.block

    def same(self, other: RecordIndex) -> bool:
        """Whether ``other`` holds the same content (file, key, count and offsets)."""
        return (
            (self.file, self.compression, self.key, self.count, self.block)
            == (other.file, other.compression, other.key, other.count, other.block)
        ) and np.array_equal(self.bounds, other.bounds)


# -- the key ------------------------------------------------------------------------------


def _is_local(path: str) -> bool:
    return "://" not in path


def file_key(path: str) -> FileKey:
    """The :class:`FileKey` of ``path`` now (local or any ``tf.io.gfile`` path)."""
    if _is_local(path):
        stat = os.stat(path)
        size, mtime_ns = stat.st_size, stat.st_mtime_ns
    else:
        gstat = tf.io.gfile.stat(path)
        size, mtime_ns = int(gstat.length), int(gstat.mtime_nsec)
    digest = hashlib.blake2b(digest_size=16)
    # a local file read unbuffered: GFile reads through a 512 KiB buffer, so that each
    # seek of a resumed pass, which checks the key, would read a megabyte of every file
    local = _is_local(path)
    opened = open(path, "rb", buffering=0) if local else tf.io.gfile.GFile(path, "rb")  # noqa: SIM115
    with opened as handle:
        digest.update(handle.read(_EDGE))
        if size > _EDGE:
            handle.seek(max(_EDGE, size - _EDGE))
            digest.update(handle.read(_EDGE))
    return FileKey(size, mtime_ns, digest.hexdigest())


# -- building ------------------------------------------------------------------------------


def build_index(path: str, compression: str = "", *, block: int = INDEX_BLOCK) -> RecordIndex:
    """Index ``path`` in one sequential pass (no file is written: see :func:`record_index`).

    Args:
        path: A TFRecord file.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        block: Records a block.

    Raises:
        CorruptRecordError: A record of the file is damaged (naming the file and record).
    """
    key = file_key(path)
    starts: list[np.ndarray] = []
    count = end = 0
    try:
        for lengths in _record_lengths(path, compression):
            sizes = lengths.astype(np.int64) + _FRAME
            if not compression:
                firsts = end + np.concatenate(([0], np.cumsum(sizes[:-1])))
                starts.append(firsts[::block])
                end += int(sizes.sum())
            count += len(sizes)
    except tf.errors.OpError as error:
        raise _damaged(path, compression, count, error) from None
    if compression:
        return RecordIndex(path, compression, key, count, block)
    if end != key.size:
        raise CorruptRecordError(
            f"Cannot index {path}: the file ends inside a record ({key.size - end} stray "
            f"byte(s) after record {count - 1}; truncated). Rewrite the file, or read it "
            "with max_corrupt_records to skip the damage.",
            file=path,
            record=count,
        )
    bounds = np.concatenate([*starts, [end]]).astype(np.int64)
    return RecordIndex(path, compression, key, count, block, bounds)


def _record_lengths(path: str, compression: str) -> Iterator[np.ndarray]:
    """The lengths of the records of ``path``, a batch of them at a time.

    Eagerly, TensorFlow's reader is iterated at once; in graph mode (``read_batches``
    building a pipeline), in a graph and session of its own, so that nothing is added
    to the caller's graph.
    """

    def batches() -> tf.data.Dataset:
        # batched, then measured: a traced map would cost more than a small file's read
        records = tf.data.TFRecordDataset([path], compression_type=compression, buffer_size=1 << 20)
        return records.batch(_BATCH)

    if tf.executing_eagerly():
        for batch in batches():
            yield tf.strings.length(batch).numpy()
        return
    with tf.Graph().as_default():
        # a graph-level seed: with op determinism on, a one-shot iterator refuses a graph
        # without one (this graph draws nothing at random)
        tf.compat.v1.set_random_seed(0)
        lengths = tf.strings.length(tf.compat.v1.data.make_one_shot_iterator(batches()).get_next())
        with tf.compat.v1.Session() as session:
            while True:
                try:
                    yield session.run(lengths)
                except tf.errors.OutOfRangeError:
                    return


def _damaged(path: str, compression: str, read: int, error: Exception) -> CorruptRecordError:
    """The error for a file whose records cannot all be read, naming its first bad one."""
    from tfr_hooks.tfrecord.formats.damage import scan_file

    record, reason = read, str(error).strip().splitlines()[0]
    try:
        found = scan_file(path, compression)
        # the scan also counts whole records that are no tf.train.Example: not damage here
        broken = [bad for bad in found.corrupt if "not a tf.train.Example" not in bad.reason]
        if broken:
            record, reason = broken[0].index, broken[0].reason
    except tf.errors.OpError:  # the scan cannot tell more than the read did
        pass
    return CorruptRecordError(
        f"Cannot index {path}: record {record} is damaged ({reason}). Rewrite the file, "
        "or read it with max_corrupt_records to skip the damage.",
        file=path,
        record=record,
    )


# -- the file format ---------------------------------------------------------------------


def write_index_file(index: RecordIndex, target: str) -> None:
    """Write ``index`` to ``target`` atomically (a temporary file, then ``os.replace``)."""
    header = {
        "file": os.path.basename(index.file),
        "compression": index.compression,
        "size": index.key.size,
        "mtime_ns": index.key.mtime_ns,
        "edges": index.key.edges,
        "count": index.count,
        "block": index.block,
        "bounds": len(index.bounds),
    }
    text = json.dumps(header, sort_keys=True).encode()
    directory = os.path.dirname(target) or "."
    handle, temporary = tempfile.mkstemp(prefix=".tfrindex-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(_MAGIC + len(text).to_bytes(4, "little") + text)
            out.write(index.bounds.astype("<i8").tobytes())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_index_file(target: str, path: str) -> RecordIndex:
    """The index of ``path`` stored at ``target``, as stored (its key is not checked here).

    Raises:
        ValueError: ``target`` is not a whole index file (naming it).
    """
    with open(target, "rb") as handle:
        data = handle.read()
    try:
        if data[: len(_MAGIC)] != _MAGIC:
            raise ValueError("no index file header")
        size = int.from_bytes(data[8:12], "little")
        header = json.loads(data[12 : 12 + size])
        bounds = np.frombuffer(data[12 + size :], "<i8").astype(np.int64)
        key = FileKey(int(header["size"]), int(header["mtime_ns"]), str(header["edges"]))
        index = RecordIndex(
            path,
            str(header["compression"]),
            key,
            int(header["count"]),
            int(header["block"]),
            bounds,
        )
        expected = 0 if index.compression else index.blocks + 1
        if len(bounds) != int(header["bounds"]) or len(bounds) != expected:
            raise ValueError(f"{len(bounds)} offsets where {expected} were expected")
        if expected and (np.any(np.diff(bounds) <= 0) or bounds[-1] != key.size):
            raise ValueError("offsets out of order or not ending at the file's end")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"Expected a record index file of {path!r}: {error}. Received: target={target!r}"
        ) from None
    return index


# -- where indexes live -------------------------------------------------------------------


def _cache_directory() -> str:
    chosen = os.environ.get(INDEX_DIR_ENV)
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfr_hooks", "index")


def _cache_name(path: str) -> str:
    full = path if not _is_local(path) else os.path.abspath(path)
    digest = hashlib.sha256(full.encode()).hexdigest()[:24]
    return f"{os.path.basename(path.rstrip('/'))}.{digest}{INDEX_SUFFIX}"


def index_locations(path: str) -> tuple[list[str], str]:
    """Where the index of ``path`` is looked for, and where a new one is written.

    Returns:
        The places looked in, in order, and the place written to (one of them).
    """
    cached = os.path.join(_cache_directory(), _cache_name(path))
    if os.environ.get(INDEX_DIR_ENV) or not _is_local(path):
        return [cached], cached
    beside = path + INDEX_SUFFIX
    writable = os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
    return [beside, cached], beside if writable else cached


def load_index(path: str, compression: str = "") -> RecordIndex | None:
    """The stored index of ``path`` if one matches the file as it is now, else ``None``."""
    places, _ = index_locations(path)
    key = file_key(path)
    for place in places:
        if not os.path.exists(place):
            continue
        try:
            index = read_index_file(place, path)
        except (OSError, ValueError) as error:
            logger.warning("ignoring the record index %s: %s", place, error)
            continue
        if index.key == key and index.compression == compression and index.block == INDEX_BLOCK:
            return index
        logger.info("the record index %s is of another version of %s", place, path)
    return None


@contextmanager
def _locked(target: str) -> Iterator[None]:
    """Hold an exclusive lock on ``target + '.lock'`` (created if missing)."""
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target + ".lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def record_index(path: str, compression: str = "", *, rebuild: bool = False) -> RecordIndex:
    """The index of ``path``: the stored one if it matches the file, else built and stored.

    Building holds the lock of the index (several processes building at once build it
    once); the new index is written atomically where :func:`index_locations` says.

    Args:
        path: A TFRecord file.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        rebuild: Build and store anew even when a matching index is stored.

    Raises:
        CorruptRecordError: The file is damaged (naming it and the record).
    """
    if not rebuild:
        found = load_index(path, compression)
        if found is not None:
            return found
    _, target = index_locations(path)
    with _locked(target):
        found = None if rebuild else load_index(path, compression)
        if found is not None:  # another process built it while this one waited
            return found
        index = build_index(path, compression)
        write_index_file(index, target)
    logger.info("indexed %s: %d records in %d blocks (%s)", path, index.count, index.blocks, target)
    return index


def index_files(
    files: Sequence[str], compression: str | Sequence[str] = "", *, rebuild: bool = False
) -> list[RecordIndex]:
    """:func:`record_index` of each file (``compression``: one for all, or one a file)."""
    kinds = [compression] * len(files) if isinstance(compression, str) else list(compression)
    if len(kinds) != len(files):
        raise ValueError(
            f"Expected one compression a file ({len(files)}). Received: compression={compression!r}"
        )
    return [
        record_index(path, kind, rebuild=rebuild) for path, kind in zip(files, kinds, strict=True)
    ]


def index_runs(
    path: str, offsets: np.ndarray, lengths: np.ndarray, *, block: int = INDEX_BLOCK
) -> list[RecordIndex]:
    """The indexes of the runs of whole records of a damaged uncompressed file.

    A run is a stretch of consecutive whole records with no damage between them; each is
    indexed as a file of its own (one offset a ``block``, then the run's end), so that
    ``shuffle="global"`` reads blocks of whole records only and never enters the damage
    (:class:`~tfr_hooks.tfrecord.pipelines.orders.global_order.GlobalOrder` takes each
    run as a file).

    Args:
        path: The file.
        offsets: The byte offsets of its whole records' data, in file order (the damage
            scan's :attr:`~tfr_hooks.tfrecord.formats.damage.FileDamage.offsets`).
        lengths: Their lengths, in bytes.
        block: Records a block.
    """
    data = np.asarray(offsets, np.int64)
    starts = data - _HEADER
    ends = data + np.asarray(lengths, np.int64) + _FRAME - _HEADER
    breaks = (np.flatnonzero(starts[1:] != ends[:-1]) + 1).tolist()
    key = file_key(path)
    runs = []
    for low, high in zip([0, *breaks], [*breaks, len(starts)], strict=True):
        if high > low:
            bounds = np.concatenate([starts[low:high:block], ends[high - 1 : high]])
            runs.append(RecordIndex(path, "", key, high - low, block, bounds))
    return runs
