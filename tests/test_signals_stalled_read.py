"""SIGTERM during a read that never returns ends the run (issue 36, item 2).

A real training process reads through a real tf.data service (:class:`LocalService` on
loopback); the test kills one of its two workers after a few steps, so the epoch's end
never comes (TensorFlow 2.21 never ends a lost worker's share) and the step blocks in
C++, where Python's signal handler cannot run. ``service_timeout`` is 10 minutes: only
the signal can end the run. The loop's signal watcher cancels the read within its grace
(``unblock_after_secs``, 2 s): every hook's ``end`` runs, and the process exits non-zero.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tfr_hooks import tfrecord
from tfr_hooks.service.local import LocalService

SCRIPT = Path(__file__).parent / "_fault_scripts" / "stalled_read.py"
START = 240  # the child imports TensorFlow on two shared cores
STOP = 30  # the bound on ending after SIGTERM: a hang detector, not a speed requirement

pytestmark = [
    pytest.mark.slow,
    pytest.mark.data_service,
    pytest.mark.timeout(3 * START),
    pytest.mark.usefixtures("default_signal_handlers"),
]


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Lines:
    """The stdout lines of a process, read by one thread, waited for with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the process closed its stdout

    def wait_for(self, prefix: str, timeout: float) -> str:
        """The next line starting with ``prefix``; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout} s") from None
            if line.startswith(prefix):
                return line
            if not line:
                raise AssertionError(f"the process exited before {prefix!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {prefix!r} line within {timeout} s")


@pytest.fixture(scope="module")
def service() -> Iterator[LocalService]:
    """One service for both loops' runs: each kills a worker of its own (0, then 1)."""
    with LocalService(workers=3, timeout=START, worker_timeout_ms=1000) as local:
        yield local


@pytest.mark.parametrize(("mode", "victim"), [("function", 0), ("session", 1)])
def test_sigterm_ends_a_run_whose_read_stalled(
    mode: str, victim: int, service: LocalService, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    tfrecord.write({"x": np.arange(4_000, dtype=np.int64)}, data, shards=8)
    stderr = tmp_path / "stderr"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), mode, service.address, str(data)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            preexec_fn=_default_signals,
        )
    lines = Lines(proc)
    try:
        lines.wait_for("READY", START)
        service.kill_worker(victim)  # its share of the epoch never ends: the read stalls
        time.sleep(6)  # the other workers' shares read, the step blocked for seconds
        assert proc.poll() is None, stderr.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        end = lines.wait_for("END", STOP)  # raises past STOP: the run never ended
        code = proc.wait(timeout=STOP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    text = stderr.read_text()
    assert code != 0, text[-3000:]
    assert "SIGTERM received while a step was blocked reading its input" in text, text[-3000:]
    assert "Cancelling its read" in text
    assert end.split()[1] != "0"  # every hook's end ran, after the steps it saw
