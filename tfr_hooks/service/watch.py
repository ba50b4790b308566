"""Watching reads through a tf.data service, so that a lost service ends a read.

A dataset read through the service is marked (:func:`mark_served`); the loops watch a
marked dataset's service while they read it (:class:`ServiceWatch`, :class:`ServedReads`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tfr_hooks.checks import check_non_negative_int, expected
from tfr_hooks.service.address import check_service_address, live_workers

__all__ = [
    "mark_served",
    "service_of",
    "served_examples",
    "check_service_timeout",
    "ServiceWatch",
    "ServedReads",
    "Stalled",
    "warn_pass_ended",
]

logger = logging.getLogger(__name__)

#: the attributes :func:`mark_served` sets on a dataset served by a tf.data service
_SERVED = "_tfr_hooks_service"
_SERVED_EXAMPLES = "_tfr_hooks_service_examples"


def mark_served(dataset: Any, service: object, examples: int | None = None) -> Any:
    """Mark ``dataset`` as read through the tf.data service at ``service``; return it.

    The loops watch a marked dataset's service while they read it (see
    :class:`ServiceWatch`): a dispatcher gone, or no worker left, ends the run with an
    error naming the address instead of a read that waits forever.

    Args:
        dataset: A dataset whose elements come from
            ``tf.data.experimental.service.distribute(..., service=service)``.
        service: The dispatcher's address, as :func:`check_service_address` takes it.
        examples: The examples of one epoch, when known: an epoch ended early by a lost
            worker then logs how many were lost.
    """
    # object.__setattr__: a frozen dataclass (the graph readers' Batches) takes it too
    object.__setattr__(dataset, _SERVED, check_service_address(service))
    if examples is not None:
        count = check_non_negative_int(examples, "examples")
        object.__setattr__(dataset, _SERVED_EXAMPLES, count)
    return dataset


def service_of(dataset: Any) -> str | None:
    """The address of the tf.data service ``dataset`` is read through, or ``None``.

    Set by :func:`mark_served` (the readers mark the datasets they build with ``service=``).
    """
    address = getattr(dataset, _SERVED, None)
    return address if isinstance(address, str) else None


def served_examples(dataset: Any) -> int | None:
    """The examples of one epoch :func:`mark_served` was given for ``dataset``, or ``None``."""
    examples = getattr(dataset, _SERVED_EXAMPLES, None)
    return examples if isinstance(examples, int) else None


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
    """A read through a tf.data service waited its bound while workers were alive."""


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
        reason: ``None``, or why the watch tripped: ``"dispatcher unreachable"``,
            ``"no worker left"``, or ``"no batch for B s while workers are alive"``.
    """

    #: :attr:`reason` when the read waited ``bound`` seconds with workers alive
    STALLED = "no batch for {bound:g} s while workers are alive"

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
        self.reason: str | None = None
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

    @property
    def stalled(self) -> bool:
        """Whether the watch tripped on a read that waited ``bound`` with workers alive."""
        return self.reason == self.STALLED.format(bound=self.bound)

    def message(self) -> str:
        """``"tf.data service at grpc://HOST:PORT: REASON"`` for the error that ends a run."""
        return f"tf.data service at {self.address}: {self.reason}"

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
            problem = self._problem()
            failed = failed + 1 if problem else 0
            if problem is None and stall and time.monotonic() - since > self.bound:
                problem, failed = self.STALLED.format(bound=self.bound), 2
            if problem is not None and failed >= 2:
                with self._lock:
                    if self._since is None:  # the read ended meanwhile
                        continue
                    self.reason = problem
                logger.warning("%s: cancelling the read", self.message())
                if self.cancel is not None:
                    self.cancel()

    def _problem(self) -> str | None:
        return _problem(self.address, min(2.0, self.bound / 4))

    @classmethod
    def diagnose(cls, service: str, bound: float) -> str:
        """Why a read through ``service`` waited ``bound`` seconds: a watch's reason."""
        return _problem(service, min(2.0, bound / 4)) or cls.STALLED.format(bound=bound)


