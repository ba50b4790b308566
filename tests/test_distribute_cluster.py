"""FunctionLoop on real two-worker MultiWorkerMirroredStrategy clusters on loopback.

Each test starts real worker processes (``tests/_multi_worker_child.py``) with their own
``TF_CONFIG`` naming ``127.0.0.1`` ports, each with a timeout and killed in a
``finally``. The children set ``inter_op_parallelism_threads`` to workers + 1.
"""

from __future__ import annotations

import collections
import csv
import re
from pathlib import Path

import numpy as np
import pytest

from _cluster import run_cluster
from tfr_hooks.tfrecord.pipelines.sharding import loopback_cluster

pytestmark = [pytest.mark.slow, pytest.mark.range_ends]

CHILD = "tests/_multi_worker_child.py"
N_TRAIN, N_VAL = 96, 48


def _write_data(root: Path, shards: int) -> Path:
    from tfr_hooks import tfrecord

    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_TRAIN, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    tfrecord.write({"index": np.arange(N_TRAIN), "x": x, "y": y}, root / "train", shards=shards)
    xv = rng.normal(size=(N_VAL, 4)).astype(np.float32)
    yv = (xv[:, 0] > 0).astype(np.int64)
    tfrecord.write({"index": np.arange(N_VAL), "x": xv, "y": yv}, root / "val")
    return root


def _file_set(root: Path) -> collections.Counter[str]:
    """The files under ``root``, event files named without their time, host and pid."""
    names: collections.Counter[str] = collections.Counter()
    for path in root.rglob("*"):
        if path.is_file():
            rel = path.relative_to(root).as_posix()
            names[re.sub(r"events\.out\.tfevents\..*", "events", rel)] += 1
    return names


def _scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(event.step, event.value) for event in acc.Scalars(tag)]


def test_two_workers_log_and_write_what_one_process_does(tmp_path: Path) -> None:
    data = _write_data(tmp_path / "data", shards=1)  # 1 file, 2 workers: shard by data
    configs = [*loopback_cluster(2), None]  # two workers, and one process beside them
    out = tmp_path / "out{index}"
    workers = run_cluster(
        [CHILD, "keras", str(data), str(out)],
        2,
        configs=configs,
        tmp_root=tmp_path,
        timeout=240,
    )
    chief, other, single = (w.result() for w in workers)

    # global logs and counts: identical on both workers, equal to one process's
    assert chief["history"] == other["history"]
    # the input is measured on every worker, once per epoch (its own timings)
    assert [len(w["input"]["input/wait_share"]) for w in (chief, other)] == [3, 3]
    assert chief["counts"] == other["counts"] == single["counts"] == [[4, N_TRAIN]] * 3
    assert chief["iterations"] == single["iterations"] == 12
    assert sorted(chief["history"]) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for key, values in single["history"].items():
        assert chief["history"][key] == pytest.approx(values, rel=1e-5, abs=1e-6), key
    for ours, theirs in zip(chief["weights"], single["weights"], strict=True):
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-6)

    # one file set, the single process's, at the same paths; the other worker wrote none
    cluster_out, other_out, single_out = (tmp_path / f"out{i}" for i in range(3))
    assert _file_set(cluster_out) == _file_set(single_out)
    assert _file_set(cluster_out)["tb/train/events"] == 1
    assert not other_out.exists()
    # the non-chief worker's temporary files are gone
    # (TensorFlow's autograph may leave a __pycache__ of its generated code there too)
    left = [p.name for p in (tmp_path / "tmp1").iterdir() if p.name.startswith("tfr_hooks_")]
    assert left == []

    # the files hold the global logs, written once
    board = _scalars(cluster_out / "tbl" / "train", "epoch_loss")
    assert [step for step, _ in board] == [0, 1, 2]
    assert [v for _, v in board] == pytest.approx(chief["history"]["loss"], rel=1e-6)
    with open(cluster_out / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["loss"]) for r in rows] == pytest.approx(chief["history"]["loss"], rel=1e-6)

    # progress on the chief only
    assert "Epoch 1/3" in workers[0].stdout
    assert "Epoch" not in workers[1].stdout


def test_step_fn_shards_by_file_with_exact_global_counts(tmp_path: Path) -> None:
    # 3 files of 32 examples, 2 workers, shard="file": worker 0 reads files 0 and 2,
    # worker 1 file 1, so worker 1 runs out first and joins the last steps with empty
    # batches ("auto" splits this read by data: it seeks, one sequence on any count)
    data = _write_data(tmp_path / "data", shards=3)
    workers = run_cluster([CHILD, "step", str(data), "file"], 2, timeout=240)
    first, second = (w.result() for w in workers)
    assert {**first, "input": None} == {**second, "input": None}  # input/: own timings
    assert [examples for _, examples in first["counts"]] == [N_TRAIN, N_TRAIN]
    history = first["history"]
    assert history["index"] == pytest.approx([np.arange(N_TRAIN).mean()] * 2)
    # replica 1 (worker 1) read exactly the examples of file 1: indexes 32..63
    assert history["index_on_replica1"] == pytest.approx([np.arange(32, 64).sum() / N_TRAIN] * 2)


def test_class_weight_with_auto_steps_as_in_one_process(tmp_path: Path) -> None:
    data = _write_data(tmp_path / "data", shards=1)
    configs = [*loopback_cluster(2), None]  # two workers, and one process beside them
    workers = run_cluster([CHILD, "class_weight", str(data)], 2, configs=configs, timeout=240)
    chief, other, single = (w.result() for w in workers)
    assert chief["history"] == other["history"]
    assert sorted(chief["history"]) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for key, values in single["history"].items():
        assert chief["history"][key] == pytest.approx(values, rel=1e-5, abs=1e-6), key
    for ours, theirs in zip(chief["weights"], single["weights"], strict=True):
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-6)
    # the class weights mattered
    assert not np.allclose(np.array(single["weights"][-2]), np.array(single["plain_weights"][-2]))
