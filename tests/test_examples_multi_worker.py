"""examples/multi_worker.py, run as a user runs it: ``--workers 2`` on loopback ports.

The script runs as ``__main__`` with its own argv in a process of the test fork server
(``tests/_cluster.py``: TensorFlow already imported, so the launcher starts at once); the
two workers it starts are plain ``python examples/multi_worker.py`` subprocesses of it,
each with its own ``TF_CONFIG``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from _cluster import run_cluster

EPOCHS = 2


@pytest.mark.slow
@pytest.mark.main_only
def test_multi_worker_example_trains_on_two_loopback_workers(tmp_path: Path) -> None:
    data, logdir = tmp_path / "data", tmp_path / "logs"
    argv = ["examples/multi_worker.py", "--workers", "2", "--epochs", str(EPOCHS),
            "--data-dir", str(data), "--logdir", str(logdir), "--timeout", "300"]  # fmt: skip
    (launcher,) = run_cluster(argv, 0, timeout=360)
    assert launcher.returncode == 0, launcher.stderr[-3000:]
    assert f"{EPOCHS} epochs on 2 worker(s)" in launcher.stdout
    assert launcher.stdout.count(f"Epoch 1/{EPOCHS}") == 1  # the chief's progress only
    assert sorted(p.name for p in (data / "train").glob("*.tfrecord")) == [
        f"data-0000{i}-of-00004.tfrecord" for i in range(4)
    ]
    assert (logdir / "checkpoints" / "best.weights.h5").is_file()
    assert not (logdir / "backup").exists()  # BackupAndRestore removes it after a full run
    assert not (logdir / "preemption").exists()  # written only on a preemption
    with open(logdir / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(EPOCHS))  # written once
    assert len(list((logdir / "tensorboard" / "train").iterdir())) == 1
