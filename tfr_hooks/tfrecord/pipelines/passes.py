"""The streamed pipelines' passes over the records: file order, shuffle, seed, epochs.

:func:`record_passes` reads the records of a
:class:`~tfr_hooks.tfrecord.formats.reading.RecordFiles` (:func:`record_stream`: of a damaged
file, only the whole records) for ``num_epochs`` passes, shuffling the
files and the records anew every pass, seeded by :func:`pass_seed` so that each pass of a
graph-mode iterator gets its own order too. The streamed pipeline (one example a record)
batches and parses what it returns; the packed pipeline cuts windows of blocks from it;
the in-memory pipeline draws its permutations' seeds from :func:`pass_seed`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.splits import served_records

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
    records: RecordFiles,
    *,
    reads: int,
    deterministic: bool,
    buffer: int,
    seed: int | None,
    num_epochs: int | None,
    served: bool = False,
) -> tuple[tf.data.Dataset, Any]:
    """The records of ``records``' files for ``num_epochs`` passes, shuffled anew every pass.

    With ``buffer > 0`` the files are shuffled, then the records in a buffer of
    ``buffer``, both seeded by :func:`pass_seed`: eagerly, every new iterator reshuffles
    (``tf.data``'s own reshuffling); in graph mode, every initialization of the iterator
    draws the next seed of a sequence fixed by ``seed``, so each pass gets its own order,
    the same in a new graph built the same way. The streamed and packed pipelines read
    through it.

    Args:
        records: The shards, their compression, and the damaged records to skip
            (``max_corrupt_records``).
        reads: Files read at once.
        deterministic: Whether parallel reads keep a fixed order.
        buffer: Records (blocks, for packed shards) in the shuffle buffer; 0 keeps the
            stored order.
        seed: Seed of the shuffles.
        num_epochs: Passes; ``None`` repeats forever.
        served: Whether a tf.data service runs the pipeline: its first splittable
            source is then the splits of
            :func:`~tfr_hooks.tfrecord.pipelines.splits.served_records` (index blocks of
            uncompressed files, else whole files), never a shuffled file list, which
            would give every service worker every file.

    Returns:
        The records, and the seed of the pass (``None`` unshuffled) for the shuffles
        that follow.
    """
    seed_value = pass_seed(seed) if buffer else None
    if served:
        stream = served_records(
            records, reads=reads, deterministic=deterministic, shuffled=bool(buffer), seed=seed
        )
    else:
        stream = record_stream(
            records,
            reads=reads,
            deterministic=deterministic,
            shuffle_files=bool(buffer),
            seed=seed_value,
        )
    if buffer:
        stream = stream.shuffle(buffer, seed=seed_value)
    if num_epochs != 1:
        stream = stream.repeat(num_epochs)
    return stream, seed_value


def record_stream(
    records: RecordFiles,
    *,
    reads: int,
    deterministic: bool,
    shuffle_files: bool,
    seed: int | None,
) -> tf.data.Dataset:
    """The serialized records of the files, ``reads`` files interleaved one record at a time.

    Args:
        records: The shards, their compression, and what a scan for damaged records
            found (``max_corrupt_records``): of a damaged file, only the whole records
            are read (:meth:`~tfr_hooks.tfrecord.formats.reading.RecordFiles.per_file`).
        reads: Files read at once (in parallel when more than 1).
        deterministic: Whether parallel reads keep a fixed order.
        shuffle_files: Whether to shuffle the order of the files (each pass anew).
        seed: Seed of that shuffle.

    Returns:
        A dataset of scalar ``tf.string`` records.
    """
    paths, file_records = records.per_file()
    if shuffle_files:
        paths = paths.shuffle(len(records.files), seed=seed)
    parallel: dict[str, Any] = {}
    if reads > 1:
        parallel = {"num_parallel_calls": reads, "deterministic": deterministic}
    return paths.interleave(file_records, cycle_length=reads, block_length=1, **parallel)
