"""Servers of TensorFlow's tf.data service: a dispatcher, its workers, and a local cluster.

The tf.data service (``tf.data.experimental.service``) runs an input pipeline on CPU
workers and streams its elements to the trainers. One dispatcher hands out the work; any
number of workers, on any hosts, register with it and run the pipeline. This module starts
them and checks their addresses:

- :func:`check_service_address` normalizes an address to ``"grpc://HOST:PORT"``;
- :func:`check_dispatcher` asks the address for a dispatcher and fails at once, naming
  the address, when nothing answers (instead of a read that waits);
  :func:`registered_workers` lists the workers it knows, :func:`live_workers` those
  still accepting connections;
- :func:`run_dispatcher` and :func:`run_worker` serve until SIGTERM or SIGINT, as
  ``tfr-hooks data-service dispatcher|worker`` does;
- :class:`LocalService` starts a dispatcher and N workers as local processes on loopback,
  for tests and for one machine whose trainer should not decode its own input.

Only the standard library is imported at module level: TensorFlow is imported by the
servers, and the ``grpc`` package TensorFlow depends on by :func:`check_dispatcher`.

Examples:
    >>> check_service_address("localhost:5050")
    'grpc://localhost:5050'
    >>> with LocalService(workers=2) as service:  # doctest: +SKIP
    ...     dataset = tf.data.Dataset.range(10).apply(
    ...         tf.data.experimental.service.distribute("distributed_epoch", service.address)
    ...     )
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from tfr_hooks.checks import check_non_negative_int, expected

__all__ = [
    "check_service_address",
    "check_dispatcher",
    "registered_workers",
    "live_workers",
    "run_dispatcher",
    "run_worker",
    "LocalService",
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

#: How a server's log line gives its address; :class:`LocalService` waits for it.
_SERVING = re.compile(r"tf\.data service (dispatcher|worker) serving at grpc://(\S+):(\d+)")
_ADDRESS = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d+)$")
#: the RPC :func:`check_dispatcher` calls: answered by dispatchers, not by workers
_GET_VERSION = "/tensorflow.data.DispatcherService/GetVersion"
_GET_WORKERS = "/tensorflow.data.DispatcherService/GetWorkers"
#: the attributes :func:`mark_served` sets on a dataset served by a tf.data service
_SERVED = "_tfr_hooks_service"
_SERVED_EXAMPLES = "_tfr_hooks_service_examples"
#: Seconds a server's ``stop`` may take before its process ends (status 1).
_STOP_SECONDS = 10.0


def check_service_address(service: object, name: str = "service") -> str:
    """Return a tf.data service address as ``"grpc://HOST:PORT"``.

    Args:
        service: ``"grpc://HOST:PORT"`` or ``"HOST:PORT"`` (an IPv6 host in brackets).
        name: The argument's name in the error message.

    Returns:
        The address with its protocol, ``"grpc://HOST:PORT"``.

    Raises:
        TypeError: ``service`` is not a string.
        ValueError: ``service`` is not of that form, or its port is not in 1..65535.

    Examples:
        >>> check_service_address("grpc://10.0.0.5:5050")
        'grpc://10.0.0.5:5050'
    """
    what = 'a tf.data service address, "grpc://HOST:PORT" or "HOST:PORT"'
    if not isinstance(service, str):
        raise TypeError(expected(name, what, service))
    match = _ADDRESS.match(service.strip())
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ValueError(expected(name, what + " with a port in 1..65535", service))
    return f"grpc://{match.group(1)}:{int(match.group(2))}"


def _host_port(service: str) -> tuple[str, int]:
    """The host (without IPv6 brackets) and port of a normalized address."""
    host, _, port = service.removeprefix("grpc://").rpartition(":")
    return host.strip("[]"), int(port)


def check_dispatcher(service: object, timeout: float = 5.0) -> str:
    """Check that a tf.data service dispatcher answers at ``service``, within ``timeout``.

    A TCP connection first, so that a closed port or an unknown host fails at once; then
    the dispatcher's ``GetVersion`` RPC through the ``grpc`` package (a dependency of
    TensorFlow), which a worker or another server does not answer.

    Args:
        service: The dispatcher's address, as :func:`check_service_address` takes it.
        timeout: Seconds to wait for an answer at most.

    Returns:
        The normalized address, ``"grpc://HOST:PORT"``.

    Raises:
        ConnectionError: No dispatcher answers at the address; the message names it.
    """
    address = check_service_address(service)
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        raise ConnectionError(
            f"No tf.data service dispatcher answers at {address}: {error}. Start one with "
            f"`tfr-hooks data-service dispatcher --port {port}`, or check the address."
        ) from error
    import grpc  # type: ignore[import-untyped]  # a dependency of TensorFlow, untyped

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(_GET_VERSION)  # raw bytes: an empty request message
        try:
            call(b"", timeout=max(deadline - time.monotonic(), 0.1))
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            what = "a server that is not a tf.data dispatcher (a worker?)"
            if code is not grpc.StatusCode.UNIMPLEMENTED:
                what = f"no tf.data dispatcher within {timeout:g} s ({code})"
            raise ConnectionError(
                f"No tf.data service dispatcher answers at {address}: {what}. Check the "
                f"address, or start one with `tfr-hooks data-service dispatcher --port {port}`."
            ) from error
    return address


def registered_workers(service: object, timeout: float = 5.0) -> list[str]:
    """The addresses of the workers registered with the dispatcher at ``service``.

    The dispatcher's ``GetWorkers`` RPC. A worker killed without stopping stays listed
    (on TensorFlow 2.21, still after a minute with ``worker_timeout_ms=1000``): see
    :func:`live_workers` for those that still accept connections.

    Args:
        service: The dispatcher's address, as :func:`check_service_address` takes it.
        timeout: Seconds to wait for the answer at most.

    Returns:
        Each worker's ``"HOST:PORT"``, in the dispatcher's order.

    Raises:
        ConnectionError: No dispatcher answers at the address; the message names it.
    """
    address = check_dispatcher(service, timeout)
    import grpc

    host, port = _host_port(address)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        try:
            answer = channel.unary_unary(_GET_WORKERS)(b"", timeout=timeout)
        except grpc.RpcError as error:
            raise ConnectionError(
                f"The tf.data service dispatcher at {address} did not list its workers: {error}"
            ) from error
    # GetWorkersResponse: repeated WorkerInfo workers = 1; WorkerInfo: string address = 1
    return [_field(info, 1).decode() for info in _fields(answer, 1)]


def live_workers(service: object, timeout: float = 2.0) -> list[str]:
    """The registered workers that accept a TCP connection (each within ``timeout``).

    An empty list while the dispatcher answers means that no worker is left to serve:
    a read through the service would wait (TensorFlow 2.21 does not end it).

    Raises:
        ConnectionError: No dispatcher answers at ``service``; the message names it.
    """
    alive = []
    for worker in registered_workers(service, timeout):
        if _accepts(*_host_port(worker), timeout=timeout):
            alive.append(worker)
    return alive


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(message: bytes, number: int) -> list[bytes]:
    """The values of length-delimited field ``number`` of a serialized protocol buffer."""
    found, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        kind = key & 7
        if kind == 0:
            _, at = _varint(message, at)
        elif kind == 2:
            length, at = _varint(message, at)
            if key >> 3 == number:
                found.append(message[at : at + length])
            at += length
        else:  # fixed 64 or 32 bits
            at += 8 if kind == 1 else 4
    return found


def _field(message: bytes, number: int) -> bytes:
    values = _fields(message, number)
    return values[0] if values else b""


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


def _accepts(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class LocalService:
    """A tf.data service dispatcher and N workers, as local processes on loopback.

    Each server runs ``python -m tfr_hooks.cli data-service ...`` in its own process, so
    that its pipeline work runs beside the trainer's, not in its threads; each logs to a
    file in a temporary directory, read for its address and shown when it fails.
    Entering starts them and waits (at most ``timeout`` seconds) until every worker has
    registered with the dispatcher; leaving stops them all, SIGTERM then SIGKILL after
    ``timeout``, so that nothing is left running.

    Args:
        workers: The number of workers (0 for none yet: see :meth:`add_worker`).
        timeout: Seconds to wait for each server to start, and to stop.
        work_dir: The dispatcher's journal directory (fault-tolerant mode), or ``None``.
        worker_timeout_ms: The dispatcher's ``worker_timeout_ms`` (0: TensorFlow's).
        env: Extra environment variables of the servers (e.g. ``CUDA_VISIBLE_DEVICES``).

    Attributes:
        address: The dispatcher's address, ``"grpc://127.0.0.1:PORT"``.
        dispatcher: The dispatcher's process.
        workers: The workers' processes, in start order (a killed one stays listed).

    Examples:
        >>> with LocalService(workers=2) as service:  # doctest: +SKIP
        ...     dataset = tf.data.Dataset.range(100).apply(
        ...         tf.data.experimental.service.distribute(
        ...             processing_mode="distributed_epoch", service=service.address
        ...         )
        ...     )
        ...     sorted(int(x) for x in dataset) == list(range(100))
        True
    """

    def __init__(
        self,
        workers: int = 1,
        *,
        timeout: float = 120.0,
        work_dir: str | os.PathLike[str] | None = None,
        worker_timeout_ms: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self._count = check_non_negative_int(workers, "workers")
        self._timeout = timeout
        self._work_dir = work_dir
        self._worker_timeout_ms = check_non_negative_int(worker_timeout_ms, "worker_timeout_ms")
        self._env = dict(env or {})
        self.address = ""
        self.dispatcher: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._logs: dict[int, Path] = {}
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> LocalService:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the dispatcher and the workers, and wait until each serves.

        Raises:
            RuntimeError: A server exited or did not log its address within ``timeout``;
                the message holds the end of its log. Everything started is stopped.
        """
        self._directory = tempfile.TemporaryDirectory(prefix="tfr_hooks_service_")
        try:
            flags = ["--port", "0"]
            if self._work_dir is not None:
                flags += ["--work-dir", os.fspath(self._work_dir)]
            if self._worker_timeout_ms:
                flags += ["--worker-timeout-ms", str(self._worker_timeout_ms)]
            self.dispatcher = self._spawn("dispatcher", flags)
            port = self._wait_serving(self.dispatcher)
            self.address = f"grpc://127.0.0.1:{port}"
            started = [self._spawn_worker() for _ in range(self._count)]  # side by side
            for process in started:
                self._wait_serving(process)
        except BaseException:
            self.stop()
            raise

    def add_worker(self) -> subprocess.Popen[bytes]:
        """Start one more worker, wait until it serves, and return its process."""
        process = self._spawn_worker()
        self._wait_serving(process)
        return process

    def _spawn_worker(self) -> subprocess.Popen[bytes]:
        process = self._spawn("worker", ["--dispatcher", self.address.removeprefix("grpc://")])
        self.workers.append(process)
        return process

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` (as a lost host would vanish) and reap it."""
        process = self.workers[check_non_negative_int(index, "index")]
        process.kill()
        process.wait(timeout=self._timeout)

    def stop(self) -> None:
        """Stop every server: SIGTERM, then SIGKILL those still running after ``timeout``."""
        processes = [*self.workers, *([self.dispatcher] if self.dispatcher else [])]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + self._timeout
        for process in processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                logger.warning("tf.data service process %d ignored SIGTERM: killed", process.pid)
                process.kill()
                process.wait()
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    def _spawn(self, kind: str, flags: list[str]) -> subprocess.Popen[bytes]:
        assert self._directory is not None
        log = Path(self._directory.name) / f"{kind}-{len(self._logs)}.log"
        command = [sys.executable, "-m", "tfr_hooks.cli", "data-service", kind, *flags]
        env = {**os.environ, **self._env}
        # the servers import this package as the parent does, installed or not
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])]
        )
        with open(log, "wb") as output:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env
            )
        self._logs[process.pid] = log
        return process

    def _wait_serving(self, process: subprocess.Popen[bytes]) -> int:
        """The port ``process`` logged it serves at, once it has (within ``timeout``)."""
        log = self._logs[process.pid]
        deadline = time.monotonic() + self._timeout
        while True:
            text = log.read_text(errors="replace")
            match = _SERVING.search(text)
            if match is not None:
                return int(match.group(3))
            if process.poll() is not None or time.monotonic() > deadline:
                state = (
                    f"exited with status {process.returncode}"
                    if process.poll() is not None
                    else f"did not serve within {self._timeout:g} s"
                )
                raise RuntimeError(
                    f"The tf.data service process {process.args!r} {state}. Its log ends:\n"
                    + "\n".join(text.splitlines()[-20:])
                )
            time.sleep(0.05)


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
