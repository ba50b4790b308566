"""examples/multi_worker.py, run as a user runs it: ``--workers 2`` on loopback ports."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 2


@pytest.mark.slow
def test_multi_worker_example_trains_on_two_loopback_workers(tmp_path: Path) -> None:
    data, logdir = tmp_path / "data", tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multi_worker.py"), "--workers", "2",
         "--epochs", str(EPOCHS), "--data-dir", str(data), "--logdir", str(logdir),
         "--timeout", "300"],
        env=env, capture_output=True, text=True, timeout=360, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{EPOCHS} epochs on 2 worker(s)" in result.stdout
    assert result.stdout.count(f"Epoch 1/{EPOCHS}") == 1  # the chief's progress only
    assert sorted(p.name for p in (data / "train").glob("*.tfrecord")) == [
        f"data-0000{i}-of-00004.tfrecord" for i in range(4)
    ]
    assert (logdir / "checkpoints" / "best.weights.h5").is_file()
    assert not (logdir / "backup").exists()  # BackupAndRestore removes it after a full run
    with open(logdir / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(EPOCHS))  # written once
    assert len(list((logdir / "tensorboard" / "train").iterdir())) == 1
