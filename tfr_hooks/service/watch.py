"""Watching reads through a tf.data service, so that a lost service ends a read.

TensorFlow 2.21 never ends a read through the service whose workers are all gone, or whose
dispatcher is gone, or one of whose workers was killed (the others' elements come, the end
of the data never does); no TensorFlow option bounds the wait. The loops read a served
dataset under a :class:`ServiceWatch` (one per address, kept by :class:`ServiceWatches`),
which checks the service while a read is under way and cancels the read when it cannot go
on. Why is a :class:`Reason`: a gone dispatcher or no worker left ends the run with a
``ConnectionError`` naming the address; a read that waited its bound while workers are
alive is a stalled pass (:class:`Stalled`), which the engine ends
(:class:`~tfr_hooks.stalls.StallPolicy`). Graph mode, whose steps cannot be cancelled
one by one, bounds each step with ``timeout_in_ms`` and asks :func:`diagnose` why it
waited.

Which service a dataset reads through is the reader's fact
(:class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts`), or what the dataset's graph shows
(:func:`tfr_hooks.tf_private.service_addresses`): never an attribute on a dataset.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tfr_hooks.checks import expected
from tfr_hooks.service.address import check_service_address, live_workers

__all__ = [
    "Reason",
    "diagnose",
    "check_service_timeout",
    "ServiceWatch",
    "ServiceWatches",
    "Stalled",
]

logger = logging.getLogger(__name__)


class Reason(enum.Enum):
    """Why a read through a tf.data service cannot go on.

    Attributes:
        DISPATCHER_GONE: The dispatcher does not answer.
        NO_WORKER: The dispatcher answers, but no registered worker accepts connections.
        STALLED: The read waited its bound while workers are alive (a lost worker's
            share of the pass, which TensorFlow never ends).
    """

    DISPATCHER_GONE = "dispatcher unreachable"
    NO_WORKER = "no worker left"
    STALLED = "no batch for {bound:g} s while workers are alive"

    def describe(self, bound: float) -> str:
        """The reason as the logs and errors say it, with the bound in seconds."""
        return self.value.format(bound=bound)


def diagnose(service: str, bound: float) -> Reason:
    """Why a read through ``service`` waited ``bound`` seconds (graph mode asks it)."""
    return _problem(service, min(2.0, bound / 4)) or Reason.STALLED


def _problem(service: str, timeout: float) -> Reason | None:
    """:attr:`Reason.DISPATCHER_GONE`, :attr:`Reason.NO_WORKER`, or ``None`` when neither."""
    try:
        if not live_workers(service, timeout=timeout):
            return Reason.NO_WORKER
    except ConnectionError:
        return Reason.DISPATCHER_GONE
    return None


def check_service_timeout(value: object) -> float:
    """Return ``service_timeout`` (seconds, positive) as a float.

    Raises:
        TypeError: It is not a number.
        ValueError: It is not positive.
    """
    what = "a positive number of seconds"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(expected("service_timeout", what, value))
    if not value > 0:
        raise ValueError(expected("service_timeout", what, value))
    return float(value)


class Stalled(Exception):
    """A read through a tf.data service waited its bound while workers were alive.

    Its message names the service and why (``"tf.data service at ADDRESS: REASON"``).
    """


class ServiceWatch:
    """A daemon thread that watches a tf.data service while a read of it is under way.

    TensorFlow 2.21 never ends a read through the service whose workers are all gone,
    or whose dispatcher is gone, or one of whose workers was killed (the others' elements
    come, the end of the data never does); no TensorFlow option bounds the wait. While
    armed (inside :meth:`reading`), the watch checks twice a second that the dispatcher
    answers (:func:`check_dispatcher`) and that a worker is left (:func:`live_workers`),
    and, as the catch-all, that the read has not waited ``bound`` seconds. When one fails
    it records :attr:`reason` and calls ``cancel`` (from its thread), which must end the
    read (a ``CancellationManager``'s ``start_cancel``, a session's close).

    A gone dispatcher or no worker left trips the watch after two checks in a row (about a
    second), so that one slow answer of a loaded machine does not. A read armed with
    ``stall=False`` (a first call, which traces and compiles) is not tripped by the bound.

    Args:
        service: The dispatcher's address.
        bound: Seconds a read may wait at most.
        cancel: Called once, from the watch's thread, when the watch trips.
        interval: Seconds between checks.

    Attributes:
        address: The normalized address, ``"grpc://HOST:PORT"``.
        reason: ``None``, or why the watch tripped: a :class:`Reason`.
    """

    def __init__(
        self,
        service: object,
        bound: float = 60.0,
        cancel: Any = None,
        *,
        interval: float = 0.5,
    ) -> None:
        self.address = check_service_address(service)
        self.bound = check_service_timeout(bound)
        self.cancel = cancel
        self.interval = interval
        self.reason: Reason | None = None
        self._since: float | None = None  # when the read under way began
        self._stall = True  # whether the read under way may stall the bound
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name=f"ServiceWatch {self.address}", daemon=True
        )
        self._thread.start()

    def reading(self, stall: bool = True) -> _Reading:
        """A context manager around one read (a step's call): armed inside it.

        Args:
            stall: Whether waiting ``bound`` trips the watch; ``False`` for a call that
                may first trace and compile its function (which takes what it takes).
        """
        return _Reading(self, stall)

    def message(self) -> str:
        """``"tf.data service at grpc://HOST:PORT: REASON"`` for the error that ends a run."""
        reason = "" if self.reason is None else self.reason.describe(self.bound)
        return f"tf.data service at {self.address}: {reason}"

    def reset(self) -> None:
        """Forget a trip (after a stalled epoch was ended), to watch the next reads."""
        with self._lock:
            self.reason = None

    def close(self) -> None:
        """Stop the watch's thread and join it."""
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        failed = 0
        while not self._done.wait(self.interval):
            with self._lock:
                since, stall = self._since, self._stall
            if since is None or self.reason is not None:
                failed = 0
                continue
            problem = _problem(self.address, min(2.0, self.bound / 4))
            failed = failed + 1 if problem else 0
            if problem is None and stall and time.monotonic() - since > self.bound:
                problem, failed = Reason.STALLED, 2
            if problem is not None and failed >= 2:
                with self._lock:
                    if self._since is None:  # the read ended meanwhile
                        continue
                    self.reason = problem
                logger.warning("%s: cancelling the read", self.message())
                if self.cancel is not None:
                    self.cancel()


class _Reading:
    """Arms a :class:`ServiceWatch` for one read."""

    def __init__(self, watch: ServiceWatch, stall: bool) -> None:
        self.watch, self.stall = watch, stall

    def __enter__(self) -> None:
        with self.watch._lock:
            self.watch._since, self.watch._stall = time.monotonic(), self.stall

    def __exit__(self, *exc: object) -> None:
        with self.watch._lock:
            self.watch._since = None


class ServiceWatches:
    """The watches of a loop's reads through tf.data services, one per address.

    :meth:`watch_of` starts the watch of a service on its first read. A tripped watch
    becomes an error (:meth:`raise_tripped`), or, for a read that waited the bound with
    workers alive, :class:`Stalled`: the runner reports the pass stalled and the engine
    ends it.

    Args:
        bound: The watches' bound, seconds.
        cancel: What ends a read under way (called from a watch's thread).
    """

    def __init__(self, bound: float, cancel: Callable[[], object]) -> None:
        self.bound = check_service_timeout(bound)
        self.cancel = cancel
        self.watches: dict[str, ServiceWatch] = {}

    def watch_of(self, service: str) -> ServiceWatch:
        """The watch of ``service`` (started now if need be)."""
        if service not in self.watches:
            self.watches[service] = ServiceWatch(service, self.bound, self.cancel)
        return self.watches[service]

    def raise_tripped(self, watch: ServiceWatch, error: BaseException) -> None:
        """Raise what ``watch``'s trip means, if it tripped (else return).

        Raises:
            Stalled: The read waited ``bound`` while workers were alive; the watch is
                rearmed for the next pass.
            ConnectionError: The dispatcher is gone or no worker is left: the message
                is ``"tf.data service at grpc://HOST:PORT: REASON"``.
        """
        if watch.reason is None:
            return
        if watch.reason is Reason.STALLED:
            message = watch.message()
            watch.reset()
            raise Stalled(message) from error
        raise ConnectionError(
            f"{watch.message()}. The read through it was cancelled after it could not go "
            "on (TensorFlow would have waited forever); restart the service's servers "
            "and resume the run."
        ) from error

    def close(self) -> None:
        """Stop and join every watch's thread."""
        for watch in self.watches.values():
            watch.close()
        self.watches.clear()
