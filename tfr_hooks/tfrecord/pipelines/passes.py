"""The streamed pipelines' passes over the records: file order, shuffle, seed, epochs.

:func:`record_passes` reads the records of the files (:func:`record_stream`, where a
damage map skips the damaged records) for ``num_epochs`` passes, shuffling the
files and the records anew every pass, seeded by :func:`pass_seed` so that each pass of a
graph-mode iterator gets its own order too. The streamed pipeline (one example a record)
batches and parses what it returns; the packed pipeline cuts windows of blocks from it;
the in-memory pipeline draws its permutations' seeds from :func:`pass_seed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.sources.damage import DamagedReads, DamageMap

__all__ = ["pass_seed", "record_passes", "record_stream"]


def pass_seed(seed: int | None) -> Any:
    """A seed for one pass: the seed itself in eager code, else new at each initialization.

    In graph mode an initializable iterator rebuilds its dataset at each initialization
    with the same seeds, so every pass would repeat the same order; a stateful random
    draw (seeded by ``seed``) gives each initialization its own, reproducibly.
    """
    if tf.executing_eagerly():
        return seed
    return tf.random.uniform([], maxval=tf.int64.max, dtype=tf.int64, seed=seed)


def record_passes(
    files: list[str],
    compression: str,
    *,
    reads: int,
    deterministic: bool,
    buffer: int,
    seed: int | None,
    num_epochs: int | None,
    damage: DamageMap | None = None,
) -> tuple[tf.data.Dataset, Any]:
    """The records of ``files`` for ``num_epochs`` passes, shuffled anew every pass.

    With ``buffer > 0`` the files are shuffled, then the records in a buffer of
    ``buffer``, both seeded by :func:`pass_seed`: eagerly, every new iterator reshuffles
    (``tf.data``'s own reshuffling); in graph mode, every initialization of the iterator
    draws the next seed of a sequence fixed by ``seed``, so each pass gets its own order,
    the same in a new graph built the same way. The streamed and packed pipelines read
    through it.

    Args:
        files: The shards.
        compression: Their compression.
        reads: Files read at once.
        deterministic: Whether parallel reads keep a fixed order.
        buffer: Records (blocks, for packed shards) in the shuffle buffer; 0 keeps the
            stored order.
        seed: Seed of the shuffles.
        num_epochs: Passes; ``None`` repeats forever.
        damage: The damaged records to skip (``max_corrupt_records``), or ``None``.

    Returns:
        The records, and the seed of the pass (``None`` unshuffled) for the shuffles
        that follow.
    """
    seed_value = pass_seed(seed) if buffer else None
    records = record_stream(
        files,
        compression,
        reads=reads,
        deterministic=deterministic,
        shuffle_files=bool(buffer),
        seed=seed_value,
        damage=damage,
    )
    if buffer:
        records = records.shuffle(buffer, seed=seed_value)
    if num_epochs != 1:
        records = records.repeat(num_epochs)
    return records, seed_value


def record_stream(
    files: Sequence[str],
    compression: str,
    *,
    reads: int,
    deterministic: bool,
    shuffle_files: bool,
    seed: int | None,
    damage: DamageMap | None = None,
) -> tf.data.Dataset:
    """The serialized records of ``files``, ``reads`` files interleaved one record at a time.

    Args:
        files: The shards.
        compression: Their compression (``""``, ``"GZIP"``, ``"ZLIB"``).
        reads: Files read at once (in parallel when more than 1).
        deterministic: Whether parallel reads keep a fixed order.
        shuffle_files: Whether to shuffle the order of the files (each pass anew).
        seed: Seed of that shuffle.
        damage: What a scan for damaged records found (``max_corrupt_records``): when
            some of ``files`` are damaged, only their whole records are read (see
            :class:`~tfr_hooks.tfrecord.sources.damage.DamagedReads`).

    Returns:
        A dataset of scalar ``tf.string`` records.
    """
    if damage is not None and damage.damages(files):
        return _damaged_stream(files, damage, reads, deterministic, shuffle_files, seed)
    paths = tf.data.Dataset.from_tensor_slices(list(files))
    if shuffle_files:
        paths = paths.shuffle(len(files), seed=seed)
    parallel: dict[str, Any] = {}
    if reads > 1:
        parallel = {"num_parallel_calls": reads, "deterministic": deterministic}
    return paths.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
        cycle_length=reads,
        block_length=1,
        **parallel,
    )


def _damaged_stream(
    files: Sequence[str],
    damage: DamageMap,
    reads: int,
    deterministic: bool,
    shuffle_files: bool,
    seed: int | None,
) -> tf.data.Dataset:
    """:func:`record_stream` over files some of which hold damaged records."""
    damaged = DamagedReads(damage)
    paths = damaged.paths(files)
    if shuffle_files:
        paths = paths.shuffle(len(files), seed=seed)
    parallel: dict[str, Any] = {}
    if reads > 1:
        parallel = {"num_parallel_calls": reads, "deterministic": deterministic}
    return paths.interleave(damaged.records, cycle_length=reads, block_length=1, **parallel)
