"""Faults on a real two-worker loopback cluster: a kill, a restart, a preemption, a restart.

One chain of three cluster runs of ``tests/_multi_worker_child.py`` (Keras 3 model,
``KerasCallbacks`` with ``BackupAndRestore``, then ``PreemptionCheckpoint``), 3 epochs of
4 steps:

1. A real SIGKILL of worker 1 after its second batch of epoch 1. The chief must stop on
   its own (the cluster has a timeout; hitting it fails the test) with a
   ``WorkerLostError`` naming the lost task.
2. The cluster started again resumes both workers from the chief's ``BackupAndRestore``
   backup at epoch 1, with the optimizer state of the end of epoch 0. Then a real SIGTERM
   to worker 1 after the first batch of epoch 2 (a preemption): both workers save one
   checkpoint at the same step and exit with code 42, the chief's checkpoint the only
   one written.
3. Started again, both workers resume at that step of epoch 2 (the preemption
   checkpoint is newer than the epoch backup), run only the steps left, and end after the
   3 epochs asked for, with the same weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _cluster import run_cluster
from test_distribute_cluster import CHILD, _write_data

pytestmark = pytest.mark.slow

STEPS, EPOCHS = 4, 3


def _preempted(stdout: str) -> dict:
    import json

    lines = [line for line in stdout.splitlines() if line.startswith("PREEMPTED ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("PREEMPTED ") :])


@pytest.mark.resume_matrix
def test_kill_resume_preempt_resume(tmp_path: Path) -> None:
    data = _write_data(tmp_path / "data", shards=1)
    out = tmp_path / "out"
    argv = [CHILD, "keras", str(data), str(out)]

    # 1. a worker killed mid-epoch: the other stops by itself and names it
    kill = {"KILL_AT_EPOCH": "1", "KILL_TASK": "1"}
    chief, killed = run_cluster(argv, 2, timeout=240, env=kill)
    assert killed.returncode == -9 and "KILL task 1" in killed.stdout
    assert "[killed: cluster timeout]" not in chief.stderr  # it stopped by itself
    assert chief.returncode not in (0, None)
    assert "WorkerLostError: Lost task /job:worker/replica:0/task:1" in chief.stderr
    assert "RESULT" not in chief.stdout

    # 2. restarted (new ports): both resume at epoch 1; SIGTERM to worker 1 in epoch 2
    term = {"TERM_AT_EPOCH": "2", "TERM_AT_BATCH": "0", "TERM_TASK": "1"}
    workers = run_cluster(argv, 2, timeout=240, env=term, tmp_root=tmp_path / "run2")
    assert "TERM task 1" in workers[1].stdout
    for worker in workers:
        assert worker.returncode == 42, worker.stderr[-3000:]  # a clean exit, both
        assert "RESULT" not in worker.stdout
    first, second = (_preempted(w.stdout) for w in workers)
    for run in (first, second):
        assert run["epochs"] == [1, 2]
        assert run["iterations_at_begin"] == STEPS  # the optimizer state of epoch 0's end
    assert (first["epoch"], first["step"]) == (second["epoch"], second["step"])  # agreed
    assert first["epoch"] == 2 and 0 < first["step"] < STEPS
    assert second["path"] is None  # the chief wrote the checkpoint, once
    files = sorted(p.name for p in (out / "preemption").iterdir())
    assert files == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"], files
    assert [p.name for p in out.iterdir() if "workertemp" in p.name] == []
    for index in (0, 1):  # nothing left in the workers' temporary directories
        left = list((tmp_path / "run2" / f"tmp{index}").glob("tfr_hooks_*"))
        assert left == [], left

    # 3. restarted again: both resume at the agreed step and end after 3 epochs
    third = [w.result() for w in run_cluster(argv, 2, timeout=240)]
    for run in third:
        assert run["epochs"] == [2]
        assert run["first_batch"] == first["step"]  # only the steps left of epoch 2
        assert run["iterations_at_begin"] == 2 * STEPS + first["step"]
        assert run["iterations"] == EPOCHS * STEPS
        assert len(run["history"]["loss"]) == 1
    assert third[0]["history"] == third[1]["history"]
    assert third[0]["weights"] == third[1]["weights"]
