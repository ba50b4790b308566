"""Signals and SIGKILL against a real training process (issue 7, items 3 and 4).

All scenario processes start together (importing TensorFlow takes most of their time),
run ``tests/_fault_scripts/train.py`` and are killed in a ``finally`` whatever happens.
Every wait is bounded; the bounds are generous hang detectors, not speed requirements.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import write_records
from tfr_hooks.checkpoint import resume_epoch_of

SCRIPT = Path(__file__).parent / "_fault_scripts" / "train.py"
SRC = Path(__file__).parent.parent / "src"
START_TIMEOUT_S = 240  # four processes import TensorFlow at once on two slow cores
STOP_TIMEOUT_S = 30  # a graceful stop must end the process within this
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


class Proc:
    """A scenario process, with line waits that never block past their timeout."""

    def __init__(self, scenario: str, logdir: Path, data: Path | None = None) -> None:
        self.scenario, self.logdir = scenario, logdir
        logdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(SRC), TF_CPP_MIN_LOG_LEVEL="2")
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, str(SCRIPT), "--scenario", scenario, "--logdir", str(logdir)]
        if data is not None:
            cmd += ["--data", str(data)]
        self.stderr_path = logdir.parent / f"{scenario}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in kill()
        self.popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self.lines: list[str] = []
        self._buffer = b""

    def wait_for(self, prefix: str, timeout: float) -> str:
        """Return the first stdout line starting with ``prefix``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        fd = self.popen.stdout.fileno()
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{self.scenario}: no {prefix!r} line in {timeout} s\n{self.tail()}"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:  # the process closed stdout
                    self.lines.append("")
                    raise AssertionError(
                        f"{self.scenario}: exited before {prefix!r}\n{self.tail()}"
                    )
                self._buffer += chunk
                *complete, self._buffer = self._buffer.split(b"\n")
                self.lines.extend(line.decode() for line in complete)

    def result(self) -> dict:
        return json.loads(self.wait_for("RESULT", STOP_TIMEOUT_S).split(" ", 1)[1])

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.scenario}: still running after {timeout} s\n{self.tail()}"
            ) from None

    def tail(self) -> str:
        self._stderr.flush()
        return (
            "stdout: "
            + "\n".join(self.lines[-10:])
            + "\nstderr: "
            + self.stderr_path.read_text(errors="replace")[-3000:]
        )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)
        self.popen.stdout.close()
        self._stderr.close()


@pytest.fixture(scope="module")
def procs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    root = tmp_path_factory.mktemp("signals")
    data = write_records(root / "data.tfrecord", 200)
    started: dict[str, Proc] = {}
    try:
        for scenario in ("graceful", "blocked", "abort", "kill_save"):
            started[scenario] = Proc(
                scenario, root / scenario, data if scenario == "abort" else None
            )
        yield started
    finally:
        for proc in started.values():
            proc.kill()


def _load_all(path: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_sigint_mid_epoch_closes_the_epoch_writes_checkpoints_and_flushes_tensorboard(procs):
    proc = procs["graceful"]
    proc.wait_for("READY", START_TIMEOUT_S)  # epoch 1, step 3; the steps are now slow
    proc.signal(signal.SIGINT)
    assert proc.wait(STOP_TIMEOUT_S) == 0, proc.tail()
    result = proc.result()
    assert len(result["history"]["loss"]) == 2  # epoch 0, and epoch 1 closed early
    assert result["threads"] == ["MainThread"]
    # our checkpoint: the interrupted epoch 1 is to be run again on resume
    latest = tf.train.latest_checkpoint(str(proc.logdir / "ckpt"))
    assert resume_epoch_of(latest)[0] == 1
    values = _load_all(latest)
    assert any("momentum" in name for name in values)  # optimizer slots are saved
    # Keras' ModelCheckpoint wrote the final epoch's weights at its end
    assert (proc.logdir / "weights.02.h5").stat().st_size > 0
    import h5py

    with h5py.File(proc.logdir / "weights.02.h5", "r") as weights:
        assert len(weights.keys()) > 0
    # TensorBoard's events for both epochs were flushed
    events = EventAccumulator(str(proc.logdir / "tb"))
    events.Reload()
    assert [s.step for s in events.Scalars("epoch_loss")] == [0, 1]


def test_sigterm_stops_a_step_blocked_on_an_empty_queue(procs):
    proc = procs["blocked"]
    proc.wait_for("READY", START_TIMEOUT_S)  # the next step blocks: the queue stays empty
    proc.signal(signal.SIGTERM)
    assert proc.wait(STOP_TIMEOUT_S) == 0, proc.tail()
    result = proc.result()
    assert result["history"]["loss"] and result["threads"] == ["MainThread"]
    latest = tf.train.latest_checkpoint(str(proc.logdir / "ckpt"))
    assert resume_epoch_of(latest)[0] == 0  # the interrupted epoch 0
    assert _load_all(latest)["global_step"] == 5
    assert "Closing the input queues" in proc.stderr_path.read_text()


def test_a_second_sigint_aborts_at_once_and_still_joins_threads(procs):
    proc = procs["abort"]
    proc.wait_for("READY", START_TIMEOUT_S)
    proc.signal(signal.SIGINT)
    proc.wait_for("CLOSING", STOP_TIMEOUT_S)  # the epoch end would now take a minute
    proc.signal(signal.SIGINT)
    code = proc.wait(STOP_TIMEOUT_S)  # far less than the minute: it did not wait for it
    assert code in (-signal.SIGINT, 128 + signal.SIGINT, 1), proc.tail()
    assert "KeyboardInterrupt: SIGINT received twice" in proc.stderr_path.read_text()
    assert proc.result()["threads"] == ["MainThread"]  # the queue threads were joined


def test_sigkill_during_a_checkpoint_write_leaves_the_previous_one_loadable(procs):
    proc = procs["kill_save"]
    assert proc.wait(START_TIMEOUT_S) == -signal.SIGKILL, proc.tail()
    names = os.listdir(proc.logdir)
    # it died mid-write: a file under TensorFlow's temporary name was left behind ...
    partial = [n for n in names if "tempstate" in n]
    assert partial, names
    # ... and the state file points only at complete checkpoints
    state = tf.train.get_checkpoint_state(str(proc.logdir))
    assert state is not None and len(state.all_model_checkpoint_paths) >= 2
    for path in state.all_model_checkpoint_paths:
        assert not any(
            n.startswith(os.path.basename(path) + ".") and "tempstate" in n for n in names
        )
        epochs_done, _ = resume_epoch_of(path)
        big = _load_all(path)["big"]
        assert big.shape == (8 * 1024 * 1024,)
        assert np.all(big == epochs_done)  # one step per epoch adds 1 everywhere
