"""StopOnSignal: Ctrl-C (SIGINT) and SIGTERM end a run gracefully, within a bounded time.

The first signal asks the loop to stop after the current step. The loop then closes the
epoch as usual (``epoch_end`` runs, so checkpoint hooks and Keras' ``ModelCheckpoint``
write a final checkpoint), and every hook's ``end`` runs (TensorBoard writers flush and
close, queue threads are joined). A second signal raises ``KeyboardInterrupt`` at once;
the loop still calls every hook's ``end``, so threads are joined, but the epoch is not
closed.

Why a watcher thread: Python runs signal handlers in the main thread, between bytecodes.
A ``session.run`` blocked in C++ on an empty input queue (a stalled reader, a source that
produces nothing) never returns to Python, so the handler would never run and the signal
would be lost for as long as the queue stays empty. While it is active, this hook points
``signal.set_wakeup_fd`` at a pipe that a small watcher thread reads: the C-level signal
handler writes the signal number there even while the main thread is blocked. When the
main thread has not handled the signal within ``unblock_after_secs`` (right away for the
second signal), the watcher asks the loop to cancel its input
(:meth:`~tfr_hooks.LoopState.cancel_input`). The hooks that own blocking input go
first: :class:`~tfr_hooks.QueueRunnerHook` closes its queues
(``close(cancel_pending_enqueues=True)``), the blocked dequeue fails with
``OutOfRangeError``, which the loop treats as the end of the data: the epoch closes and
the run ends. Otherwise the loop's runner ends the read of the step under way (a
``FunctionLoop`` call is cancelled, a ``SessionLoop``'s session is closed), whether the
read stalled or is only slow, and the run raises ``KeyboardInterrupt`` naming the
signal after every hook's ``end`` ran: a process stopped so exits non-zero. A step
cancelled so may have applied some of its steps (a multi-step call) before the read that
blocked; the checkpoint of a resumed run is the last one written before it.

Handlers are installed only when the loop runs in the main thread, only for signals that
are not ignored (``SIG_IGN``, as under ``nohup``), and the previous handlers and wakeup fd
are restored when the run ends. Bytes meant for a previous wakeup fd (asyncio's, for
example) are forwarded to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from tfr_hooks.checks import check_bool, check_positive_number, expected
from tfr_hooks.hooks import Hook, capabilities_of

__all__ = ["StopOnSignal", "DEFAULT_SIGNALS", "with_signal_hook"]

logger = logging.getLogger(__name__)

#: The signals :class:`StopOnSignal` handles by default.
DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

_QUIT = b"\0"  # no signal has number 0: tells the watcher to exit
_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopOnSignal(Hook):
    """Stop a run gracefully on SIGINT/SIGTERM; abort it on a second signal.

    ``SessionLoop`` (and ``FunctionLoop``) add one by default (``handle_signals=True``).

    Args:
        signals: The signals to handle (``signal.Signals`` or their numbers); by default
            SIGINT and SIGTERM.
        unblock_after_secs: How long the main thread may take to handle the first signal
            before the watcher thread cancels the input (closes the graph's input queues,
            or ends the read of the step under way) to unblock a
            ``session.run`` stuck on an empty queue.

    Raises:
        TypeError: If ``signals`` is not a sequence of signal numbers.
        ValueError: If a signal cannot be caught (SIGKILL, SIGSTOP), ``signals`` is
            empty, or ``unblock_after_secs`` is not a positive number.

    Examples:
        >>> loop = SessionLoop(train_op, fetches, hooks=[StopOnSignal()],
        ...                    handle_signals=False)  # doctest: +SKIP
        >>> loop.run(epochs=100)  # doctest: +SKIP
    """

    def __init__(
        self,
        signals: Sequence[int] = DEFAULT_SIGNALS,
        *,
        unblock_after_secs: float = 2.0,
    ) -> None:
        numbers = "a sequence of signal numbers such as (signal.SIGINT, signal.SIGTERM)"
        if isinstance(signals, (str, bytes, int)) or not isinstance(signals, Sequence):
            raise TypeError(expected("signals", numbers, signals))
        if not signals:
            raise ValueError(expected("signals", "a sequence naming at least one signal", signals))
        valid = {s.value for s in signal.Signals}
        for sig in signals:
            if isinstance(sig, bool) or not isinstance(sig, int) or int(sig) not in valid:
                raise TypeError(expected("signals", numbers, signals))
            if sig in _UNCATCHABLE:
                raise ValueError(
                    expected(
                        "signals", "signals that can be caught (not SIGKILL or SIGSTOP)", signals
                    )
                )
        check_positive_number(unblock_after_secs, "unblock_after_secs")
        self.signals = tuple(signal.Signals(int(s)) for s in signals)
        self.unblock_after_secs = float(unblock_after_secs)
        self._reset()

    def _reset(self) -> None:
        self.received: list[str] = []  # names of the signals handled in this run
        self._previous: dict[int, Any] = {}
        self._old_wakeup_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._cancelled_input = False
        self._cancelled_read = False  # whether the watcher ended a blocked step's read
        self._lock = threading.Lock()
        # signals delivered (bytes read from the wakeup pipe), and how many of them the
        # handler has accounted for; both under _count_lock
        self._count_lock = threading.RLock()  # a handler may interrupt itself
        self._wanted = {int(s) for s in self.signals}
        self._seen = 0
        self._handled_upto = 0
        self._quit = False
        self._aborting = ""  # the signal that aborted the run, if one did

    @property
    def active(self) -> bool:
        """Whether the handlers are installed (between ``begin`` and ``end``)."""
        return bool(self._previous)

    # -- lifecycle -------------------------------------------------------------------

    def begin(self) -> None:
        """Install the handlers (main thread only), and the watcher when it can help.

        The watcher starts only when the loop has input that it can cancel
        (``loop.input_cancels``: the queues of a :class:`~tfr_hooks.QueueRunnerHook`,
        the read of a loop's step).
        """
        self._uninstall()
        self._reset()
        if threading.current_thread() is not threading.main_thread():
            logger.debug("Not in the main thread: signals are left to their handlers.")
            return
        for sig in self.signals:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue  # the user (or nohup) asked to ignore it: keep it that way
            signal.signal(sig, self._handle)
            self._previous[sig] = previous
        if not self._previous:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        try:
            self._old_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # pragma: no cover - main thread checked above
            self._old_wakeup_fd = -1
        loop = self.attached_loop
        if loop is None or not loop.input_cancels:
            return  # nothing a watcher could unblock; the handler still counts from the pipe
        self._watcher = threading.Thread(
            target=self._watch, args=(read_fd,), name="tfr_hooks-signal-watcher", daemon=True
        )
        self._watcher.start()

    def end(self, session: Any) -> None:
        """Restore the previous handlers and wakeup fd; stop and join the watcher."""
        self._uninstall()

    def translate_error(self, error: BaseException) -> BaseException | None:
        """After an abort, the error is the ``KeyboardInterrupt``, whatever wrapped it.

        The interrupt is raised wherever the main thread is when the handler runs; code
        in between may turn it into another exception (pybind11, converting a
        TensorFlow error at that moment, raises a ``RuntimeError`` about the mismatch).
        """
        if self._aborting and not isinstance(error, KeyboardInterrupt):
            return KeyboardInterrupt(f"{self._aborting} received twice: training aborted")
        if self._cancelled_read and not isinstance(error, KeyboardInterrupt):
            name = self.received[0] if self.received else "A signal"
            return KeyboardInterrupt(
                f"{name} received while a step was blocked reading its input: its read was "
                f"cancelled after {self.unblock_after_secs:g} s (unblock_after_secs) and "
                "training stopped"
            )
        return None

    # -- the handler (main thread) and the watcher (its own thread) -------------------

    def _handle(self, signum: int, frame: Any) -> None:
        # Python runs a handler once for several deliveries of a signal that arrive
        # before it can run (a blocked step): count deliveries from the wakeup pipe.
        name = _signal_name(signum)
        self.received.append(name)
        with self._count_lock:
            self._drain()
            count = max(len(self.received), self._seen)
            self._handled_upto = max(self._handled_upto, self._seen)
        loop = self.attached_loop
        if count == 1 and loop is not None:
            logger.warning(
                "%s received: training stops after the current step; the epoch is closed "
                "(checkpoints, logs). Send it again to abort at once.",
                name,
            )
            loop.request_stop(f"{name} received")
            return
        logger.warning("%s received again: aborting training.", name)
        self._aborting = name
        raise KeyboardInterrupt(f"{name} received twice: training aborted")

    def _drain(self) -> int:
        """Read the wakeup pipe (non-blocking; under ``_count_lock``); count our signals."""
        if self._pipe is None:
            return 0
        found = 0
        while True:
            try:
                data = os.read(self._pipe[0], 256)
            except OSError:  # BlockingIOError when empty, or closed
                break
            if not data:
                break
            self._forward(data.replace(_QUIT, b""))
            for byte in data:
                if byte == 0:
                    self._quit = True
                elif byte in self._wanted:
                    found += 1
        self._seen += found
        return found

    def _watch(self, read_fd: int) -> None:
        deadline: float | None = None
        while not self._quit:
            wait = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
            try:
                ready, _, _ = select.select([read_fd], [], [], wait)
            except (OSError, ValueError):
                return
            if ready:
                with self._count_lock:
                    found = self._drain()
                    seen = self._seen
                if found:
                    delay = self.unblock_after_secs if seen == 1 else 0.1
                    due = time.monotonic() + delay
                    deadline = due if deadline is None else min(deadline, due)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                deadline = None
                with self._count_lock:
                    pending, seen = self._handled_upto < self._seen, self._seen
                if pending:
                    self._close_input_queues(seen)

    def _forward(self, data: bytes) -> None:
        if data and self._old_wakeup_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self._old_wakeup_fd, data)

    def _close_input_queues(self, seen: int) -> None:
        """Unblock a step waiting on input: the loop's input cancels (watcher thread)."""
        with self._lock:
            if self._cancelled_input:
                return
            self._cancelled_input = True
        loop = self.attached_loop
        if loop is None:
            return
        loop.request_stop("a signal arrived while a step was blocked")
        logger.warning(
            "The main thread has not handled %d signal(s) within %g s: a step seems blocked "
            "on its input. Cancelling its read so that training can stop.",
            seen,
            self.unblock_after_secs,
        )
        self._cancelled_read = loop.cancel_input()

    def _uninstall(self) -> None:
        """Undo :meth:`begin`; safe to call when nothing was installed."""
        if not self._previous and self._pipe is None:
            return
        if threading.current_thread() is threading.main_thread():
            if self._pipe is not None:
                with contextlib.suppress(ValueError, OSError):
                    signal.set_wakeup_fd(self._old_wakeup_fd)
            for sig, previous in self._previous.items():
                with contextlib.suppress(ValueError, OSError, TypeError):
                    signal.signal(sig, previous)
        self._previous = {}
        if self._pipe is not None:
            read_fd, write_fd = self._pipe
            self._quit = True
            with contextlib.suppress(OSError):
                os.write(write_fd, _QUIT)
            if self._watcher is not None:
                self._watcher.join(timeout=10.0)
                if self._watcher.is_alive():  # pragma: no cover - it only waits on the pipe
                    logger.error("The signal watcher thread did not stop")
            for fd in (read_fd, write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None
        self._watcher = None


def with_signal_hook(hooks: list[Any], handle_signals: object) -> list[Any]:
    """The loops' ``handle_signals`` argument: append a :class:`StopOnSignal` if asked.

    Args:
        hooks: The user's hooks (already checked).
        handle_signals: Whether to handle SIGINT/SIGTERM; a hook list that has a
            :class:`StopOnSignal` of its own is left as it is. A signal that a hook
            handles itself (its ``owns_signals``, such as
            :class:`~tfr_hooks.PreemptionCheckpoint`'s SIGTERM) is left to that hook.

    Returns:
        The hooks, with a :class:`StopOnSignal` last when one was added.

    Raises:
        TypeError: If ``handle_signals`` is not a bool.
        ValueError: If the hooks' own :class:`StopOnSignal` handles a signal that
            another hook owns.
    """
    check_bool(handle_signals, "handle_signals")
    owned = {int(sig): type(h).__name__ for h in hooks for sig in capabilities_of(h).owns_signals}
    for hook in hooks:
        if not isinstance(hook, StopOnSignal):
            continue
        for sig in hook.signals:
            if int(sig) in owned:
                raise ValueError(
                    f"Expected the StopOnSignal in `hooks` to leave {sig.name} to "
                    f"{owned[int(sig)]}, which handles it itself. Received: "
                    f"StopOnSignal(signals={[s.name for s in hook.signals]})"
                )
    if handle_signals and not any(isinstance(h, StopOnSignal) for h in hooks):
        left = [sig for sig in DEFAULT_SIGNALS if int(sig) not in owned]
        return [*hooks, StopOnSignal(left)] if left else list(hooks)
    return hooks
