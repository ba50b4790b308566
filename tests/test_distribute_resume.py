"""Exact resume on a real two-worker loopback cluster (issue 20).

The case of the issue: 4,000 examples in 2 shards, a global batch of 32, 3 epochs, two
``MultiWorkerMirroredStrategy`` workers sharding by file. Each worker's 2,000 examples end
in a partial batch of 16, which the strategy splits into one piece per replica: a pass
makes 126 steps, while the dataset's ``cardinality()`` counts 125 global batches. A run
preempted (a real SIGTERM to worker 1 in epoch 2) and started again must end where an
uninterrupted one does: 378 optimizer steps, every epoch 126, the weights of an
uninterrupted run (within 1e-6; bitwise equal in the runs seen, without
``enable_op_determinism``, which TensorFlow needs to promise it), and, the run complete,
no preemption checkpoint left for a later start to go back to.

A second test shuffles (with the seed all workers share) and checks the batches: each
worker resumes at the next batch of the order it has in an uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _cluster import run_cluster

pytestmark = [pytest.mark.slow, pytest.mark.resume_matrix]

CHILD = "tests/_multi_worker_child.py"
N_TRAIN, N_VAL, GLOBAL_BATCH, EPOCHS = 4000, 64, 32, 3
STEPS = 2 * -(-N_TRAIN // 2 // GLOBAL_BATCH)  # 2 workers x 63 local batches: 126


def _write_data(root: Path) -> Path:
    from tfr_hooks import tfrecord

    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_TRAIN, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    tfrecord.write({"index": np.arange(N_TRAIN), "x": x, "y": y}, root / "train", shards=2)
    xv = rng.normal(size=(N_VAL, 4)).astype(np.float32)
    tfrecord.write(
        {"index": np.arange(N_VAL), "x": xv, "y": (xv[:, 0] > 0).astype(np.int64)}, root / "val"
    )
    return root


def _preempted(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("PREEMPTED ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("PREEMPTED ") :])


def test_preempted_and_restarted_run_makes_the_steps_of_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    from tfr_hooks import tfrecord

    assert STEPS == 126
    data = _write_data(tmp_path / "data")
    assert int(tfrecord.dataset(data / "train", GLOBAL_BATCH).cardinality()) == 125
    out = tmp_path / "out"
    argv = [CHILD, "keras", str(data), str(out), "file"]
    batch = {"GLOBAL_BATCH": str(GLOBAL_BATCH)}

    # a real SIGTERM to worker 1 in epoch 2: both save at one agreed step and exit 42
    term = {**batch, "TERM_AT_EPOCH": "2", "TERM_AT_BATCH": "10", "TERM_TASK": "1"}
    workers = run_cluster(argv, 2, timeout=300, env=term)
    for worker in workers:
        assert worker.returncode == 42, worker.stderr[-3000:]
    first, second = (_preempted(w.stdout) for w in workers)
    assert (first["epoch"], first["step"]) == (second["epoch"], second["step"])
    assert first["epoch"] == 2 and 10 < first["step"] < STEPS
    done = first["step"]

    # started again: both resume at that step, run the rest of epoch 2, end at 378
    third = [w.result() for w in run_cluster(argv, 2, timeout=300, env=batch)]
    for run in third:
        assert run["epochs"] == [2]
        assert run["first_batch"] == done
        assert run["iterations_at_begin"] == 2 * STEPS + done
        assert run["iterations"] == EPOCHS * STEPS == 378
        assert run["counts"] == [[STEPS, N_TRAIN]]  # the resumed epoch counts all of it
    assert third[0]["weights"] == third[1]["weights"]
    # the run ended well: the chief removed the preemption checkpoint
    assert not (out / "preemption").exists()

    # and it ends with the weights of an uninterrupted run (same batches, same state)
    argv_ref = [CHILD, "keras", str(data), str(tmp_path / "ref"), "file"]
    reference = [w.result() for w in run_cluster(argv_ref, 2, timeout=300, env=batch)]
    assert reference[0]["iterations"] == 378
    assert [r[0] for r in reference[0]["counts"]] == [STEPS] * EPOCHS
    for ours, theirs in zip(third[0]["weights"], reference[0]["weights"], strict=True):
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=0, atol=1e-6)


def test_preempted_workers_resume_at_the_next_batch_of_their_order(tmp_path: Path) -> None:
    # 200 examples in 2 shards, shuffled (the seed all workers share), global batch 16:
    # each worker's 100 examples make 7 batches, 14 steps a pass. Preempted in epoch 1
    # and started again, each worker trains on the batches it has in an uninterrupted
    # run, from the next one on; together, on every example once an epoch.
    from tfr_hooks import tfrecord

    n = 200
    tfrecord.write({"index": np.arange(n)}, tmp_path / "data" / "train", shards=2)
    argv = [CHILD, "order", str(tmp_path / "data"), "{out}"]
    batch = {"GLOBAL_BATCH": "16"}

    def cluster(out: str, env: dict[str, str]) -> list:
        return run_cluster([a.replace("{out}", out) for a in argv], 2, timeout=240, env=env)

    reference = [w.result() for w in cluster(str(tmp_path / "ref"), batch)]
    assert [r["steps"] for r in reference] == [EPOCHS * 14] * 2
    term = {**batch, "TERM_AT_EPOCH": "1", "TERM_AT_BATCH": "3", "TERM_TASK": "1"}
    workers = cluster(str(tmp_path / "run"), term)
    for worker in workers:
        assert worker.returncode == 42, worker.stderr[-3000:]
    before = [_preempted(w.stdout) for w in workers]
    assert before[0]["epoch"] == 1 and 3 < before[0]["step"] < 14
    after = [w.result() for w in cluster(str(tmp_path / "run"), batch)]

    for ref, old, new in zip(reference, before, after, strict=True):
        assert new["steps"] == EPOCHS * 14
        assert old["seen"]["0"] == ref["seen"]["0"]
        assert sorted(new["seen"]) == ["1", "2"]
        assert old["seen"]["1"] + new["seen"]["1"] == ref["seen"]["1"]
        assert new["seen"]["2"] == ref["seen"]["2"]
    for epoch in ("1", "2"):
        examples = [
            i
            for old, new in zip(before, after, strict=True)
            for b in old["seen"].get(epoch, []) + new["seen"][epoch]
            for i in b
        ]
        assert sorted(examples) == list(range(n)), epoch
