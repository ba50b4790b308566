"""QueueRunnerHook: the one owner of a graph's input queues and their threads for a run.

Starts every runner's threads under the run's ``tf.compat.v1.train.Coordinator`` (the one
the loop gives ``after_create_session``) once the session exists, and joins them within a
grace period on any end (normal, stop request, exception, KeyboardInterrupt).

A normal end is quiet: the threads are told to stop after their current enqueue, a full
queue is drained one element at a time so that a blocked enqueue completes, and a queue
whose threads have all exited is closed *without* cancelling anything, so that the threads
reading from it end on ``OutOfRangeError``. Cancelling pending enqueues
(``close(cancel_pending_enqueues=True)``) aborts their steps with ``CANCELLED``, which
TensorFlow's C++ runtime logs as a warning ("Local rendezvous is aborting with status:
CANCELLED: Enqueue operation was cancelled") even at ``TF_CPP_MIN_LOG_LEVEL=1``; only
``OUT_OF_RANGE`` aborts are not logged. So the hook cancels only when it must: after an
error, when the threads make no progress for a moment while draining (a pipeline that can
never finish its enqueues), and in :meth:`~QueueRunnerHook.cancel`, which closes the queues
from any thread for :class:`~tfr_hooks.StopOnSignal`'s watcher. This is also why the hook
runs its own threads instead of ``QueueRunner.create_threads``: those come with a thread
that cancels the queues as soon as the coordinator is asked to stop.

An exception raised in a queue thread (a corrupt record, say) is raised in the main
thread: as soon as a step notices it, or at the latest in ``end``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import check_positive_number, expected
from tfr_hooks.hooks import Hook

__all__ = ["QueueRunnerHook"]

logger = logging.getLogger(__name__)

#: How long a normal end lets the threads drain without any progress (a thread exiting, a
#: queue drained or closed) before it cancels the pending enqueues instead.
DRAIN_PATIENCE_SECS = 1.0

_DRAIN_TIMEOUT_MS = 2000  # one drain step; only a queue that cannot give an element waits
_DRAIN_POLL_SECS = 0.002

#: Per graph, per queue name: the ``(size, is_closed, dequeue)`` ops a quiet end runs. Made
#: once per graph in ``begin`` (the graph may be finalized later), not in a collection.
_DRAIN_OPS: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any, Any]]] = (
    weakref.WeakKeyDictionary()
)
_DRAIN_OPS_LOCK = threading.Lock()


@dataclass
class _Queue:
    """One queue, the runners that feed it and how many of their threads still run."""

    name: str
    runners: list[Any]
    capacity: int
    drain: tuple[Any, Any, Any] | None
    alive: int = 0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


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
        self._stopping = threading.Event()
        self._queues: list[_Queue] = []

    def begin(self) -> None:
        """Forget the threads of an earlier run; make the ops a quiet end needs."""
        self.threads = []
        self.coord = None
        self._runners = []
        self._session = None
        self._cancelled = False
        self._stopping = threading.Event()
        self._queues = []
        if self._given is not None:
            runners = self._given
        else:
            runners = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        for runner in runners:
            _drain_ops(runner.queue)

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
        queues: dict[str, _Queue] = {}
        for runner in self._runners:
            queue = runner.queue
            if queue.name not in queues:
                queues[queue.name] = _Queue(
                    queue.name,
                    [],
                    _capacity(queue),
                    _DRAIN_OPS.get(session.graph, {}).get(queue.name),
                )
            queues[queue.name].runners.append(runner)
        self._queues = list(queues.values())
        for state in self._queues:
            for runner in state.runners:
                for enqueue_op in runner.enqueue_ops:
                    thread = threading.Thread(
                        target=self._feed,
                        args=(session, state, runner, enqueue_op),
                        name=f"tfr_hooks-queue-{state.name}",
                        daemon=True,
                    )
                    state.alive += 1
                    self.coord.register_thread(thread)
                    self.threads.append(thread)
        for thread in self.threads:
            thread.start()
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
                for state in self._queues:
                    with state.lock:
                        state.closed = True  # cancel_op closes it: never close it again
                for runner in runners:
                    if runner.cancel_op is None:
                        continue
                    try:
                        session.run(runner.cancel_op)
                    except Exception as exc:  # the session may already be closed or broken
                        logger.debug("Closing queue %s: %s", runner.name, exc)
            return True

    def end(self, session: Any) -> None:
        """Stop the threads, unblock them, join them, and raise a thread's error.

        The threads are drained quietly (see the module docstring) unless a thread failed
        or they make no progress for :data:`DRAIN_PATIENCE_SECS`; then the queues are
        closed with their pending enqueues cancelled.
        """
        if self.coord is None:
            return
        coord, threads = self.coord, self.threads
        quiet = not coord.should_stop() and self._drain()
        coord.request_stop()
        if not quiet:
            self.cancel()
        try:
            coord.join(threads, stop_grace_period_secs=self.grace_period_secs)
        finally:
            with self._lock:
                self.coord = None
                self.threads = []
                self._session = None

    def _feed(self, session: Any, state: _Queue, runner: Any, enqueue_op: Any) -> None:
        """One queue thread: run ``enqueue_op`` until told to stop or the queue closes.

        What a ``QueueRunner`` thread does, without its companion that cancels the queue
        when the coordinator stops: the last thread of a queue to see it (or the queue
        before it) closed closes it, gently; an error stops the coordinator and cancels
        the queues, so that neither the step nor another thread stays blocked.
        """
        closed_errors = tuple(runner.queue_closed_exception_types)
        try:
            run = session.make_callable(enqueue_op)
            while not (self._stopping.is_set() or self.coord.should_stop()):
                try:
                    run()
                except closed_errors:
                    break
                except tf.errors.CancelledError:
                    if self._cancelled or self._stopping.is_set() or self.coord.should_stop():
                        break  # cancelled by this hook, or the session closed under a stop
                    raise
        except Exception as exc:
            logger.debug("Queue thread for %s failed: %s", state.name, exc)
            self.coord.request_stop(exc)
            self.cancel()
        finally:
            with state.lock:
                state.alive -= 1
                close = state.alive == 0 and not state.closed
                state.closed = state.closed or close
            if close:
                _run_quietly(session, runner.close_op, f"Closing queue {state.name}")

    def _drain(self) -> bool:
        """Let every thread finish its enqueue and exit, cancelling nothing.

        Returns:
            Whether all threads exited; ``False`` after :data:`DRAIN_PATIENCE_SECS`
            without progress, or if the session fails.
        """
        session = self._session
        self._stopping.set()
        options = tf.compat.v1.RunOptions(timeout_in_ms=_DRAIN_TIMEOUT_MS)
        last_progress = time.monotonic()
        try:
            while True:
                progress, running = False, False
                for state in self._queues:
                    with state.lock:
                        alive, close = state.alive, state.alive == 0 and not state.closed
                        state.closed = state.closed or close
                    if close:  # no thread left to enqueue: the readers get OutOfRangeError
                        session.run(state.runners[0].close_op)
                        progress = True
                    if alive == 0:
                        continue
                    running = True
                    if state.drain is not None and state.capacity > 0:
                        size, is_closed, dequeue = state.drain
                        now_size, now_closed = session.run([size, is_closed], options=options)
                        if now_size >= state.capacity and not now_closed:
                            session.run(dequeue, options=options)  # frees a blocked enqueue
                            progress = True
                if not running:
                    return True
                if progress:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > DRAIN_PATIENCE_SECS:
                    logger.debug("Queue threads made no progress; cancelling their enqueues")
                    return False
                time.sleep(_DRAIN_POLL_SECS)
        except Exception as exc:  # a broken or closed session: cancel as before
            logger.debug("Draining the queues: %s", exc)
            return False

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


def _capacity(queue: Any) -> int:
    """The queue's capacity, or ``-1`` when unbounded or unknown."""
    try:
        return int(queue.queue_ref.op.get_attr("capacity"))
    except (AttributeError, ValueError):
        return -1


def _drain_ops(queue: Any) -> None:
    """Make the ops :meth:`QueueRunnerHook._drain` runs on ``queue``, once per graph."""
    graph = queue.queue_ref.graph
    with _DRAIN_OPS_LOCK:
        ops = _DRAIN_OPS.setdefault(graph, {})
        if queue.name in ops or graph.finalized:
            return
        with (
            graph.as_default(),
            graph.device(None),
            tf.name_scope(f"tfr_hooks_drain/{queue.name}/"),
        ):
            dequeue = tf.nest.flatten(queue.dequeue())[0].op
            ops[queue.name] = (queue.size(), queue.is_closed(), dequeue)


def _run_quietly(session: Any, op: Any, what: str) -> None:
    try:
        session.run(op)
    except Exception as exc:  # the session may already be closed or broken
        logger.debug("%s: %s", what, exc)
