"""Multi-worker training: who this process is, what is global, and who writes files.

Everything the loops, hooks and readers of this package need to behave on a
``tf.distribute.MultiWorkerMirroredStrategy`` cluster (or a graph-mode
``tf.compat.v1.train.Server`` cluster) lives here, so the rest of the package keeps
one small call per place:

* :func:`current_task`: this process's task (type, index, chief or not, worker count),
  from the strategy's cluster resolver or from ``TF_CONFIG``.
* :func:`global_metric_results`: a Keras 3 model's metric results summed over every
  replica of every worker (the metric variables are ``ON_READ``/``SUM``; reading them in
  cross-replica context all-reduces them).
* :class:`ChiefOnlyWriting`: points the files of Keras callbacks of non-chief workers at
  a temporary directory that is removed at the end, and keeps progress bars on the chief.
* :func:`shard_dataset`: the sharding policy of :func:`tfr_hooks.tfrecord.dataset`: by
  file when there are at least as many files as workers, by data otherwise.
* :func:`loopback_cluster`: ``TF_CONFIG`` values for N workers on free ``127.0.0.1``
  ports, for tests and the ``--workers N`` mode of ``examples/multi_worker.py``.

TensorFlow's cluster ports take unauthenticated gRPC: bind them on loopback or on a
private network only, never on a public address.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.hooks import Hook

__all__ = [
    "WorkerLostError",
    "LostWorkerHook",
    "TaskInfo",
    "current_task",
    "global_metric_results",
    "ChiefOnlyWriting",
    "SHARD_POLICIES",
    "check_shard",
    "shared_seed",
    "SHARED_SEED",
    "shard_dataset",
    "is_multi_worker",
    "explain_lost_worker",
    "loopback_cluster",
]

logger = logging.getLogger(__name__)

#: The values of ``tfrecord.dataset(shard=...)``.
SHARD_POLICIES = ("auto", "file", "data", "off")


@dataclass(frozen=True)
class TaskInfo:
    """The task this process runs in a cluster (a single process is the chief of one).

    Attributes:
        task_type: ``"chief"``, ``"worker"``, ``"ps"``, ... or ``None`` outside a cluster.
        task_id: The index of the task among those of its type.
        num_workers: The training tasks of the cluster (``chief`` plus ``worker``).
        is_chief: Whether this task writes the run's files: the ``chief`` task, or
            ``worker`` 0 when the cluster has no ``chief``.
    """

    task_type: str | None = None
    task_id: int = 0
    num_workers: int = 1
    is_chief: bool = True

    @property
    def name(self) -> str:
        """``/job:<type>/task:<id>``, as TensorFlow names tasks (``"local"`` outside one)."""
        if self.task_type is None:
            return "local"
        return f"/job:{self.task_type}/task:{self.task_id}"


def _task_from(cluster: dict[str, Any], task_type: str | None, task_id: int) -> TaskInfo:
    workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    if task_type is None or workers == 0:
        return TaskInfo()
    chief = task_type == "chief" or (
        task_type == "worker" and task_id == 0 and not cluster.get("chief")
    )
    return TaskInfo(task_type, int(task_id), max(workers, 1), chief)


def _from_tf_config() -> TaskInfo:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return TaskInfo()
    try:
        config = json.loads(raw)
        cluster = dict(config.get("cluster") or {})
        task = dict(config.get("task") or {})
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(
            'Expected `TF_CONFIG` to be JSON like {"cluster": {"worker": [...]}, '
            f'"task": {{"type": "worker", "index": 0}}}}. Received: TF_CONFIG={raw!r}'
        ) from error
    return _task_from(cluster, task.get("type"), int(task.get("index", 0)))


def current_task(strategy: Any = None, model: Any = None) -> TaskInfo:
    """The task of this process: from a multi-worker strategy, else from ``TF_CONFIG``.

    Args:
        strategy: A ``tf.distribute.Strategy``; by default the model's
            (``model.distribute_strategy``) or the current one.
        model: A Keras model whose strategy to use.

    Returns:
        A :class:`TaskInfo`; a process outside any cluster is the chief of one worker.
    """
    if strategy is None and model is not None:
        strategy = getattr(model, "distribute_strategy", None)
    if strategy is None and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is not None and task_type is not None:
        cluster = resolver.cluster_spec().as_dict()
        return _task_from(cluster, task_type, int(getattr(resolver, "task_id", 0) or 0))
    return _from_tf_config()


def is_multi_worker(strategy: Any) -> bool:
    """Whether ``strategy`` spans more than one worker process."""
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


class WorkerLostError(RuntimeError):
    """A worker of the cluster went away (killed, crashed, its host lost) during training.

    Attributes:
        task: The lost task as TensorFlow names it (``/job:worker/replica:0/task:1``),
            or ``None`` when the error did not say.
    """

    def __init__(self, message: str, task: str | None = None) -> None:
        super().__init__(message)
        self.task = task


_TASK = re.compile(r"/job:[A-Za-z_]+(?:/replica:\d+)?/task:\d+")
_LOST = ("Connection reset by peer", "unhealthy", "heartbeat", "Socket closed", "connection")


def explain_lost_worker(error: BaseException, own: TaskInfo | None = None) -> BaseException | None:
    """A :class:`WorkerLostError` naming the lost task, for the error a lost worker causes.

    When a worker dies, the collective ops of the others fail with an ``UnavailableError``
    (or ``Aborted``/``DeadlineExceeded``/``Internal``) buried in gRPC details; this names
    the task that went away and says what to do.

    Args:
        error: The error that ended the run.
        own: This process's task (its name is skipped when looking for the lost one).

    Returns:
        The clearer error, or ``None`` if ``error`` does not look like a lost worker.
    """
    kinds = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.DeadlineExceededError,
        tf.errors.InternalError,
        tf.errors.CancelledError,
    )
    if not isinstance(error, kinds):
        return None
    text = str(error)
    own_name = None if own is None else own.name
    tasks = [t for t in _TASK.findall(text) if t.replace("/replica:0", "") != own_name]
    if not tasks and not any(word.lower() in text.lower() for word in _LOST):
        return None
    task = tasks[0] if tasks else None
    detail = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return WorkerLostError(
        f"Lost {'task ' + task if task else 'a worker'} of the cluster during training "
        f"({type(error).__name__}: {detail[:300]}). The other workers stop here; start the "
        "whole cluster again to resume from the last backup (BackupAndRestore).",
        task,
    )


class LostWorkerHook(Hook):
    """Turns the errors a lost worker causes into a :class:`WorkerLostError` naming it.

    :class:`~tfr_hooks.FunctionLoop` adds one by itself under a multi-worker strategy.

    Args:
        task: This process's task.
    """

    def __init__(self, task: TaskInfo) -> None:
        self.task = task

    def translate_error(self, error: BaseException) -> BaseException | None:
        """Name the lost task, when ``error`` comes from one."""
        better = explain_lost_worker(error, self.task)
        if better is not None:
            logger.error("%s", better)
        return better


def global_metric_results(model: Any) -> dict[str, Any]:
    """A Keras 3 model's metric results over every replica of every worker.

    Call it in cross-replica context (inside a ``tf.function`` but outside
    ``strategy.run``), on every worker at the same point: reading the model's
    ``ON_READ``/``SUM`` metric variables there all-reduces them, so the results are
    those of one process that saw all the global batches.

    Args:
        model: A compiled Keras 3 model.

    Returns:
        The model's ``get_metrics_result()``, the same on every worker.
    """
    return dict(model.get_metrics_result())


class ChiefOnlyWriting:
    """Point the files of Keras callbacks at a temporary place on non-chief workers.

    TensorFlow's multi-worker guides have every worker run the saving code (saving may
    read synchronized variables, which takes collective ops all workers must join) while
    only the chief writes to the real path: non-chief workers write to a temporary
    directory removed afterwards. :meth:`apply` does that to ``ModelCheckpoint``
    (``filepath``), ``TensorBoard`` (``log_dir``), ``CSVLogger`` (``filename``) and
    ``BackupAndRestore`` (its backup files: it still *restores* from the chief's backup,
    so that a restarted cluster resumes at the same epoch on every worker), and drops
    ``ProgbarLogger`` so that progress is shown by the chief only. :meth:`restore` puts
    the callbacks back as they were and removes the temporary directory.

    Args:
        task: The task of this process; on the chief nothing changes.
    """

    def __init__(self, task: TaskInfo) -> None:
        self.task = task
        self.tempdir: str | None = None
        self._changed: list[tuple[Any, str, Any]] = []

    def apply(self, callbacks: Sequence[Any], keras: Any) -> list[Any]:
        """Return the callbacks this worker runs, with their paths moved when not chief.

        Call it before the callbacks' ``set_model`` (which derives TensorBoard's run
        directories from ``log_dir``).

        Args:
            callbacks: The callbacks of the run.
            keras: The Keras module the callbacks come from (``keras`` or ``tf_keras``).

        Returns:
            The callbacks to call on this worker.
        """
        if self.task.is_chief:
            return list(callbacks)
        kept = []
        cbs = keras.callbacks
        for callback in callbacks:
            if isinstance(callback, cbs.ProgbarLogger):
                continue  # progress on the chief only
            if isinstance(callback, cbs.ModelCheckpoint):
                self._move(callback, "filepath")
            elif isinstance(callback, cbs.TensorBoard):
                self._move(callback, "log_dir")
            elif isinstance(callback, cbs.CSVLogger):
                self._move(callback, "filename")
            kept.append(callback)
        return kept

    def after_train_begin(self, callbacks: Sequence[Any], keras: Any) -> None:
        """Move ``BackupAndRestore``'s files once it has restored from the chief's backup.

        Every worker must resume at the same epoch with the same weights, so each one
        reads the chief's backup in ``on_train_begin``; after that, a non-chief worker
        writes its backups to its temporary directory, and never deletes the chief's.

        Args:
            callbacks: The callbacks :meth:`apply` returned.
            keras: The Keras module the callbacks come from.
        """
        if self.task.is_chief:
            return
        for callback in callbacks:
            if not isinstance(callback, keras.callbacks.BackupAndRestore):
                continue
            for attr in (
                "_weights_path",
                "_training_metadata_path",
                "_prev_weights_path",
                "_prev_training_metadata_path",
            ):
                if getattr(callback, attr, None) is not None:
                    self._move(callback, attr)
            self._changed.append((callback, "backup_dir", callback.backup_dir))
            callback.backup_dir = self.temp_path("backup")

    def temp_path(self, path: str) -> str:
        """Where a non-chief worker writes what the chief writes at ``path``."""
        if self.tempdir is None:
            kind = self.task.task_type or "worker"
            self.tempdir = tempfile.mkdtemp(prefix=f"tfr_hooks_{kind}{self.task.task_id}_")
        # a directory of its own per path: two callbacks' files of one name never collide
        own = tempfile.mkdtemp(dir=self.tempdir)
        return os.path.join(own, os.path.basename(os.path.normpath(path)) or "out")

    def restore(self) -> None:
        """Put the callbacks' paths back and remove the temporary directory."""
        while self._changed:
            obj, attr, value = self._changed.pop()
            setattr(obj, attr, value)
        if self.tempdir is not None:
            shutil.rmtree(self.tempdir, ignore_errors=True)
            self.tempdir = None

    def _move(self, obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if value is None:
            return
        self._changed.append((obj, attr, value))
        setattr(obj, attr, self.temp_path(os.fspath(value)))


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
    dataset: tf.data.Dataset, shard: str, num_files: int, task: TaskInfo | None = None
) -> tf.data.Dataset:
    """Set how a multi-worker strategy splits a TFRecord dataset among its workers.

    ``"auto"`` shards by file when there are at least as many files as workers (each
    worker reads whole files of its own) and by data otherwise (every worker reads all
    files and keeps its share of each global batch); ``"file"`` insists on files,
    ``"data"`` on data, ``"off"`` leaves the splitting to you. Either way every example
    is read once per epoch by exactly one worker.

    Args:
        dataset: The dataset of batches.
        shard: One of :data:`SHARD_POLICIES`.
        num_files: How many files the dataset reads.
        task: The task of this process (by default :func:`current_task`).

    Returns:
        The dataset with its ``experimental_distribute.auto_shard_policy`` set.

    Raises:
        ValueError: If ``shard`` is unknown, or is ``"file"`` with fewer files than
            workers.
    """
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
    return dataset.with_options(options)


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
