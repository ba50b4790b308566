"""What a tf.data service's dispatcher hands out: ranges of index blocks, or whole files.

Under ``processing_mode="distributed_epoch"`` (``ShardingPolicy.DYNAMIC``) the dispatcher
splits the *first splittable source* of a pipeline and hands its splits to the workers one
at a time, so that an epoch visits each split once. What that source is decides whether
each example comes once (checked on TensorFlow 2.21 by ``tests/test_data_service_splits.py``):

* ``from_tensor_slices(files).interleave(TFRecordDataset)``: one split a file; with fewer
  files than workers, the extra workers idle.
* ``from_tensor_slices(files).shuffle(n).interleave(...)``: every worker reads *every*
  file, each example once per worker. A shuffle of the file list in front of the reads
  is never built for the service.
* ``Dataset.range(n).interleave(read split i)``: one split an element of the range.

:func:`served_records` builds the last shape: the records of fewer than
:data:`TARGET_SPLITS` uncompressed files are cut into splits of whole index blocks
(:mod:`tfr_hooks.tfrecord.formats.index`: up to :data:`MAX_SPLIT_BLOCKS` blocks of 128
records of one file, each entered with one seek), so that even one file is shared by
every worker, each record read by exactly one. Compressed files cannot be entered at a
block: they are split by file, and with fewer files than workers the extra workers
idle. So are :data:`TARGET_SPLITS` files or more: enough splits for that many workers,
without building an index. A buffer shuffle runs after the split, in each worker, over
the records of its splits; the splits themselves are handed out in an order permuted
once per pipeline (a stateless ``index_shuffle`` of the range, the same on every
worker), so that a worker's buffer mixes blocks from all over the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.index import RecordIndex, index_runs
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.formats.records import READ_BUFFER

__all__ = [
    "MAX_SPLITS",
    "MAX_SPLIT_BLOCKS",
    "TARGET_SPLITS",
    "block_splits",
    "file_indexes",
    "served_records",
]

#: Index blocks a split holds at most (of 128 records: 2,048 records a split).
MAX_SPLIT_BLOCKS = 16
#: Splits an epoch is cut into at least, when the data has that many blocks: enough that
#: dozens of workers each get some, and that the last split ends an epoch soon.
TARGET_SPLITS = 64
#: Splits an epoch is cut into at most: the table of splits is part of the pipeline's
#: graph, sent to the dispatcher (24 bytes a split); past it, splits grow beyond
#: :data:`MAX_SPLIT_BLOCKS` blocks.
MAX_SPLITS = 1 << 16


def file_indexes(records: RecordFiles) -> list[RecordIndex]:
    """The record indexes of uncompressed files: of a damaged one, its runs of whole records.

    Each index is built once and kept (see :func:`~tfr_hooks.tfrecord.formats.index.record_index`);
    a damaged file (``max_corrupt_records``) gives one index a run of whole records
    between its damage, so that no read enters the damage.
    """
    damage = records.damage
    indexes: list[RecordIndex] = []
    for path in records.files:
        found = damage.of(path) if damage is not None else None
        if found is not None and found.damaged:
            indexes.extend(index_runs(path, found.offsets, found.lengths))
        else:
            indexes.append(records.format.index(path, records.compression))
    return indexes


def block_splits(
    indexes: list[RecordIndex],
    *,
    target: int = TARGET_SPLITS,
    most: int = MAX_SPLIT_BLOCKS,
    cap: int = MAX_SPLITS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The splits of ``indexes``: runs of consecutive blocks, each within one index.

    Every record of every index is in exactly one split. A split holds
    ``clip(blocks // target, 1, most)`` blocks (fewer at an index's end), or more when
    that would make more than ``cap`` splits.

    Returns:
        For each split: the index it reads (a position in ``indexes``), the byte offset
        where it starts, and its records.
    """
    total = sum(index.blocks for index in indexes)
    size = max(int(np.clip(total // max(1, target), 1, most)), -(-total // cap))
    which, offsets, counts = [], [], []
    for i, index in enumerate(indexes):
        for first in range(0, index.blocks, size):
            begin = first * index.block
            end = min(index.count, (first + size) * index.block)
            which.append(i)
            offsets.append(int(index.bounds[first]))
            counts.append(end - begin)
    return (
        np.asarray(which, np.int64),
        np.asarray(offsets, np.int64),
        np.asarray(counts, np.int64),
    )


def served_records(
    records: RecordFiles, *, reads: int, deterministic: bool, shuffled: bool, seed: int | None
) -> tf.data.Dataset:
    """The serialized records of one pass, whose first splittable source the service splits.

    Fewer than :data:`TARGET_SPLITS` uncompressed files are cut into ranges of index
    blocks (:func:`block_splits`; the record index is built on the first read and kept);
    compressed files, or that many files or more, are one split a file (no index needed).

    Args:
        records: The shards, their compression, and the damaged records to skip.
        reads: Splits read at once by a worker (interleaved a record at a time).
        deterministic: Whether parallel reads keep a fixed order.
        shuffled: Whether the splits are handed out in a permuted order (the records'
            buffer shuffle follows, in the caller).
        seed: Seed of that permutation (``None``: drawn once, here).

    Returns:
        A dataset of scalar ``tf.string`` records whose first source is a
        ``Dataset.range`` over the splits, never shuffled in front.
    """
    parallel: dict[str, Any] = {}
    if reads > 1:
        parallel = {"num_parallel_calls": reads, "deterministic": deterministic}
    files = list(records.files)
    if records.compression or len(files) >= TARGET_SPLITS:  # one split a file
        paths = tf.constant(files or [""], tf.string)
        at = tf.constant([records.position(path) for path in files] or [0], tf.int64)
        return _handed_out(len(files), shuffled, seed).interleave(
            lambda i: records.file_records(tf.gather(paths, i), tf.gather(at, i)),
            cycle_length=reads,
            block_length=1,
            **parallel,
        )
    indexes = file_indexes(records)
    reading = records.format
    which, offsets, counts = block_splits(indexes)
    paths = tf.constant([index.file for index in indexes] or [""], tf.string)
    which_t, offsets_t, counts_t = (tf.constant(v, tf.int64) for v in (which, offsets, counts))

    def split_records(split: Any) -> tf.data.Dataset:
        path = tf.gather(paths, tf.gather(which_t, split))
        start = tf.gather(offsets_t, split)
        return reading.records_from(path, start, READ_BUFFER).take(tf.gather(counts_t, split))

    return _handed_out(len(counts), shuffled, seed).interleave(
        split_records, cycle_length=reads, block_length=1, **parallel
    )


def _handed_out(splits: int, shuffled: bool, seed: int | None) -> tf.data.Dataset:
    """``Dataset.range(splits)``: what the dispatcher splits; permuted once when ``shuffled``.

    The permutation is a stateless ``index_shuffle`` of a key fixed here, so every
    service worker maps a split to the same place.
    """
    handed = tf.data.Dataset.range(splits)
    if not shuffled or splits < 2:
        return handed
    entropy = None if seed is None else int(seed) % (1 << 64)
    drawn = np.random.SeedSequence(entropy).generate_state(2, np.uint32).astype(np.int64)
    key = tf.constant(drawn, tf.int64)
    last = tf.constant(splits - 1, tf.int64)
    return handed.map(lambda i: tf.random.experimental.index_shuffle(i, key, last))
