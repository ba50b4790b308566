"""FunctionLoop + Keras 3 BackupAndRestore: a run killed mid-epoch resumes where it left off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

from _function_loop_child import EPOCHS, batches, make_model
from tfr_hooks import FunctionLoop, KerasCallbacks

STEPS = 4  # per epoch
CHILD = Path(__file__).with_name("_function_loop_child.py")


class Crash(keras.callbacks.Callback):
    """Raises in the middle of ``epoch`` (after its second batch)."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch, self.current = epoch, -1

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.current = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.current == self.epoch and batch == 1:
            raise RuntimeError("simulated crash")


class Watch(keras.callbacks.Callback):
    """Keeps the epochs run, and the state right after epochs end and after the restore."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[int] = []
        self.at_epoch_end: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}

    def state(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        optimizer = [keras.ops.convert_to_numpy(v) for v in self.model.optimizer.variables]
        return optimizer, self.model.get_weights()

    def on_train_begin(self, logs: Any = None) -> None:
        self.at_begin = self.state()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append(epoch)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.at_epoch_end[epoch] = self.state()


def run(
    backup: Path, *extra: keras.callbacks.Callback
) -> tuple[keras.Model, dict[str, Any], Watch]:
    model = make_model()
    watch = Watch()
    callbacks = [keras.callbacks.BackupAndRestore(str(backup)), watch, *extra]
    loop = FunctionLoop(batches(), model=model, hooks=[KerasCallbacks(callbacks, model)])
    history = loop.run(epochs=EPOCHS)
    return model, history, watch


def assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_a_crashed_run_resumes_from_the_last_completed_epoch(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    crash_watch = Watch()
    model = make_model()
    callbacks = [keras.callbacks.BackupAndRestore(str(backup)), crash_watch, Crash(epoch=2)]
    loop = FunctionLoop(batches(), model=model, hooks=[KerasCallbacks(callbacks, model)])
    with pytest.raises(RuntimeError, match="simulated crash"):
        loop.run(epochs=EPOCHS)
    assert crash_watch.epochs == [0, 1, 2]
    assert backup.exists()  # no on_train_end after a failure: the backup stays

    resumed, history, watch = run(backup)
    # epochs 2, 3 and 4 run again; 0 and 1 are not repeated
    assert watch.epochs == [2, 3, 4]
    assert len(history["loss"]) == 3
    # the restored state is the one at the end of epoch 1, optimizer included
    optimizer, weights = watch.at_begin
    assert int(optimizer[0]) == 2 * STEPS  # optimizer.iterations
    assert_same(optimizer, crash_watch.at_epoch_end[1][0])
    assert_same(weights, crash_watch.at_epoch_end[1][1])
    assert int(resumed.optimizer.iterations) == EPOCHS * STEPS
    assert not backup.exists()  # a finished run removes its backup

    # and it ends where an uninterrupted run ends
    reference, ref_history, _ = run(tmp_path / "reference")
    assert_same(resumed.get_weights(), reference.get_weights())
    assert history["loss"] == pytest.approx(ref_history["loss"][2:], rel=1e-5)


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
def test_a_process_killed_by_a_signal_resumes(tmp_path: Path) -> None:
    backup = str(tmp_path / "backup")
    killed = _child("resume", backup, "--kill-at-epoch", "3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert (tmp_path / "backup").exists()

    resumed = _result(_child("resume", backup))
    assert resumed["epochs"] == [3, 4]
    assert resumed["iterations_at_begin"] == 3 * STEPS
    assert resumed["iterations"] == EPOCHS * STEPS
    assert resumed["history_epochs"] == 2

    reference, _, _ = run(tmp_path / "reference")
    assert_same([np.array(w) for w in resumed["weights"]], reference.get_weights())
