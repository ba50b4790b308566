"""Batches from packed shards: windows of whole blocks, unpacked and shuffled per window.

The block layout itself (packing, unpacking, checking) is a record format, in
:mod:`tfr_hooks.tfrecord.formats.packed`; this module is the pipeline that reads it.
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.formats.packed import WINDOW_EXAMPLES, unpack
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.passes import record_passes
from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = ["packed_dataset", "window_blocks", "window_salt"]


def window_blocks(batch_size: int, per_record: int, shuffle_buffer: int) -> int:
    """Blocks a window of packed shards holds: ``shuffle_buffer`` examples, else a batch's.

    At least :data:`~tfr_hooks.tfrecord.formats.packed.WINDOW_EXAMPLES` examples without a
    buffer.
    """
    window_examples = shuffle_buffer or max(batch_size, WINDOW_EXAMPLES)
    return max(1, math.ceil(window_examples / per_record))


def packed_dataset(
    records: RecordFiles,
    schema: Schema,
    per_record: int,
    batch_size: int,
    *,
    shuffle_buffer: int,
    seed: int | None,
    num_parallel_reads: int,
    drop_remainder: bool,
    num_epochs: int | None,
    prefetch: int | None,
    deterministic: bool = True,
    served: bool = False,
) -> tf.data.Dataset:
    """A dataset of batches (dicts of tensors) from packed shards.

    Args:
        records: The packed shards, their compression, and the damaged records to skip
            (``max_corrupt_records``).
        schema: The features to return.
        per_record: Examples per record (``examples_per_record`` of ``schema.json``).
        batch_size: Examples per batch.
        shuffle_buffer: The window of whole blocks shuffled together, in examples; 0
            keeps the stored order.
        seed: Seed of every shuffle.
        num_parallel_reads: Files read at once.
        drop_remainder: Whether to drop the final, smaller batch.
        num_epochs: Passes over the files; ``None`` repeats forever.
        prefetch: Batches to prefetch (0 or ``None`` for none).
        deterministic: Whether parallel reads and parsing keep a fixed order.
        served: Whether a tf.data service runs it (its records are split among the
            service's workers: :func:`~tfr_hooks.tfrecord.pipelines.passes.record_passes`).

    Returns:
        The dataset.
    """
    window = window_blocks(batch_size, per_record, shuffle_buffer)
    blocks, seed_value = record_passes(
        records,
        reads=num_parallel_reads,
        deterministic=deterministic,
        buffer=max(2 * window, 16) if shuffle_buffer else 0,
        seed=seed,
        num_epochs=num_epochs,
        served=served,
    )
    windows = blocks.batch(window)
    if shuffle_buffer and tf.executing_eagerly():
        # the window's permutation is drawn from its blocks (in their shuffled order) and
        # the seed: no second source beside the files, which TensorFlow's file sharding
        # (MultiWorkerMirroredStrategy) could not split ("Did not find a shardable source")
        base = 0 if seed is None else int(seed)

        def unpack_window(serialized: Any) -> dict[str, Any]:
            return unpack(schema, serialized, per_record, order_seed=window_salt(serialized, base))

        examples = windows.map(unpack_window, num_parallel_calls=2, deterministic=deterministic)
    elif shuffle_buffer:
        salts = tf.data.Dataset.random(seed=seed).map(lambda s: s + seed_value)

        def unpack_shuffled(serialized: Any, salt: Any) -> dict[str, Any]:
            return unpack(schema, serialized, per_record, order_seed=salt)

        examples = tf.data.Dataset.zip((windows, salts)).map(
            unpack_shuffled, num_parallel_calls=2, deterministic=deterministic
        )
    else:
        examples = windows.map(
            lambda serialized: unpack(schema, serialized, per_record),
            num_parallel_calls=2,
            deterministic=deterministic,
        )
    batches = examples.rebatch(batch_size, drop_remainder=drop_remainder)
    if prefetch:
        batches = batches.prefetch(prefetch)
    return batches


def window_salt(serialized: Any, seed: int) -> Any:
    """An ``int64`` seed for a window's permutation: its blocks' fingerprints, in order."""
    prints = tf.fingerprint(tf.reshape(tf.fingerprint(serialized), [1, -1]))
    salt = tf.bitcast(prints, tf.int64)[0]
    return tf.bitwise.bitwise_xor(salt, tf.constant(seed, tf.int64))