def _problem(service: str, timeout: float) -> str | None:
    """``"dispatcher unreachable"``, ``"no worker left"``, or ``None`` when neither."""
    try:
        if not live_workers(service, timeout=timeout):
            return "no worker left"
    except ConnectionError:
        return "dispatcher unreachable"
    return None


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


def warn_pass_ended(message: str, what: str, expected: int | None, read: int) -> None:
    """Log that a pass through a tf.data service ends early, after a lost worker.

    Args:
        message: The watch's ``"tf.data service at ADDRESS: REASON"``.
        what: ``"epoch"`` or ``"validation pass"``.
        expected: The examples of a whole pass, when known: the lost ones are then logged.
        read: The examples the pass read.
    """
    lost = ""
    if expected is not None:
        lost = f": {max(expected - read, 0)} of its {expected} examples were lost ({read} read)"
    logger.warning(
        "%s (a worker lost mid-epoch: TensorFlow never ends the pass); the %s ends "
        "here%s. The next one reads from a new iterator.",
        message,
        what,
        lost,
    )


class ServedReads:
    """The watches of a loop's datasets read through a tf.data service, and their epochs.

    A loop makes one for its training and validation datasets; :meth:`watch_of` starts
    the watch of a served dataset's service on its first read (``None`` for a dataset
    that is not served). A tripped watch becomes an error (:meth:`raise_tripped`), or,
    for a read that waited ``bound`` with workers alive, :class:`Stalled`: the loop ends
    the epoch there (:meth:`end_stalled` logs the examples lost, when the epoch's size is
    known) and starts the next one on a new iterator.

    Args:
        datasets: The training dataset, then the validation one (or ``None``).
        bound: The watches' bound, seconds.
        cancel: What ends a read under way (called from a watch's thread).
    """

    def __init__(self, datasets: list[Any], bound: float, cancel: Any) -> None:
        self.training = datasets[0]
        self.validation = datasets[1] if len(datasets) > 1 else None
        self.bound = check_service_timeout(bound)
        self.cancel = cancel
        self.watches: dict[str, ServiceWatch] = {}
        self.examples = 0  # of the training epoch under way

    def watch_of(self, dataset: Any) -> ServiceWatch | None:
        """The watch of ``dataset``'s service (started now if need be), or ``None``."""
        address = service_of(dataset)
        if address is None:
            return None
        if address not in self.watches:
            self.watches[address] = ServiceWatch(address, self.bound, self.cancel)
        return self.watches[address]

    def raise_tripped(self, watch: ServiceWatch, error: BaseException) -> None:
        """Raise what ``watch``'s trip means, if it tripped (else return).

        Raises:
            Stalled: The read waited ``bound`` while workers were alive.
            ConnectionError: The dispatcher is gone or no worker is left: the message
                is ``"tf.data service at grpc://HOST:PORT: REASON"``.
        """
        if watch.reason is None:
            return
        if watch.stalled:
            raise Stalled(watch.message()) from error
        raise ConnectionError(
            f"{watch.message()}. The read through it was cancelled after it could not go "
            "on (TensorFlow would have waited forever); restart the service's servers "
            "and resume the run."
        ) from error

    def start_epoch(self) -> None:
        """Start counting the examples of a new training epoch."""
        self.examples = 0

    def add(self, dataset: Any, examples: int) -> None:
        """Count ``examples`` read from ``dataset`` (the training epoch's)."""
        if dataset is self.training:
            self.examples += examples

    def end_stalled(self, dataset: Any) -> None:
        """Log that ``dataset``'s pass ends after its read stalled; rearm the watch."""
        watch = self.watch_of(dataset)
        assert watch is not None
        what = "epoch" if dataset is self.training else "validation pass"
        expected_examples = served_examples(dataset) if dataset is self.training else None
        warn_pass_ended(watch.message(), what, expected_examples, self.examples)
        watch.reset()

    def close(self) -> None:
        """Stop and join every watch's thread."""
        for watch in self.watches.values():
            watch.close()
        self.watches.clear()
