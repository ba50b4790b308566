"""A run preempted on N ``MultiWorkerMirroredStrategy`` workers resumes on M, exactly.

A position is global batches done of one sequence, the same for any worker count; each
worker takes its part of every global batch. So across the preempted run (N workers) and
the resumed one (M workers) every example of the interrupted epoch is trained once, by
its ``id``: for ``shuffle="global"`` and unshuffled, 2 -> 1, 1 -> 2 and 2 -> 3, real
processes on 127.0.0.1, a real SIGTERM. The resumed run seeks (its log says so, and no
replay line).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

N = 2_400  # records in 4 files
BATCH = 32  # the global batch: parts of 16 on 2 workers, of 11, 11 and 10 on 3
STOP = 20  # the step of epoch 0 a worker is SIGTERMed after


SIZES = (300, 500, 700, 900)  # unequal files: a worker's files are not a fixed share


def _write(directory: Path) -> Path:
    """4 files of 2,400 records, each an ``index`` (its id), from a plain TFRecordWriter."""
    directory.mkdir(parents=True)
    starts = np.cumsum((0, *SIZES))
    for shard in range(4):
        path = directory / f"train-{shard:05d}-of-00004.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in range(starts[shard], starts[shard + 1]):
                feature = {"index": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i)]))}
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return directory.parent


def _trained(workers: list[Any], epoch: str, steps: int | None = None) -> list[int]:
    """The ids every worker trained in ``epoch`` (of a preempted run: its first ``steps``)."""
    ids = []
    for worker in workers:
        batches = worker["seen"].get(epoch, [])
        ids += [i for batch in (batches if steps is None else batches[:steps]) for i in batch]
    return ids


@pytest.mark.slow  # two clusters each, up to 3 workers on 127.0.0.1: about 20 s of CPU each
@pytest.mark.resume_matrix
@pytest.mark.parametrize("read", ["global", "unshuffled"])
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2), (2, 3)], ids=["2-1", "1-2", "2-3"])
def test_a_run_preempted_on_n_workers_resumes_on_m_with_each_example_once(
    tmp_path: Path, read: str, before: int, after: int
) -> None:
    from _cluster import run_cluster

    data = _write(tmp_path / "data" / "train")
    argv = ["tests/_multi_worker_child.py", "order", str(data), str(tmp_path / "run")]
    env = {"GLOBAL_BATCH": str(BATCH), "ORDER_READ": read, "ORDER_EPOCHS": "2", "ORDER_LOG": "1"}
    term = {"TERM_AT_EPOCH": "0", "TERM_AT_BATCH": str(STOP), "TERM_TASK": "0"}
    first = run_cluster(argv, before, timeout=300, env={**env, **term})
    preempted = []
    for worker in first:
        assert worker.returncode == 42, worker.stderr[-3000:]
        line = [x for x in worker.stdout.splitlines() if x.startswith("PREEMPTED ")][-1]
        preempted.append(json.loads(line[len("PREEMPTED ") :]))
    step = preempted[0]["step"]
    assert step >= STOP
    second = run_cluster(argv, after, timeout=300, env=env)
    resumed = [w.result() for w in second]

    # the interrupted epoch: each id once across both runs; the next: once in the second
    ids = _trained(preempted, "0", step) + _trained(resumed, "0")
    assert sorted(ids) == list(range(N)), (len(ids), len(set(ids)))
    assert sorted(_trained(resumed, "1")) == list(range(N))
    # each step, the workers' parts make the global batch and differ by one at most
    for parts in zip(*(r["seen"]["1"] for r in resumed), strict=True):
        sizes = [len(part) for part in parts]
        assert sum(sizes) == BATCH and max(sizes) - min(sizes) <= 1, sizes
    for worker, result in zip(second, resumed, strict=True):
        assert result["position"]["workers"] == after
        assert f"Resumed the input at epoch 0, record {step * BATCH} " in worker.stderr
        assert f"step {step} on {after} worker(s), saved on {before}" in worker.stderr
        assert "Skipped" not in worker.stderr and "Started" not in worker.stderr
    assert resumed[0]["steps"] == 2 * N // BATCH  # the steps of an uninterrupted run


@pytest.mark.parametrize(
    "read, said",
    [
        ({"shuffle": "global", "seed": 1}, "the position counts global batches"),
        ({}, "the position counts global batches"),
        ({"shuffle": 64, "seed": 1}, "this input cannot seek (it replays)"),
    ],
    ids=["global", "unshuffled", "buffer-replays"],
)
def test_a_resume_onto_another_worker_count_says_whether_examples_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, read: dict[str, Any], said: str
) -> None:
    """Saved on 2 workers, resumed on 1: a position holds; a replay moves examples, and says so."""
    from tfr_hooks import FunctionLoop, Hook, tfrecord

    data = _write(tmp_path / "data" / "train")

    class SavedOnTwo(Hook):  # what PreemptionCheckpoint sets from a 2-worker checkpoint
        def after_create_session(self, session: Any, coord: Any) -> None:
            self.loop.initial_step = 5
            self.loop.initial_workers = 2

    def step_fn(batch: dict[str, Any]) -> dict[str, Any]:
        return {"size": tf.cast(tf.size(batch["index"]), tf.float32)}

    train = tfrecord.source(data / "train", 32, **read)
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        FunctionLoop(train, step_fn=step_fn, hooks=[SavedOnTwo()]).run(epochs=1)
    assert "Resuming epoch 0 at step 5 on 1 worker(s), saved on 2" in caplog.text
    assert said in caplog.text
    warned = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "saved on 2" in r.message
    ]
    assert bool(warned) == (train.position is None)
