"""Multi-worker training: who this process is, and the errors a lost worker causes.

The public names are what a user of a ``tf.distribute.MultiWorkerMirroredStrategy``
cluster (or a graph-mode ``tf.compat.v1.train.Server`` cluster) needs:

* :func:`current_task`: this process's task (a :class:`TaskInfo`: type, index, chief or
  not, worker count), from the strategy's cluster resolver or from ``TF_CONFIG``.
* :class:`WorkerLostError`: what a run raises when a worker of the cluster went away,
  naming it; :class:`LostWorkerHook` turns the errors into it (``FunctionLoop`` adds one
  by itself under a multi-worker strategy).

The rest serves the package's loops: :func:`global_metric_results` (a Keras 3 model's
metric results over every replica of every worker) and :func:`explain_lost_worker`. The
task identity lives in the core module :mod:`tfr_hooks.task` (which the readers use
too), and is re-exported here. The sharding policy of :func:`tfr_hooks.tfrecord.dataset` lives in
:mod:`tfr_hooks.tfrecord.pipelines.sharding`, with ``loopback_cluster`` (``TF_CONFIG`` values for N
workers on free ``127.0.0.1`` ports, for tests and launchers).

TensorFlow's cluster ports take unauthenticated gRPC: bind them on loopback or on a
private network only, never on a public address.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import tensorflow as tf

from tfr_hooks.hooks import Hook
from tfr_hooks.task import TaskInfo, current_task

__all__ = ["WorkerLostError", "LostWorkerHook", "TaskInfo", "current_task"]

logger = logging.getLogger(__name__)


class WorkerLostError(RuntimeError):
    """A worker of the cluster went away (killed, crashed, its host lost) during training.

    Attributes:
        task: The lost task as TensorFlow's device names spell it
            (``/job:worker/replica:0/task:1``, whichever spelling the error used), or
            ``None`` when the error did not say.
    """

    def __init__(self, message: str, task: str | None = None) -> None:
        super().__init__(message)
        self.task = task


_TASK = re.compile(r"/job:([A-Za-z_]+)(?:/replica:(\d+))?/task:(\d+)")
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
    # one spelling, that of TensorFlow's device names, whichever part of TensorFlow
    # reported the task (gRPC names /job:worker/replica:0/task:1, others /job:worker/task:1)
    named = (
        f"/job:{job}/replica:{replica or 0}/task:{index}"
        for job, replica, index in _TASK.findall(text)
    )
    tasks = [t for t in named if t != own_name]
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
