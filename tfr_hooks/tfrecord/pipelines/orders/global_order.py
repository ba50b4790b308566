"""The global order: every record once an epoch, mixed over the whole data set.

``shuffle="global"`` reads the records of uncompressed files in an order drawn per epoch
from ``(seed, epoch)``. It needs no buffer of the size of the data: a record index
(:mod:`tfr_hooks.tfrecord.formats.index`) tells where every block of
:data:`~tfr_hooks.tfrecord.formats.index.INDEX_BLOCK` (128) consecutive records starts, and:

1. **Blocks in a stateless permutation.** The full blocks of all files are numbered
   ``0 .. n-1`` and put in the order ``tf.random.experimental.index_shuffle`` draws from
   ``(seed, epoch)``: the block at a position is computed, never a whole permutation
   held. A block is read with one seek (its format's
   :meth:`~tfr_hooks.tfrecord.formats.records.RecordFormat.records_from`), its
   records in file order.
2. **Windows of blocks.** Consecutive positions of that order are grouped in windows of
   ``window // 128`` blocks; a window's records are read (several blocks at once), put
   in an order drawn from ``(seed, epoch, window)``, and handed out. Memory holds about
   two windows, whatever the size of the data.
3. **The short blocks.** Each file's last ``count % 128`` records (a short block) are
   dealt to the windows in turn (short block ``s`` of a worker to its window
   ``s % windows``): every window holds a known number of records, the same every
   epoch, so a position in the epoch maps to ``(window, offset)`` by arithmetic
   (:meth:`GlobalOrder.locate`). A read that starts at a position reads its window
   again and nothing before it.
   A format read by index (ArrayRecord) reads a window's records in its order, a
   piece at a time, by record number instead
   (:mod:`~tfr_hooks.tfrecord.pipelines.orders.index_reads`): nothing before the
   position, and the first batch after one read.
4. **Workers.** With ``shard=(i, n)`` worker ``i`` takes the positions ``i, i+n, ...`` of
   the epoch's block order and the short blocks ``i, i+n, ...``: the shares are disjoint
   and together cover the data. Shares differ by at most one block and one short block
   a window; :meth:`GlobalOrder.shard_sizes` gives each worker's records. A share
   depends on ``n``, so the readers use shares only in a graph-mode cluster; under
   ``MultiWorkerMirroredStrategy`` every worker reads ``shard=(0, 1)``, one sequence
   for any worker count, and keeps its part of each global batch (split by data).

**Why 128 and 256.** A batch holds the classes of the blocks in its window. On data
written in class order (each block one class), with ``k`` blocks a window the class
histogram of a window strays from uniform by a total-variation distance of about
``10 * 0.8 * sqrt(0.0475 / k)`` for 20 classes (0.11 at ``k=256``), to which a batch of
256 adds the 0.11 of sampling: about 0.16 in all, under the 0.25 asked of a batch,
where a streamed ``shuffle=10_000`` gives 0.80. Blocks of 128 records keep the
per-block work (a seek, a dataset) at under a microsecond a record, and windows of
``DEFAULT_WINDOW = 32_768`` records hold 256 blocks. For large records, pass a smaller
``window`` (memory is about two windows of records): mixing falls slowly with fewer
blocks (``k=128``: about 0.19).

Compressed files cannot be entered at a block, so the global order refuses them
(:class:`GlobalOrder` raises, naming the file): decompress them, or read them with
``shuffle=N``, a buffer.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from tfr_hooks.task import TaskInfo, current_task
from tfr_hooks.tfrecord.formats.index import RecordIndex
from tfr_hooks.tfrecord.formats.packed import unpack
from tfr_hooks.tfrecord.formats.reading import format_of
from tfr_hooks.tfrecord.formats.records import RecordFormat
from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.packed_batches import window_salt
from tfr_hooks.tfrecord.pipelines.sharding import SHARED_SEED
from tfr_hooks.tfrecord.pipelines.splits import file_indexes

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
    from tfr_hooks.tfrecord.pipelines.plan import Plan
    from tfr_hooks.tfrecord.pipelines.position import ReadPosition

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_WINDOW",
    "READ_PIECE",
    "GlobalOrder",
    "GlobalShuffleOrder",
    "global_windows",
    "worker_index",
]

#: Records a window holds by default (256 blocks of 128).
DEFAULT_WINDOW = 32_768
_UNIT_READS = 8  # blocks of a window read at once
#: Records a call reads, of a format read by index (:meth:`GlobalOrder.pieces_of`): a
#: call's fixed cost (the Python call, the reader's threads) is paid once for 2,048
#: random reads; measured against 256 and 1,024, it reads about 2x and 1.15x as fast.
READ_PIECE = 2048


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"Expected `{name}` to be an integer >= {low}. Received: {name}={value!r}")
    return int(value)


class GlobalOrder:
    """The epoch orders of ``shuffle="global"`` over indexed files, for one worker.

    Args:
        indexes: The record index of each file (uncompressed), in a fixed file order.
        seed: The seed of every epoch's order.
        window: Records a window (rounded down to whole blocks, at least one block).
        shard: ``(i, n)``: this worker is ``i`` of ``n``.
        reading: The files' format (``None``: recognized from the first file), which
            reads a block from its offset.

    Raises:
        ValueError: A file is compressed, the indexes disagree on the block, or an
            argument is out of range.

    Examples:
        >>> order = GlobalOrder(index_files(files), seed=3)  # doctest: +SKIP
        >>> records = order.records(epoch=0)                   # doctest: +SKIP
    """

    def __init__(
        self,
        indexes: Sequence[RecordIndex],
        *,
        seed: int,
        window: int = DEFAULT_WINDOW,
        shard: tuple[int, int] = (0, 1),
        reading: RecordFormat | None = None,
    ) -> None:
        self.seed = _check_int("seed", seed, -(1 << 63))
        window = _check_int("window", window, 1)
        if not (isinstance(shard, tuple) and len(shard) == 2):
            raise ValueError(f"Expected `shard` to be a pair (i, n). Received: shard={shard!r}")
        count = _check_int("shard[1]", shard[1], 1)
        worker = _check_int("shard[0]", shard[0], 0)
        if worker >= count:
            raise ValueError(f"Expected shard (i, n) with 0 <= i < n. Received: shard={shard!r}")
        self.indexes = list(indexes)
        first = self.indexes[0].file if self.indexes else ""
        self.reading = format_of(first) if reading is None else reading
        for index in self.indexes:
            if not index.seekable:
                raise ValueError(
                    "Expected uncompressed TFRecord files for shuffle='global' (a "
                    f"{index.compression} file cannot be entered at a block): decompress "
                    "it, or read it with shuffle=N, a buffer. "
                    f"Received: file={index.file!r}"
                )
        blocks = {index.block for index in self.indexes}
        if len(blocks) > 1:
            raise ValueError(f"Expected indexes of one block size. Received: blocks={blocks}")
        self.block = blocks.pop() if blocks else 1
        self.shard = (worker, count)
        self.units = max(1, window // self.block)
        self.window = self.units * self.block
        self._plan()

    def _plan(self) -> None:
        """The static plan: blocks per file, the short blocks, and the window sizes."""
        block, (worker, count) = self.block, self.shard
        counts = np.array([index.count for index in self.indexes], np.int64)
        self._counts = counts
        full = counts // block
        self._cum_full = np.concatenate(([0], np.cumsum(full))).astype(np.int64)
        self._full = int(self._cum_full[-1])
        sizes = [len(index.bounds) for index in self.indexes]
        self._base = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self._bounds = (
            np.concatenate([index.bounds for index in self.indexes]).astype(np.int64)
            if self.indexes
            else np.zeros(1, np.int64)
        )
        tails = [f for f in range(len(counts)) if counts[f] % block][worker::count]
        mine = max(0, -(-(self._full - worker) // count))  # full blocks of this worker
        windows = -(-mine // self.units) or (1 if tails else 0)
        self._mine = mine
        window_of = [s % windows for s in range(len(tails))] if windows else []
        order = sorted(range(len(tails)), key=lambda s: window_of[s])  # stable: by window
        rows = []
        for s in order:
            f = tails[s]
            start = int(self._bounds[self._base[f] + full[f]])
            end = int(self._bounds[self._base[f] + full[f] + 1])
            rows.append((f, start, int(counts[f] % block), end - start))
        self._tails = np.array(rows, np.int64).reshape(-1, 4)
        per_window = np.bincount(np.array(window_of, np.int64), minlength=windows)
        self._tail_splits = np.concatenate(([0], np.cumsum(per_window))).astype(np.int64)
        tail_records = np.bincount(
            np.array(window_of, np.int64),
            weights=np.array([counts[f] % block for f in tails], np.float64),
            minlength=windows,
        ).astype(np.int64)
        full_blocks = np.clip(mine - np.arange(windows) * self.units, 0, self.units)
        self.sizes = (full_blocks * block + tail_records).astype(np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int64)

    # -- arithmetic --------------------------------------------------------------------

    @property
    def windows(self) -> int:
        """This worker's windows an epoch."""
        return len(self.sizes)

    @property
    def total(self) -> int:
        """This worker's records an epoch."""
        return int(self.starts[-1])

    def shard_sizes(self) -> list[int]:
        """Every worker's records an epoch (``shard`` ``(0, n) .. (n-1, n)``)."""
        n = self.shard[1]
        return [
            GlobalOrder(
                self.indexes, seed=self.seed, window=self.window, shard=(i, n), reading=self.reading
            ).total
            for i in range(n)
        ]

    def locate(self, position: int) -> tuple[int, int]:
        """``(window, offset in it)`` of ``position`` (0 to :attr:`total`) in an epoch.

        :attr:`total` itself maps to ``(windows, 0)``: nothing left to read.
        """
        position = _check_int("position", position, 0)
        if position > self.total:
            raise ValueError(
                f"Expected a position of the epoch (0 to {self.total}). "
                f"Received: position={position}"
            )
        window = int(np.searchsorted(self.starts, position, side="right")) - 1
        window = min(window, self.windows)
        return window, position - int(self.starts[window])

    def locate_tensor(self, position: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """:meth:`locate` of an ``int64`` scalar tensor (a position read when a pass starts).

        A position past :attr:`total` is taken as :attr:`total` (nothing left to read).
        """
        position = tf.clip_by_value(tf.cast(position, tf.int64), 0, self.total)
        starts = tf.constant(self.starts, tf.int64)
        window = tf.searchsorted(starts, position[None], side="right", out_type=tf.int64)[0] - 1
        window = tf.minimum(window, self.windows)
        return window, position - tf.gather(starts, window)

    def window_examples(self, epoch: Any, per_record: int, examples: Sequence[int]) -> tf.Tensor:
        """Examples in each of this worker's windows of ``epoch``, records packing several.

        Each record holds ``per_record`` examples but a file's last, which holds what is
        left of the file's ``examples`` (packed shards). A short last record in a full
        block lands in a window the epoch's block order picks, so the sizes are computed
        for ``epoch`` (an ``int64`` vector; a pass over this worker's full blocks).
        """
        block, (worker, count) = self.block, self.shard
        short = np.maximum(self._counts * per_record - np.asarray(examples, np.int64), 0)
        rows = np.repeat(np.arange(self.windows), np.diff(self._tail_splits))
        tail_short = np.bincount(
            rows, weights=short[self._tails[:, 0]].astype(np.float64), minlength=self.windows
        ).astype(np.int64)
        sizes = tf.constant(self.sizes * per_record - tail_short, tf.int64)
        full_short = np.where(self._counts % block == 0, short, 0).astype(np.int64)
        if not self._mine or not full_short.any():
            return sizes
        at = tf.range(self._mine, dtype=tf.int64)
        blocks = tf.random.experimental.index_shuffle(
            at * count + worker, self._key(epoch, 0), tf.constant(self._full - 1, tf.int64)
        )
        files = tf.searchsorted(self._cum_full[1:], blocks, side="right", out_type=tf.int64)
        last = tf.equal(blocks, tf.gather(self._cum_full, files + 1) - 1)
        lost = tf.where(last, tf.gather(full_short, files), tf.zeros_like(blocks))
        return sizes - tf.math.unsorted_segment_sum(lost, at // self.units, self.windows)

    def locate_examples(
        self, epoch: Any, position: Any, per_record: int, examples: Sequence[int]
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``(window, examples into it)`` of example ``position`` of ``epoch`` (packed).

        The examples are counted as :meth:`window_examples` does; a position past the
        epoch's examples is taken as its end (``(windows, 0)``: nothing left to read).
        """
        sizes = self.window_examples(epoch, per_record, examples)
        starts = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(sizes)], 0)
        position = tf.clip_by_value(tf.cast(position, tf.int64), 0, starts[-1])
        window = tf.searchsorted(starts, position[None], side="right", out_type=tf.int64)[0] - 1
        window = tf.minimum(window, self.windows)
        return window, position - tf.gather(starts, window)

    def window_start(self, window: Any) -> tf.Tensor:
        """The position (in records) where window ``window`` starts (an ``int64`` tensor)."""
        return tf.gather(tf.constant(self.starts, tf.int64), window)

    # -- in TensorFlow ----------------------------------------------------------------

    def _key(self, epoch: Any, stream: Any) -> tf.Tensor:
        base = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(epoch, tf.int64)])
        return tf.random.experimental.stateless_fold_in(base, tf.cast(stream, tf.int64))

    def plan(self, window: Any, epoch: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """The blocks that window ``window`` of ``epoch`` reads.

        Returns:
            Their file numbers, byte offsets, records and bytes, as ``int64`` vectors
            (tensors; eager or in a graph).
        """
        worker, count = self.shard
        window = tf.cast(window, tf.int64)
        first = window * self.units
        full = tf.clip_by_value(self._mine - first, 0, self.units)
        positions = (first + tf.range(full, dtype=tf.int64)) * count + worker
        if self._full:
            blocks = tf.random.experimental.index_shuffle(
                positions, self._key(epoch, 0), tf.constant(self._full - 1, tf.int64)
            )
        else:
            blocks = positions
        files = tf.searchsorted(self._cum_full[1:], blocks, side="right", out_type=tf.int64)
        at = tf.gather(self._base, files) + blocks - tf.gather(self._cum_full, files)
        offsets = tf.gather(self._bounds, at)
        nbytes = tf.gather(self._bounds, at + 1) - offsets
        row = tf.gather(self._tail_splits, window), tf.gather(self._tail_splits, window + 1)
        tail = tf.constant(self._tails, tf.int64)[row[0] : row[1]]
        return (
            tf.concat([files, tail[:, 0]], 0),
            tf.concat([offsets, tail[:, 1]], 0),
            tf.concat([tf.fill([full], tf.constant(self.block, tf.int64)), tail[:, 2]], 0),
            tf.concat([nbytes, tail[:, 3]], 0),
        )

    def _units(self, window: Any, epoch: Any) -> tf.data.Dataset:
        """The blocks of window ``window`` of ``epoch``: ``(path, offset, records, bytes)``."""
        files, offsets, counts, nbytes = self.plan(window, epoch)
        names = tf.constant([index.file for index in self.indexes] or [""], tf.string)
        return tf.data.Dataset.from_tensor_slices(
            (tf.gather(names, files), offsets, counts, nbytes)
        )

    def window_order(self, window: Any, epoch: Any, size: Any, begin: Any = 0) -> tf.Tensor:
        """Window ``window``'s order for ``epoch``: places in its ``size`` records, from ``begin``.

        (An ``int64`` vector.)
        """
        worker, count = self.shard
        key = self._key(epoch, 1 + tf.cast(window, tf.int64) * count + worker)
        order = tf.random.experimental.index_shuffle(
            tf.range(size, dtype=tf.int64), key, tf.maximum(size - 1, 0)
        )
        return order[begin:]

    def _mix(self, window: Any, epoch: Any, records: tf.Tensor, begin: Any) -> tf.Tensor:
        """The records of a window, in the window's order for ``epoch``, from ``begin``."""
        size = tf.shape(records, out_type=tf.int64)[0]
        return tf.gather(records, self.window_order(window, epoch, size, begin))

    def entry(self, start: Any) -> tuple[tf.Tensor, tf.Tensor] | None:
        """``(window, offset in it)`` of ``start`` as tensors; ``None`` past the epoch."""
        if not isinstance(start, (int, np.integer)):
            return self.locate_tensor(start)
        window, begin = self.locate(int(start))
        if window >= self.windows:
            return None
        return tf.constant(window, tf.int64), tf.constant(begin, tf.int64)

    def pieces_of(
        self, epoch: Any = 0, *, start: Any = 0, piece: int = READ_PIECE
    ) -> tf.data.Dataset:
        """This worker's records of ``epoch`` from position ``start``, as vectors.

        The records and order of :meth:`windows_of`. For a format read by index, each
        vector is ``piece`` records read by their numbers in one call, several calls
        ahead (:mod:`~tfr_hooks.tfrecord.pipelines.orders.index_reads`): the first batch
        comes after one read, and nothing before ``start`` is read. Other formats give
        whole windows (:meth:`windows_of`).
        """
        piece = _check_int("piece", piece, 1)
        if not self.reading.by_index:
            return self.windows_of(epoch, start=start)
        from tfr_hooks.tfrecord.pipelines.orders import index_reads

        return index_reads.read_pieces(
            self, index_reads.window_entries(self, epoch, start), piece=piece
        )

    def windows_of(self, epoch: Any = 0, *, start: Any = 0) -> tf.data.Dataset:
        """This worker's windows of ``epoch`` from position ``start``: one vector each.

        Each element holds a window's records (serialized) in their order; the first
        starts at ``start``'s offset in its window. The blocks are read in order, each
        with one seek, and cut into windows by their known sizes. ``start`` may be an
        ``int64`` scalar tensor (read when the pass starts: a resumed pass's position).
        """
        entry = self.entry(start)
        if entry is None:
            return tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))
        window, begin = entry
        windows = tf.data.Dataset.range(window, self.windows)
        units = windows.flat_map(lambda w: self._units(w, epoch))
        # a block is one element: its records batched inside its own reader, so the
        # interleave and the cut into windows handle a vector a block, not a record
        reading = self.reading
        read = lambda path, offset, n, size: (  # noqa: E731
            reading.records_from(path, offset, size).take(n).batch(n)
        )
        if _UNIT_READS > 1:
            blocks = units.interleave(
                read,
                cycle_length=_UNIT_READS,
                num_parallel_calls=_UNIT_READS,
                deterministic=True,
            )
        else:
            blocks = units.flat_map(read)
        # one size more than the windows: never an empty vector, and never reached
        sizes = tf.constant(np.append(self.sizes, 1), tf.int64)[window:]
        vectors = blocks.rebatch(sizes)
        mixed = tf.data.Dataset.zip((windows, vectors)).map(
            lambda w, v: self._mix(w, epoch, v, tf.where(tf.equal(w, window), begin, 0))
        )
        return mixed.prefetch(1)

    def records(self, epoch: Any = 0, *, start: Any = 0) -> tf.data.Dataset:
        """This worker's records (serialized) for epoch ``epoch``, from position ``start``.

        Args:
            epoch: The epoch (an integer, or an ``int64`` scalar tensor).
            start: The position in the epoch to start at (records this worker already
                read this epoch; an integer or an ``int64`` scalar tensor): its window
                is read again, nothing before it (for a format read by index, the
                window's records from ``start`` on only).
        """
        return self.pieces_of(epoch, start=start).unbatch()

    def batches(
        self, batch_size: int, epoch: Any = 0, *, start: int = 0, drop_remainder: bool = False
    ) -> tf.data.Dataset:
        """:meth:`records` in batches of ``batch_size`` (vectors of serialized records).

        Cut from the windows' vectors without a pass a record (``Dataset.rebatch``), so
        faster than ``records(...).batch(batch_size)``; the same batches.
        """
        batch_size = _check_int("batch_size", batch_size, 1)
        return self.pieces_of(epoch, start=start).rebatch(batch_size, drop_remainder=drop_remainder)


def global_windows(
    plan: Plan,
    options: ReadOptions,
    *,
    window: int = DEFAULT_WINDOW,
    position: ReadPosition | None = None,
) -> tf.data.Dataset:
    """Serialized records in the global order (``shuffle="global"``): vectors.

    Whole windows, or for a format read by index (ArrayRecord) pieces of a window's
    order read by record number, at least :data:`READ_PIECE` records and a batch each
    (:meth:`GlobalOrder.pieces_of`).

    Every new iterator (in graph mode, every initialization of one) reads the next
    ``num_epochs`` epochs of :class:`GlobalOrder`: eagerly, a
    counter of the iterators made (a variable the dataset increments when an iterator
    starts) numbers them; in graph mode, where an initializable iterator re-runs the
    captured tensors at each initialization, a number drawn anew then from ``seed`` (as
    :func:`~tfr_hooks.tfrecord.pipelines.passes.pass_seed` does). ``seed=None`` draws one seed
    when the pipeline is built (logged at INFO level); under a multi-worker strategy
    every worker then uses the common seed of
    :func:`~tfr_hooks.tfrecord.pipelines.sharding.shared_seed` and reads the whole
    sequence, of which the strategy keeps its part of each global batch (the reader
    splits it by data: the sequence, and a position in it, do not depend on the worker
    count); in a graph-mode cluster worker ``i`` of ``n`` reads the share
    ``shard=(i, n)`` of every epoch. With ``max_corrupt_records``, a damaged file's runs
    of whole records are ordered as files of their own
    (:func:`~tfr_hooks.tfrecord.formats.index.index_runs`): the damage is never read.

    Args:
        plan: The files (uncompressed), and the damage found in them.
        options: The reader's options (``seed``, ``num_epochs``).
        window: Records a window (packed shards: records of ``per_record`` examples).
        position: Where each new iterator starts (one epoch an iterator): it reads the
            epoch and the records the position holds then, so a resumed run seeks there
            instead of replaying.

    Raises:
        ValueError: The files are compressed (naming ``shuffle``).
    """
    order = _global_order(plan, options, window)
    if order.reading.by_index:  # the windows' records read in their order, by number
        from tfr_hooks.tfrecord.pipelines.orders import index_reads

        if position is not None:
            entries = position.start().flat_map(
                lambda e, r: index_reads.window_entries(order, e, r)
            )
        else:
            entries = _epoch_windows(order, options, lambda e: index_reads.window_entries(order, e))
        return index_reads.read_pieces(order, entries, piece=max(READ_PIECE, options.batch_size))
    if position is not None:
        return position.start().flat_map(lambda e, r: order.windows_of(e, start=r))
    return _epoch_windows(order, options)


def _global_order(plan: Plan, options: ReadOptions, window: int) -> GlobalOrder:
    """The :class:`GlobalOrder` of ``plan`` for this worker (the seed drawn when ``None``)."""
    if plan.compression:
        raise ValueError(
            "Expected uncompressed files with shuffle='global' (a GZIP or ZLIB file "
            "cannot be entered at a record; decompress the files, or shuffle them with "
            f"shuffle=N, a buffer). Received: shuffle={options.shuffle!r}, "
            f"compression={plan.compression!r}"
        )
    task = current_task()
    seed = options.seed
    if seed is None:
        seed = SHARED_SEED if task.num_workers > 1 else secrets.randbits(62)
        logger.info("shuffle='global' with seed %d (pass `seed` to repeat this order).", seed)
    # under MultiWorkerMirroredStrategy every worker reads the one global sequence and
    # the strategy keeps its part of each global batch (split by data): the same
    # sequence for any worker count, so a position in it resumes on any; a graph-mode
    # cluster's workers (asynchronous, no global batch) each read a share of their own
    shard = (0, 1) if tf.executing_eagerly() else (worker_index(task), task.num_workers)
    records = plan.records
    return GlobalOrder(
        file_indexes(records), seed=seed, window=window, shard=shard, reading=records.format
    )


def _epoch_windows(
    order: GlobalOrder,
    options: ReadOptions,
    read: Callable[[Any], tf.data.Dataset] | None = None,
) -> tf.data.Dataset:
    """The windows of ``num_epochs`` epochs of ``order`` each new iterator reads.

    ``read``: an epoch's elements (default: its windows, :meth:`GlobalOrder.windows_of`).
    """
    seed = order.seed
    num_epochs = options.num_epochs
    span = num_epochs if num_epochs is not None else 1 << 40
    if tf.executing_eagerly():
        with tf.init_scope():
            counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_passes")
        passes = tf.data.Dataset.from_tensors(tf.constant(1, tf.int64)).map(
            lambda one: counter.assign_add(one) - one
        )
    else:
        drawn = tf.random.uniform([], maxval=1 << 22, dtype=tf.int64, seed=seed)
        passes = tf.data.Dataset.from_tensors(drawn)
    epochs = passes.flat_map(lambda p: tf.data.Dataset.range(span).map(lambda k: p * span + k))
    return epochs.flat_map(order.windows_of if read is None else read)


def _global_packed(
    plan: Plan, options: ReadOptions, calls: int, position: ReadPosition | None = None
) -> tf.data.Dataset:
    """Batches of examples from packed shards in the global order (``shuffle="global"``).

    The global order runs over the records (each a block of ``per_record`` examples) in
    windows of about :data:`DEFAULT_WINDOW` examples; each
    window is unpacked at once and its examples put in an order drawn from its records
    (the window's one vectorized permutation, as a packed ``shuffle=N`` window),
    then cut into batches. With ``position`` (counting examples), each pass reads its
    epoch's windows from the one holding the position, and drops that window's examples
    before it: the same examples as the pass read from its start.
    """
    per_record = plan.per_record
    order = _global_order(plan, options, max(1, DEFAULT_WINDOW // per_record))
    deterministic = options.config.deterministic

    def unpack_window(serialized: Any) -> dict[str, Any]:
        salt = window_salt(serialized, 0)
        return unpack(plan.schema, serialized, per_record, order_seed=salt)

    def pass_from(epoch: Any, done: Any) -> tf.data.Dataset:
        counts = [int(c or 0) for c in plan.counts]
        window, begin = order.locate_examples(epoch, done, per_record, counts)
        windows = order.windows_of(epoch, start=order.window_start(window))
        unpacked = windows.map(
            unpack_window, num_parallel_calls=calls, deterministic=deterministic
        ).enumerate()
        return unpacked.map(  # the first window's examples from `begin`
            lambda i, ex: {k: v[tf.where(tf.equal(i, 0), begin, 0) :] for k, v in ex.items()}
        )

    if position is not None:
        examples = position.start().flat_map(pass_from)
    else:
        examples = _epoch_windows(order, options).map(
            unpack_window, num_parallel_calls=calls, deterministic=deterministic
        )
    return examples.rebatch(options.batch_size, drop_remainder=options.drop_remainder)


def worker_index(task: TaskInfo) -> int:
    """This task's place among the cluster's training tasks (chief first, then workers)."""
    if task.num_workers <= 1 or task.task_type in (None, "chief"):
        return 0
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return task.task_id + (1 if cluster.get("chief") else 0)


class GlobalShuffleOrder(Order):
    """``shuffle="global"``: every record once an epoch, mixed over the whole data set.

    Streamed, the windows of :func:`global_windows` are parsed a window at once and cut
    into batches; on packed shards, each window is unpacked and its examples put in an
    order drawn from its records. A pass is entered at a position by arithmetic
    (:meth:`GlobalOrder.locate`): it rereads at most the window it starts in.
    """

    name = "global"
    held = True
    shuffles = True

    @classmethod
    def refuse(cls, options: ReadOptions) -> None:
        """Refuse the tf.data service."""
        super().refuse(options)
        if options.service is not None:
            raise ValueError(
                "Expected shuffle=None with service= (the tf.data service's dispatcher "
                "hands its workers ranges of index blocks, and its workers do not know "
                "which epoch a job is, so they cannot draw that epoch's global order; read "
                "without service= for shuffle='global', which then runs in the trainer, or "
                "shuffle served data with shuffle=N, a buffer, which mixes each worker's "
                f"blocks). Received: shuffle={options.shuffle!r}, service={options.service!r}"
            )

    def held_order(self) -> int | str | None:
        """A fresh permutation of all the held examples each pass."""
        return "global"

    def knows_length(self, workers: int) -> bool:
        """One worker only: under several, the strategy keeps a part of each global batch."""
        return workers == 1

    @classmethod
    def refuse_queue(cls, options: ReadOptions) -> None:
        """TensorFlow's queue readers cannot seek to a block."""
        from tfr_hooks.checks import expected

        raise ValueError(
            expected(
                "shuffle",
                "None with pipeline='queue' (TensorFlow's queue readers read each file "
                "as a stream from its start, with no seek to a block, so the queue cannot "
                "read the global order; use pipeline='dataset', the default of "
                "read_batches, for shuffle='global' in graph mode, or shuffle the queue "
                "with shuffle=N, a buffer)",
                options.shuffle,
            )
        )

    def enters(self, plan: Plan, kind: PipelineKind) -> bool:
        """In memory; streamed; on packed shards whose examples are known (undamaged)."""
        from tfr_hooks.tfrecord.pipelines.options import PipelineKind

        streamed = kind is PipelineKind.STREAMED and plan.per_record == 1
        packed = kind is PipelineKind.PACKED and plan.damage is None and plan.examples is not None
        seekable = plan.records.format.seekable(plan.compression)
        return kind.in_memory or ((streamed or packed) and seekable)

    def records(
        self, plan: Plan, *, reads: int, position: ReadPosition | None = None
    ) -> tf.data.Dataset:
        """The records of the windows, one at a time."""
        del reads
        return global_windows(plan, self.options, position=position).unbatch()

    def batches(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """Each window parsed at once, then cut into batches."""
        del reads
        windows = global_windows(plan, options, position=position).map(
            plan.parse_batch,
            num_parallel_calls=calls,
            deterministic=options.config.deterministic,
        )
        return windows.rebatch(options.batch_size, drop_remainder=options.drop_remainder)

    def packed(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """See :func:`_global_packed`."""
        del reads
        return _global_packed(plan, options, calls, position)
