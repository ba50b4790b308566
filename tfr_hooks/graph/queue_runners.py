"""QueueRunnerHook: the one owner of a graph's input queues and their threads for a run.

Starts every runner under the run's ``tf.compat.v1.train.Coordinator`` (the one the loop
gives ``after_create_session``) once the session exists; on any end (normal, stop request,
exception, KeyboardInterrupt) requests a stop, closes the queues with pending enqueues
cancelled so that no thread stays blocked, and joins the threads within a grace period.
Its :meth:`~QueueRunnerHook.cancel` closes the queues from any thread, for
:class:`~tfr_hooks.StopOnSignal`'s watcher. An exception raised in a queue thread (a
corrupt record, say) is raised in the main thread: as soon as a step notices it, or at the
latest in ``end``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import check_positive_number, expected
from tfr_hooks.hooks import Hook

__all__ = ["QueueRunnerHook"]

logger = logging.getLogger(__name__)


class QueueRunnerHook(Hook):
    """Start, stop and join queue-runner threads; surface their errors.

    Args:
        queue_runners: The runners to start; by default every runner in the graph's
            ``QUEUE_RUNNERS`` collection at ``begin``.
        grace_period_secs: How long ``end`` waits for the threads to exit after closing
            the queues, before it gives up with a ``RuntimeError`` naming them.

    Examples:
        >>> loop = SessionLoop(train_op, hooks=[QueueRunnerHook()])  # doctest: +SKIP

        ``SessionLoop`` adds one by itself when the graph has queue runners.
    """

    requires_session = True

    def __init__(
        self,
        queue_runners: Sequence[Any] | None = None,
        grace_period_secs: float = 10.0,
    ) -> None:
        if queue_runners is not None:
            for i, runner in enumerate(queue_runners):
                if not isinstance(runner, tf.compat.v1.train.QueueRunner):
                    raise TypeError(
                        expected(f"queue_runners[{i}]", "a tf.compat.v1.train.QueueRunner", runner)
                    )
        check_positive_number(grace_period_secs, "grace_period_secs")
        self._given = list(queue_runners) if queue_runners is not None else None
        self.grace_period_secs = float(grace_period_secs)
        self.coord: Any = None
        self.threads: list[threading.Thread] = []
        self._runners: list[Any] = []
        self._session: Any = None
        self._lock = threading.Lock()
        self._cancelled = False

    def begin(self) -> None:
        """Forget the threads of an earlier run."""
        self.threads = []
        self.coord = None
        self._runners = []
        self._session = None
        self._cancelled = False

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Start every runner's threads under the run's coordinator ``coord``.

        The runners are the given ones, or those of the session's graph (not the default
        graph, which is per thread). Without a coordinator (a caller that has none) the
        hook makes one.
        """
        if self._given is not None:
            self._runners = list(self._given)
        else:
            key = tf.compat.v1.GraphKeys.QUEUE_RUNNERS
            self._runners = list(session.graph.get_collection(key))
        # a Coordinator stops cleanly on OutOfRangeError by default: queues closing at the
        # end of num_epochs are not errors
        self.coord = coord if coord is not None else tf.compat.v1.train.Coordinator()
        self._session = session
        for runner in self._runners:
            self.threads.extend(
                runner.create_threads(session, coord=self.coord, daemon=True, start=True)
            )
        logger.debug("Started %d queue-runner threads", len(self.threads))

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Raise a queue thread's error in the main thread as soon as there is one."""
        self._raise_thread_error()

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Refuse to close an epoch that ended because a queue thread failed."""
        self._raise_thread_error()

    def translate_error(self, error: BaseException) -> BaseException | None:
        """A dequeue that failed because a thread died stands for that thread's error."""
        if self.coord is not None and isinstance(error, tf.errors.OutOfRangeError):
            return _thread_error(self.coord)
        return None

    def cancel(self) -> bool:
        """Close the queues, pending enqueues cancelled; safe from any thread, once a run.

        A step blocked on an empty queue then fails with ``OutOfRangeError``, which the
        loop takes for the end of the data. :class:`~tfr_hooks.StopOnSignal`'s watcher
        calls it when a signal finds the main thread blocked.

        Returns:
            Whether there were queues to close.
        """
        with self._lock:
            session, runners = self._session, self._runners
            if session is None or not runners:
                return False
            if not self._cancelled:
                self._cancelled = True
                for runner in runners:
                    if runner.cancel_op is None:
                        continue
                    try:
                        session.run(runner.cancel_op)
                    except Exception as exc:  # the session may already be closed or broken
                        logger.debug("Closing queue %s: %s", runner.name, exc)
            return True

    def end(self, session: Any) -> None:
        """Stop the threads, unblock them, join them, and raise a thread's error."""
        if self.coord is None:
            return
        coord, threads = self.coord, self.threads
        coord.request_stop()
        self.cancel()
        try:
            coord.join(threads, stop_grace_period_secs=self.grace_period_secs)
        finally:
            with self._lock:
                self.coord = None
                self.threads = []
                self._session = None

    def _raise_thread_error(self) -> None:
        if self.coord is not None:
            error = _thread_error(self.coord)
            if error is not None:
                raise error


def _thread_error(coord: Any) -> BaseException | None:
    """The exception a queue thread reported to ``coord``, if any (not a clean stop)."""
    if not coord.should_stop():
        return None
    try:
        coord.raise_requested_exception()
    except Exception as exc:
        return exc
    return None
