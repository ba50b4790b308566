"""Who this process is in a cluster: its task, from the strategy or from ``TF_CONFIG``.

A core module that every layer may import (the TFRecord readers, to split the data; the
hooks and both loops, to know who writes the run's files), so it knows no hooks, no
loops and no files, and imports TensorFlow only where a function needs it: a launcher
(``--workers N``, the benchmark's parent) can read ``TF_CONFIG`` without paying for
TensorFlow's import.

* :class:`TaskInfo`: a task's type, index, worker count and whether it is the chief.
* :func:`current_task`: this process's task, from a multi-worker strategy's cluster
  resolver or from ``TF_CONFIG``.
* :func:`is_multi_worker`: whether a strategy spans several worker processes.

:mod:`tfr_hooks.tf2.distribute` makes :func:`current_task` and :class:`TaskInfo` public.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["TaskInfo", "current_task", "is_multi_worker"]


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
        """``/job:<type>/replica:0/task:<id>``, as TensorFlow's device names spell the task.

        The spelling of :attr:`tfr_hooks.distribute.WorkerLostError.task` too; ``"local"``
        outside a cluster.
        """
        if self.task_type is None:
            return "local"
        return f"/job:{self.task_type}/replica:0/task:{self.task_id}"


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

    Raises:
        ValueError: If ``TF_CONFIG`` decides and is not valid JSON of a cluster.
    """
    if strategy is None and model is not None:
        strategy = getattr(model, "distribute_strategy", None)
    if strategy is None:
        import tensorflow as tf  # here, not at the top: a launcher only reads TF_CONFIG

        if tf.distribute.has_strategy():
            strategy = tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is not None and task_type is not None:
        cluster = resolver.cluster_spec().as_dict()
        return _task_from(cluster, task_type, int(getattr(resolver, "task_id", 0) or 0))
    return _from_tf_config()


def is_multi_worker(strategy: Any) -> bool:
    """Whether ``strategy`` spans more than one worker process."""
    from tfr_hooks.tf_private import in_multi_worker_mode

    return in_multi_worker_mode(strategy)
