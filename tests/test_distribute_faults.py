"""Faults on a real two-worker loopback cluster: a worker killed mid-epoch, then a restart.

The kill is a real SIGKILL of worker 1 in the middle of epoch 1 (after its second
batch). The chief must stop on its own (the cluster has a timeout; hitting it fails the
test) with a ``WorkerLostError`` naming the lost task. Starting the cluster again must
resume both workers from the chief's ``BackupAndRestore`` backup at epoch 1, with the
optimizer state of the end of epoch 0, and end after the 3 epochs asked for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _cluster import run_cluster
from test_distribute_cluster import CHILD, _write_data

pytestmark = pytest.mark.slow


def test_a_killed_worker_stops_the_others_and_a_restart_resumes(tmp_path: Path) -> None:
    data = _write_data(tmp_path / "data", shards=1)
    out = tmp_path / "out"
    argv = [CHILD, "keras", str(data), str(out)]
    chief, killed = run_cluster(argv, 2, timeout=240, env={"KILL_AT_EPOCH": "1", "KILL_TASK": "1"})
    assert killed.returncode == -9 and "KILLING task 1" in killed.stdout
    assert "[killed: cluster timeout]" not in chief.stderr  # it stopped by itself
    assert chief.returncode not in (0, None)
    assert "WorkerLostError: Lost task /job:worker/replica:0/task:1" in chief.stderr
    assert "RESULT" not in chief.stdout

    # the same cluster started again (new ports): both resume at epoch 1
    first, second = (w.result() for w in run_cluster(argv, 2, timeout=240))
    for run in (first, second):
        assert run["epochs"] == [1, 2]
        assert run["iterations_at_begin"] == 4  # the optimizer state of the end of epoch 0
        assert run["iterations"] == 12
        assert len(run["history"]["loss"]) == 2
    assert first["history"] == second["history"]
    assert first["weights"] == second["weights"]
