"""The queue pipeline of :func:`~tfr_hooks.tfrecord.read_batches` (``pipeline="queue"``).

``string_input_producer`` + one ``TFRecordReader`` per reader thread +
``shuffle_batch_join`` (``batch_join`` when not shuffling), then one
``tf.io.parse_example`` per batch: the TF1 way, for graph-mode code that runs queue
runners. Its options are checked by :func:`~tfr_hooks.tfrecord.pipelines.options.queue_capacity`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.tfrecord.pipelines.options import ReadOptions, queue_readers
from tfr_hooks.tfrecord.pipelines.plan import Plan
from tfr_hooks.tfrecord.pipelines.ragged import pad_batch
from tfr_hooks.tfrecord.pipelines.stages import structure

__all__ = ["queue_batches", "check_queue_plan"]


def queue_batches(plan: Plan, options: ReadOptions, capacity: int) -> Any:
    """The batch tensors of a queue pipeline (a dict, or a tuple named by ``as_tuple``).

    Its queue runners land in the graph's ``QUEUE_RUNNERS`` collection.
    """
    with _quiet_deprecations():  # the user asked for queues: no need to be told
        parsed = _queue_pipeline(plan, options, capacity)
    parsed = pad_batch(parsed, options.shaping)
    if options.batch_map_fn is not None:
        parsed = options.batch_map_fn(parsed)
    return structure(parsed, plan.names)


def check_queue_plan(plan: Plan) -> None:
    """Refuse files a queue cannot read: packed shards, or another format than TFRecord.

    A format's :attr:`~tfr_hooks.tfrecord.formats.records.RecordFormat.queue_readable`
    says whether TensorFlow's queue readers read it.

    Raises:
        ValueError: For packed shards, or files of such a format.
    """
    reading = plan.records.format
    if not reading.queue_readable:
        raise ValueError(
            expected(
                "pipeline",
                f"'dataset' for {reading.name} files (the queue reads TFRecord files only)",
                "queue",
            )
        )
    if plan.per_record > 1:
        raise ValueError(
            expected(
                "pipeline",
                f"'dataset' for packed shards ({plan.per_record} examples per record)",
                "queue",
            )
        )


class _DropDeprecations(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "is deprecated" not in str(record.msg)


@contextlib.contextmanager
def _quiet_deprecations() -> Iterator[None]:
    """Drop TensorFlow's deprecation notices while the queue pipeline is built."""
    tf_logger = logging.getLogger("tensorflow")
    quiet = _DropDeprecations()
    tf_logger.addFilter(quiet)
    try:
        yield
    finally:
        tf_logger.removeFilter(quiet)


def _queue_pipeline(plan: Plan, options: ReadOptions, capacity: int) -> dict[str, Any]:
    batch_size, shuffle_buffer, seed = options.batch_size, options.shuffle_buffer, options.seed
    files = plan.records.clean()
    reads = []
    if files:
        filenames = tf.compat.v1.train.string_input_producer(
            files,
            num_epochs=options.num_epochs,
            shuffle=shuffle_buffer > 0,
            seed=seed,
            capacity=max(32, len(files)),
        )
        tf_options = tf.io.TFRecordOptions(compression_type=plan.compression)
        for _ in range(queue_readers(options)):
            reader = tf.compat.v1.TFRecordReader(options=tf_options)
            _, serialized = reader.read_up_to(filenames, num_records=batch_size)
            reads.append([serialized])
    if len(files) < len(plan.files):
        reads.append([_whole_records(plan, options)])
    if shuffle_buffer > 0:
        batch = tf.compat.v1.train.shuffle_batch_join(
            reads,
            batch_size,
            capacity=capacity,
            min_after_dequeue=shuffle_buffer,
            seed=seed,
            enqueue_many=True,
            allow_smaller_final_batch=not options.drop_remainder,
        )
    else:
        batch = tf.compat.v1.train.batch_join(
            reads,
            batch_size,
            capacity=capacity,
            enqueue_many=True,
            allow_smaller_final_batch=not options.drop_remainder,
        )
    serialized_batch = batch[0] if isinstance(batch, (list, tuple)) else batch
    return plan.parse_batch(serialized_batch)


def _whole_records(plan: Plan, options: ReadOptions) -> Any:
    """Batches of the whole records of the damaged files, one more reader of the queue.

    A ``TFRecordReader`` cannot skip a damaged record: the damaged files are read by a
    ``tf.data`` one-shot iterator over their whole records (``num_epochs`` passes),
    whose batches join the readers' (``OutOfRangeError`` ends its enqueue thread as the
    end of the file names ends the readers').
    """
    source = plan.records
    damaged = [path for path in plan.files if source.damaged([path])]
    records = source.records(damaged)
    if options.shuffle_buffer > 0:
        records = records.shuffle(max(1, options.shuffle_buffer), seed=options.seed)
    records = records.repeat(options.num_epochs).batch(options.batch_size)
    return tf.compat.v1.data.make_one_shot_iterator(records).get_next()
