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
from types import FrameType
from typing import Any

from tfr_hooks.checks import check_non_negative_int
from tfr_hooks.service.address import (
    _accepts,
    _host_port,
    check_dispatcher,
    check_service_address,
)

__all__ = ["run_dispatcher", "run_worker"]

logger = logging.getLogger(__name__)

#: How a server's log line gives its address; :class:`LocalService` waits for it.
_SERVING = re.compile(r"tf\.data service (dispatcher|worker) serving at grpc://(\S+):(\d+)")
#: Seconds a server's ``stop`` may take before its process ends (status 1).
_STOP_SECONDS = 10.0


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
    _serve(server, "dispatcher", f"grpc://{socket.gethostname()}:{bound}{journal}")


def run_worker(
    dispatcher: object,
    port: int = 0,
    *,
    worker_address: str | None = None,
    heartbeat_interval_ms: int = 0,
) -> None:
    """Serve a tf.data service worker until SIGTERM or SIGINT, then stop it and return.

    The worker registers with the dispatcher (which must answer: see
    :func:`check_dispatcher`), then logs ``tf.data service worker serving at
    grpc://HOST:PORT``. Call it from the main thread.

    Args:
        dispatcher: The dispatcher's address, ``"HOST:PORT"`` or ``"grpc://HOST:PORT"``.
        port: The port to listen on; 0 for a free one (logged).
        worker_address: The host the trainers reach this worker at; by default the
            address of the interface that routes to the dispatcher (``127.0.0.1`` for a
            dispatcher on loopback).
        heartbeat_interval_ms: How often the worker reports to the dispatcher; 0 for
            TensorFlow's default.

    Raises:
        ConnectionError: No dispatcher answers at ``dispatcher``.
    """
    address = check_dispatcher(check_service_address(dispatcher, "dispatcher"))
    check_non_negative_int(port, "port")
    check_non_negative_int(heartbeat_interval_ms, "heartbeat_interval_ms")
    host, dispatcher_port = _host_port(address)
    if worker_address is None:
        worker_address = _route_to(host)
    port = port or _free_port()
    import tensorflow as tf

    service = tf.data.experimental.service
    config = service.WorkerConfig(
        dispatcher_address=f"{host}:{dispatcher_port}",
        worker_address=f"{worker_address}:{port}",
        port=port,
        heartbeat_interval_ms=heartbeat_interval_ms or None,
    )
    server = service.WorkerServer(config)
    _serve(server, "worker", f"grpc://{worker_address}:{port} (dispatcher {address})", address)


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


def _free_port() -> int:
    """A TCP port that was free a moment ago (bound to 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _serve(server: Any, kind: str, where: str, dispatcher: str | None = None) -> None:
    """Log that ``server`` serves, wait for SIGTERM or SIGINT, then stop it.

    A worker whose ``dispatcher`` is gone is not stopped but its process exits (status
    0): TensorFlow's ``stop`` then waits forever, holding the interpreter. Any other
    ``stop`` longer than ``_STOP_SECONDS`` ends the process with a traceback (status 1).
    """
    stop = threading.Event()
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        logger.info("tf.data service %s serving at %s", kind, where)
        while not stop.wait(0.5):
            pass
        logger.info("tf.data service %s stopping on %s", kind, signal.Signals(received[0]).name)
        if dispatcher is not None and not _accepts(*_host_port(dispatcher)):
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
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    logger.info("tf.data service %s stopped", kind)
