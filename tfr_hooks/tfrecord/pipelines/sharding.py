"""How a dataset is split among the workers of a cluster.

Knows no hooks and no loops, so that the TFRecord readers can use it, and imports
TensorFlow only where a function needs it, so that a launcher (``--workers N``, the
benchmark's parent) can pick ports without paying for TensorFlow's import. Who this
process is (:class:`~tfr_hooks.task.TaskInfo`, :func:`~tfr_hooks.task.current_task`)
lives in the core module :mod:`tfr_hooks.task`; its names are imported here too, so
that ``tfr_hooks.tfrecord.pipelines.sharding.current_task`` still works:

* :func:`shard_dataset`: the sharding policy of :func:`tfr_hooks.tfrecord.dataset`: by
  file when there are at least as many files as workers, by data otherwise.
* :func:`distributed_steps`: how many global steps one pass over such a dataset makes under
  a multi-worker strategy, when that is known before the pass; :func:`file_sharded_steps`
  counts them for a split by file, from each file's examples.
* :func:`loopback_cluster`: ``TF_CONFIG`` values for N workers on free ``127.0.0.1``
  ports, for tests and the ``--workers N`` mode of ``examples/multi_worker.py``.

These serve the readers, the loops, the tests and the launchers.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tfr_hooks.task import TaskInfo, current_task, is_multi_worker

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "TaskInfo",
    "current_task",
    "is_multi_worker",
    "SHARD_POLICIES",
    "check_shard",
    "shared_seed",
    "shard_dataset",
    "distributed_steps",
    "file_sharded_steps",
    "loopback_cluster",
]

logger = logging.getLogger(__name__)

#: The values of ``tfrecord.dataset(shard=...)``.
SHARD_POLICIES = ("auto", "file", "data", "off")


def check_shard(shard: object) -> None:
    """Raise a clear ``ValueError`` unless ``shard`` is one of :data:`SHARD_POLICIES`."""
    if not isinstance(shard, str) or shard not in SHARD_POLICIES:
        raise ValueError(
            "Expected `shard` to be one of 'auto', 'file', 'data' or 'off'. "
            f"Received: shard={shard!r}"
        )


#: The shuffle seed shared by all workers when the user gives none.
SHARED_SEED = 1013


def shared_seed(seed: int | None, shuffle_buffer: int, task: TaskInfo | None = None) -> int | None:
    """The shuffle seed to use: one common to every worker when there are several.

    Sharding splits the data after it is read and shuffled, so every worker must shuffle
    in the same order, or some examples would be read twice and others never.

    Args:
        seed: The seed asked for (``None`` for none).
        shuffle_buffer: The shuffle buffer (0: no shuffling, no seed needed).
        task: The task of this process (by default :func:`current_task`).

    Returns:
        ``seed``, or :data:`SHARED_SEED` when shuffling on several workers without one.
    """
    task = current_task() if task is None else task
    if seed is None and shuffle_buffer and task.num_workers > 1:
        logger.info(
            "Shuffling with seed %d on every one of %d workers, so that each example is "
            "read once per epoch; pass `seed` to choose another.",
            SHARED_SEED,
            task.num_workers,
        )
        return SHARED_SEED
    return seed


def shard_dataset(
    dataset: tf.data.Dataset,
    shard: str,
    num_files: int,
    task: TaskInfo | None = None,
    *,
    file_examples: Sequence[int | None] | None = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    num_epochs: int | None = 1,
) -> tf.data.Dataset:
    """Set how a multi-worker strategy splits a TFRecord dataset among its workers.

    ``"auto"`` shards by file when there are at least as many files as workers (each
    worker reads whole files of its own) and by data otherwise (every worker reads all
    files and keeps its share of each global batch); ``"file"`` insists on files,
    ``"data"`` on data, ``"off"`` leaves the splitting to you. Either way every example
    is read once per epoch by exactly one worker.

    Sharded by file on several workers, a pass makes more steps than the dataset has
    global batches as soon as a worker's share ends in a partial batch (see
    :func:`file_sharded_steps`). When ``file_examples`` gives every file's examples and
    the dataset's cardinality is known, the returned dataset's ``cardinality()`` is then
    the steps a pass makes under the strategy (the reader's
    :class:`~tfr_hooks.tfrecord.Source` tells the loop so in its facts). Such a dataset
    is meant for the strategy: iterated on its own, outside
    ``strategy.experimental_distribute_dataset``, it raises at its end, where it holds
    fewer batches than it says.

    Args:
        dataset: The dataset of batches.
        shard: One of :data:`SHARD_POLICIES`.
        num_files: How many files the dataset reads.
        task: The task of this process (by default :func:`current_task`).
        file_examples: The examples of each file, in the dataset's file order
            (``None`` for a file whose count is unknown).
        batch_size: The global batch size the dataset batches with.
        drop_remainder: Whether the dataset drops each pass's final partial batch.
        num_epochs: Passes over the files the dataset makes (``None``: forever).

    Returns:
        The dataset with its ``experimental_distribute.auto_shard_policy`` set.

    Raises:
        ValueError: If ``shard`` is unknown, or is ``"file"`` with fewer files than
            workers.
    """
    import tensorflow as tf

    check_shard(shard)
    task = current_task() if task is None else task
    workers = task.num_workers
    if shard == "file" and num_files < workers:
        raise ValueError(
            f"Expected at least as many files as workers to shard by file ({workers} "
            f"workers in the cluster); the dataset reads {num_files} file(s). Write the data "
            "in more shards (tfrecord.write(..., shards=N)) or shard by data. "
            f"Received: shard={shard!r}"
        )
    policies = tf.data.experimental.AutoShardPolicy
    if shard == "auto" and workers == 1:
        return dataset  # no cluster known yet: TensorFlow's own AUTO policy
    if shard == "off":
        policy = policies.OFF
    elif shard == "data" or (shard == "auto" and num_files < workers):
        policy = policies.DATA
    else:
        policy = policies.FILE
    if workers > 1:
        logger.info(
            "Sharding %d file(s) across %d workers by %s",
            num_files,
            workers,
            {policies.OFF: "nothing (off)", policies.DATA: "data", policies.FILE: "file"}[policy],
        )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    dataset = dataset.with_options(options)
    steps = None
    if policy == policies.FILE and workers > 1 and int(dataset.cardinality()) >= 0:
        steps = file_sharded_steps(
            file_examples, workers, batch_size, drop_remainder=drop_remainder, num_epochs=num_epochs
        )
    if steps is None:
        return dataset
    # TensorFlow's file-sharding rewrite leaves each worker's shard its own length (the
    # assertion does not bind there); the cardinality shown is the steps of a pass
    return dataset.apply(tf.data.experimental.assert_cardinality(steps))


def file_sharded_steps(
    file_examples: Sequence[int | None] | None,
    num_workers: int,
    batch_size: int | None,
    *,
    drop_remainder: bool = False,
    num_epochs: int | None = 1,
) -> int | None:
    """The global steps a pass makes when ``num_workers`` workers shard files by file.

    TensorFlow's file sharding gives worker ``w`` the files ``w``, ``w + W``, ``w + 2W``,
    ... of the dataset's file list (before any shuffle of the files); each worker batches
    its own examples in batches of the global size, and the strategy splits each such
    batch into one piece per replica of the cluster, a step taking one piece per
    replica (an empty one from a worker whose data ran out). So a pass makes
    ``W * max over workers of ceil(n_w / batch_size)`` steps (``floor`` with
    ``drop_remainder``), with ``n_w`` the examples of worker ``w``'s files (times
    ``num_epochs``): 2 workers with 2,000 examples each, global batch 32: 2 x 63 = 126,
    while the data holds 125 global batches.

    Args:
        file_examples: The examples of each file, in the dataset's file order.
        num_workers: The workers of the cluster.
        batch_size: The global batch size.
        drop_remainder: Whether each worker drops its final partial batch.
        num_epochs: Passes over the files in one pass over the dataset.

    Returns:
        The steps, or ``None`` when a count, the batch size or the passes are unknown.
    """
    if not file_examples or batch_size is None or num_epochs is None or num_workers < 1:
        return None
    counts = list(file_examples)
    if any(count is None for count in counts):
        return None
    shares = [
        sum(int(c) for c in counts[worker::num_workers] if c is not None) * num_epochs
        for worker in range(num_workers)
    ]
    if drop_remainder:
        batches = max(share // batch_size for share in shares)
    else:
        batches = max(-(-share // batch_size) for share in shares)
    return num_workers * batches


def distributed_steps(dataset: tf.data.Dataset, num_workers: int) -> int | None:
    """The global steps one pass over ``dataset`` makes on ``num_workers`` workers.

    A multi-worker strategy splits every batch a worker's pipeline makes (of the global
    batch size) into one piece per replica of the cluster, and each step takes one piece
    per replica. So with the data split by *data* (every worker makes every global batch
    and keeps its pieces) a pass makes ``cardinality()`` steps; with the splitting
    ``"off"`` (every worker reads everything) ``num_workers`` times as many; with the
    data split by *file*, each worker batches its own files, so the pass makes
    ``num_workers`` steps for every batch of the worker with the most: one more step than
    the data's global batches as soon as a worker's share ends in a partial batch (2
    workers, 2 files of 2,000 examples, global batch 32: 126 steps, not 125). That count
    needs each file's number of examples, which only the reader knows: the facts of
    a :class:`~tfr_hooks.tfrecord.Source` give it (``ReadFacts.steps_on``); here it is
    ``None``, and the loop learns the length from the first pass.

    Args:
        dataset: The dataset of global batches, with its ``auto_shard_policy``.
        num_workers: The worker processes of the cluster.

    Returns:
        The steps of a pass, or ``None`` when they are not known before it runs.
    """
    import tensorflow as tf

    cardinality = int(dataset.cardinality())
    if cardinality < 0:
        return None
    if num_workers <= 1:
        return cardinality
    policies = tf.data.experimental.AutoShardPolicy
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy == policies.DATA:
        return cardinality
    if policy == policies.OFF:
        return cardinality * num_workers
    # by file (or AUTO, which tries files first): the shares decide, which only the
    # reader knows (its Source's facts: ReadFacts.steps_on)
    return None


def loopback_cluster(num_workers: int) -> list[str]:
    """``TF_CONFIG`` values for ``num_workers`` workers on free loopback ports.

    The ports are found by binding port 0 on ``127.0.0.1`` (and released at once, so a
    port may in rare cases be taken by another process before TensorFlow binds it).

    Args:
        num_workers: How many worker tasks.

    Returns:
        One JSON ``TF_CONFIG`` string per worker, in task order (worker 0 is the chief).

    Raises:
        ValueError: If ``num_workers`` is not a positive integer.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            "Expected `num_workers` to be a positive integer. "
            f"Received: num_workers={num_workers!r}"
        )
    sockets = []
    try:
        for _ in range(num_workers):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        addresses = [f"127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    return [
        json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}})
        for i in range(num_workers)
    ]
