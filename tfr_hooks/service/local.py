"""A local tf.data service: a dispatcher and N workers as processes on loopback.

:class:`LocalService` starts each server as ``python -m tfr_hooks.cli data-service ...``,
for tests and for one machine whose trainer should not decode its own input.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from tfr_hooks.checks import check_non_negative_int
from tfr_hooks.service.servers import SERVING

__all__ = ["LocalService"]

logger = logging.getLogger(__name__)


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
            [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])]
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
            match = SERVING.search(text)
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
