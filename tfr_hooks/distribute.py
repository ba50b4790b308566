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

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.cluster import (
    SHARD_POLICIES,
    SHARED_SEED,
    TaskInfo,
    check_shard,
    current_task,
    is_multi_worker,
    loopback_cluster,
    shard_dataset,
    shared_seed,
)
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
