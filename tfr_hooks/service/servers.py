"""The tf.data service servers: a dispatcher and a worker, each serving until a signal.

:func:`run_dispatcher` and :func:`run_worker` serve until SIGTERM or SIGINT, as
``tfr-hooks data-service dispatcher|worker`` does. TensorFlow is imported when a server
starts, not with this module.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import signal
import socket
import threading
import time
from types import FrameType
from typing import Any

from tfr_hooks.checks import check_non_negative_int, expected
from tfr_hooks.service.address import (
    NotADispatcher,
    accepts,
    check_dispatcher,
    check_service_address,
    host_port,
)

__all__ = ["SERVING", "await_dispatcher", "free_port", "run_dispatcher", "run_worker"]

logger = logging.getLogger(__name__)

#: How a server's log line gives its address; :class:`LocalService` waits for it.
SERVING = re.compile(r"tf\.data service (dispatcher|worker) serving at grpc://(\S+):(\d+)")
#: Seconds a server's ``stop`` may take before its process ends (status 1).
_STOP_SECONDS = 10.0
#: A waiting worker checks for its dispatcher every this many seconds, each check
#: bounded by ``_CHECK_SECONDS`` (which also bounds how long a signal may wait), and
#: logs that it still waits every ``_LOG_EVERY`` seconds.
_WAIT_INTERVAL = 1.0
_CHECK_SECONDS = 2.0
_LOG_EVERY = 15.0


def run_dispatcher(
    port: int, work_dir: str | os.PathLike[str] | None = None, *, worker_timeout_ms: int = 0
) -> None:
    """Serve a tf.data service dispatcher until SIGTERM or SIGINT, then stop it and return.

    Logs ``tf.data service dispatcher serving at grpc://HOST:PORT`` once it is up. Call it
    from the main thread (it installs the signal handlers, and restores them on return).

    Args:
        port: The port to listen on; 0 for one the system chooses (logged).
        work_dir: A directory for the dispatcher's journal. When given, the dispatcher
            runs in fault-tolerant mode: restarted with the same ``work_dir`` and port,
            it recovers its datasets and jobs. The journal is not tied to a model
            checkpoint (tensorflow/tensorflow#63079).
        worker_timeout_ms: After how long without a heartbeat a worker is taken as gone
            and its work given to the others; 0 for TensorFlow's default.
    """
    check_non_negative_int(port, "port")
    check_non_negative_int(worker_timeout_ms, "worker_timeout_ms")
    with _StopSignals() as signals:
        import tensorflow as tf

        service = tf.data.experimental.service
        config = service.DispatcherConfig(
            port=port,
            work_dir=None if work_dir is None else os.fspath(work_dir),
            fault_tolerant_mode=work_dir is not None,
            worker_timeout_ms=worker_timeout_ms or None,
        )
        server = service.DispatchServer(config)
        bound = int(server.target.rpartition(":")[2])
        journal = f" (fault tolerant, journal in {os.fspath(work_dir)})" if work_dir else ""
        where = f"grpc://{socket.gethostname()}:{bound}{journal}"
        _serve(server, "dispatcher", where, signals)


def run_worker(
    dispatcher: object,
    port: int = 0,
    *,
    worker_address: str | None = None,
    heartbeat_interval_ms: int = 0,
    wait_timeout: float | None = None,
) -> None:
    """Serve a tf.data service worker until SIGTERM or SIGINT, then stop it and return.

    The worker first waits for its dispatcher, as TensorFlow's ``WorkerServer`` does (in
    a cluster, start order is not guaranteed): it checks every second that a dispatcher
    answers (:func:`~tfr_hooks.service.address.check_dispatcher`), logging that it waits
    once and then every 15 seconds. It then registers with the dispatcher and logs
    ``tf.data service worker serving at grpc://HOST:PORT``. SIGTERM or SIGINT while it
    waits returns at once. Call it from the main thread (it installs the signal handlers,
    and restores them on return).

    Args:
        dispatcher: The dispatcher's address, ``"HOST:PORT"`` or ``"grpc://HOST:PORT"``.
        port: The port to listen on; 0 for a free one (logged).
        worker_address: The host the trainers reach this worker at; by default the
            address of the interface that routes to the dispatcher (``127.0.0.1`` for a
            dispatcher on loopback).
        heartbeat_interval_ms: How often the worker reports to the dispatcher; 0 for
            TensorFlow's default.
        wait_timeout: Seconds to wait for the dispatcher at most; ``None`` (the default)
            waits until one answers, 0 checks once.

    Raises:
        ConnectionError: No dispatcher answered at ``dispatcher`` within
            ``wait_timeout``, or a server that is not a dispatcher answers there (at
            once: no dispatcher can come up on a port another server holds).
    """
    address = check_service_address(dispatcher, "dispatcher")
    check_non_negative_int(port, "port")
    check_non_negative_int(heartbeat_interval_ms, "heartbeat_interval_ms")
    wait_timeout = _check_wait_timeout(wait_timeout)
    with _StopSignals() as signals:
        if not _wait_for_dispatcher(address, wait_timeout, signals):
            return
        host, dispatcher_port = host_port(address)
        if worker_address is None:
            worker_address = _route_to(host)
        port = port or free_port()
        import tensorflow as tf

        service = tf.data.experimental.service
        config = service.WorkerConfig(
            dispatcher_address=f"{host}:{dispatcher_port}",
            worker_address=f"{worker_address}:{port}",
            port=port,
            heartbeat_interval_ms=heartbeat_interval_ms or None,
        )
        server = service.WorkerServer(config)
        where = f"grpc://{worker_address}:{port} (dispatcher {address})"
        _serve(server, "worker", where, signals, address)


def await_dispatcher(dispatcher: object, wait_timeout: float | None) -> str | None:
    """Wait for a dispatcher as :func:`run_worker` does, before TensorFlow is imported.

    The command line waits with this, so that a worker waiting costs no TensorFlow
    import, and a wait that ends in an error ends before it.

    Returns:
        The dispatcher's normalized address, or ``None`` when SIGTERM or SIGINT came
        first.

    Raises:
        ConnectionError: As :func:`run_worker`.
    """
    address = check_service_address(dispatcher, "dispatcher")
    wait_timeout = _check_wait_timeout(wait_timeout)
    with _StopSignals() as signals:
        return address if _wait_for_dispatcher(address, wait_timeout, signals) else None


def _check_wait_timeout(value: object) -> float | None:
    """``wait_timeout``: ``None`` or a number of seconds, not negative."""
    what = "None (wait until a dispatcher answers) or a number of seconds >= 0"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(expected("wait_timeout", what, value))
    if not value >= 0:  # NaN too
        raise ValueError(expected("wait_timeout", what, value))
    return float(value)


def _wait_for_dispatcher(address: str, wait_timeout: float | None, signals: _StopSignals) -> bool:
    """Check every ``_WAIT_INTERVAL`` s that a dispatcher answers at ``address``.

    Returns:
        ``True`` once one answers, ``False`` when SIGTERM or SIGINT came first.

    Raises:
        ConnectionError: None answered within ``wait_timeout`` seconds, or a server that
            is not a dispatcher answers (at once).
    """
    started = time.monotonic()
    deadline = None if wait_timeout is None else started + wait_timeout
    logged = None  # when the wait was last logged
    while True:
        try:
            check_dispatcher(address, timeout=_CHECK_SECONDS)
        except NotADispatcher:
            raise
        except ConnectionError as error:
            reason = str(error.__cause__) if isinstance(error.__cause__, OSError) else str(error)
        else:
            if logged is not None:
                logger.info(
                    "tf.data service worker: the dispatcher at %s answers after %.0f s",
                    address,
                    time.monotonic() - started,
                )
            return True
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise ConnectionError(
                f"No tf.data service dispatcher answered at {address} within the "
                f"{wait_timeout:g} s the worker waits for one (wait_timeout, --wait-timeout "
                f"on the command line); the last try: {reason}"
            )
        if logged is None:
            bound = "until one answers" if wait_timeout is None else f"{wait_timeout:g} s at most"
            logger.info(
                "tf.data service worker: waiting for a dispatcher at %s (%s), %s; "
                "SIGTERM or Ctrl-C ends the wait",
                address,
                reason,
                bound,
            )
            logged = now
        elif now - logged >= _LOG_EVERY:
            logger.info(
                "tf.data service worker: still waiting for a dispatcher at %s after %.0f s (%s)",
                address,
                now - started,
                reason,
            )
            logged = now
        pause = _WAIT_INTERVAL if deadline is None else min(_WAIT_INTERVAL, deadline - now)
        if signals.stop.wait(pause):
            logger.info(
                "tf.data service worker stopping on %s, before a dispatcher answered at %s",
                signals.name,
                address,
            )
            return False


def _route_to(host: str) -> str:
    """The local IP address of the interface that routes to ``host``, or the host name.

    A UDP socket's ``connect`` picks a route without sending anything.
    """
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def free_port() -> int:
    """A TCP port that was free a moment ago (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


class _StopSignals:
    """Installs SIGTERM and SIGINT handlers that set :attr:`stop`; restores them on exit.

    Attributes:
        stop: Set by the first SIGTERM or SIGINT.
        name: The first signal's name (``"SIGTERM"``), once one came.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.name = ""
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.name = self.name or signal.Signals(signum).name
        self.stop.set()

    def __enter__(self) -> _StopSignals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _serve(
    server: Any, kind: str, where: str, signals: _StopSignals, dispatcher: str | None = None
) -> None:
    """Log that ``server`` serves, wait for SIGTERM or SIGINT (``signals``), then stop it.

    A worker whose ``dispatcher`` is gone is not stopped but its process exits (status
    0): TensorFlow's ``stop`` then waits forever, holding the interpreter. Any other
    ``stop`` longer than ``_STOP_SECONDS`` ends the process with a traceback (status 1).
    """
    logger.info("tf.data service %s serving at %s", kind, where)
    while not signals.stop.wait(0.5):
        pass
    logger.info("tf.data service %s stopping on %s", kind, signals.name)
    if dispatcher is not None and not accepts(*host_port(dispatcher)):
        logger.warning(
            "tf.data service %s: its dispatcher %s is gone, and TensorFlow's stop would "
            "wait for it forever: exiting the process without it",
            kind,
            dispatcher,
        )
        logging.shutdown()
        os._exit(0)
    # a thread of C, which needs no interpreter lock, ends a stop that hangs
    faulthandler.dump_traceback_later(_STOP_SECONDS, exit=True)
    try:
        server.stop()
    finally:
        faulthandler.cancel_dump_traceback_later()
    logger.info("tf.data service %s stopped", kind)
