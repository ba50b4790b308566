"""Resume by position: a resumed run seeks its input instead of replaying it.

``shuffle="global"`` (streamed, on packed shards, on damaged files and in memory), an
unshuffled read in memory and an unshuffled stream (bucketed from pools too: entered at
the pool's start) carry a
:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`: a run
resumed mid-epoch starts the pass at ``(epoch, records done)`` and trains on the
batches (and reaches the weights) of an uninterrupted run, without reading the records
before its position.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from helpers import preemptible_run
from tfr_hooks import tfrecord

EPOCHS = 3
SLOW = pytest.mark.slow

# the orders and layouts a resume by seek goes through (about 3 s of CPU each)
PIPELINES = [
    pytest.param({"shuffle": "global", "seed": 3}, id="global-streamed"),
    pytest.param(
        {"shuffle": "global", "seed": 3, "in_memory": True}, id="global-memory", marks=SLOW
    ),
    pytest.param({"in_memory": True}, id="unshuffled-memory", marks=SLOW),
    pytest.param({}, id="unshuffled-streamed", marks=SLOW),
    pytest.param(
        {"read_config": tfrecord.ReadConfig(num_parallel_reads=2)},
        id="unshuffled-2-reads",
        marks=SLOW,
    ),
]


def _write(directory: Path, n: int, shards: int) -> Path:
    tfrecord.write({"index": np.arange(n)}, directory, shards=shards)
    return directory


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize(
    ("n", "batch"),
    # all slow (three runs, about 4 s of CPU): the fast run resumes the same global order
    # of 403 examples in batches of 13 through tfrecord.dataset(...).map() below, the
    # same seek behind a user's stage
    [
        pytest.param(400, 16, id="divides", marks=SLOW),
        pytest.param(403, 13, id="remainder", marks=SLOW),
    ],
)
def test_a_preempted_run_seeks_to_the_next_batch_of_the_same_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pipeline: dict[str, Any], n: int, batch: int
) -> None:
    data = _write(tmp_path / "data", n, 3)
    per_epoch = -(-n // batch)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        source = tfrecord.source(data, batch, **pipeline)  # a new process's reader
        assert source.position is not None
        return preemptible_run(source, "index", directory, at, EPOCHS)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == EPOCHS * per_epoch
    before, (stop, _) = run(tmp_path / "p", (1, 17))
    assert stop is not None and stop.epoch == 1 and 17 <= stop.step < per_epoch
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        after, (_, total) = run(tmp_path / "p", None)
    assert total == EPOCHS * per_epoch  # the steps of an uninterrupted run
    assert f"Resumed the input at epoch 1, record {stop.step * batch}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text  # no replay
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    resumed = [i for b in before[1][: stop.step] + after[1] for i in b]
    assert sorted(resumed) == list(range(n))  # every example once
    assert reference[1] != reference[2] or "shuffle" not in pipeline


def _plain(directory: Path, n: int, shards: int, pad: int = 0) -> list[str]:
    """``n`` examples (``index``, and ``pad`` bytes) in files of a plain TFRecordWriter."""
    from _tfrecord_data import bytes_feature, example, int64_feature, write_records

    directory.mkdir(parents=True)
    filler = bytes_feature([b"x" * pad])
    return [
        write_records(
            directory / f"part-{s}.tfrecord",
            [example(index=int64_feature([i]), pad=filler) for i in range(s, n, shards)],
        )
        for s in range(shards)
    ]


#: what a user's script puts after ``tfrecord.dataset(...)``: stages that keep every batch
AFTER_THE_READER = {
    "bare": lambda data: data,
    "map": lambda data: data.map(lambda b: {"index": b["index"] + 0}),
    "map-prefetch-options": lambda data: (
        data.map(lambda b: {"index": b["index"] + 0}, num_parallel_calls=2)
        .prefetch(2)
        .with_options(tf.data.Options())
    ),
}


# three training runs each (about 7 s of CPU): the fast run keeps `.map()`, globally shuffled
@pytest.mark.parametrize(
    "after",
    [pytest.param("bare", marks=SLOW), "map", pytest.param("map-prefetch-options", marks=SLOW)],
)
@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param({"shuffle": "global", "seed": 3}, id="global"),
        pytest.param({}, id="unshuffled", marks=SLOW),
        pytest.param({"in_memory": True, "shuffle": "global", "seed": 3}, id="memory", marks=SLOW),
    ],
)
def test_tfrecord_dataset_seeks_on_resume_behind_the_users_map(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pipeline: dict[str, Any], after: str
) -> None:
    """``tfrecord.dataset(...)`` (then ``.map()``...), a real SIGTERM, PreemptionCheckpoint."""
    n, batch = 403, 13
    files = _plain(tmp_path / "data", n, 3)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        train = AFTER_THE_READER[after](tfrecord.dataset(files, batch, **pipeline))
        return preemptible_run(train, "index", directory, at, EPOCHS)

    reference, (_, total) = run(tmp_path / "ref", None)
    before, (stop, _) = run(tmp_path / "p", (1, 17))
    assert stop is not None and stop.epoch == 1 and stop.step >= 17
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        resumed, (_, steps) = run(tmp_path / "p", None)
    assert steps == total == EPOCHS * -(-n // batch)
    assert f"Resumed the input at epoch 1, record {stop.step * batch}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text  # no replay
    assert before[1][: stop.step] + resumed[1] == reference[1]
    assert resumed[2] == reference[2]
    trained = sorted(i for b in before[1][: stop.step] + resumed[1] for i in b)
    assert trained == list(range(n))  # every example of the interrupted epoch once


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
def test_a_stage_that_may_drop_batches_replays_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``tfrecord.dataset(...).filter(...)``: the position is hidden; a replay, explained."""
    n, batch = 403, 13
    files = _plain(tmp_path / "data", n, 3)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        reader = tfrecord.dataset(files, batch, shuffle="global", seed=3)
        train = reader.filter(lambda b: tf.size(b["index"]) > 0)  # keeps all, may not
        return preemptible_run(train, "index", directory, at, EPOCHS)

    reference, _ = run(tmp_path / "ref", None)
    before, (stop, _) = run(tmp_path / "p", (1, 17))
    assert stop is not None
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        resumed, _ = run(tmp_path / "p", None)
    assert "through stages that may drop or add batches (Filter)" in caplog.text
    assert "replays the epoch" in caplog.text
    assert f"Skipped {stop.step} batches" in caplog.text
    assert "Resumed the input at" not in caplog.text
    assert before[1][: stop.step] + resumed[1] == reference[1]  # the replay, exact


def _texts(directory: Path, n: int) -> str:
    """``n`` token lists of long-tailed lengths (a plain TFRecordWriter), with their index."""
    from _tfrecord_data import example, int64_feature, write_records

    lengths = np.clip(np.random.default_rng(n).lognormal(2.3, 0.9, n).astype(int), 1, 90)
    records = [
        example(tokens=int64_feature(range(1, m + 1)), index=int64_feature([i]))
        for i, m in enumerate(lengths)
    ]
    return write_records(directory / "texts.tfrecord", records)


class _Watched(threading.Event):
    """A signal flag that says (``noticed``) when TensorFlow's watcher thread found it set."""

    def __init__(self) -> None:
        super().__init__()
        self.noticed = threading.Event()

    def is_set(self) -> bool:
        found = super().is_set()
        if found:
            self.noticed.set()
        return found


class _NoticedPreemption(tfr_hooks.PreemptionCheckpoint):
    """A ``PreemptionCheckpoint`` whose steps, once SIGTERM came, wait for TensorFlow's poll.

    The poll runs once a second in its own thread: on a loaded machine it may come steps
    late. Waiting for it (counted in steps, not seconds) puts the stop at the step after
    the signal, or the one after that, on any machine.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._signalled = _Watched()

    def before_run(self, run_context: Any) -> Any:
        watched = self._signalled
        if threading.Event.is_set(watched) and not watched.noticed.wait(timeout=60):
            raise AssertionError("TensorFlow's watcher thread never polled the signal")
        return super().before_run(run_context)


@pytest.mark.parametrize(
    "pipeline",
    [
        # three training runs each (about 9 s of CPU): with the slow tests
        pytest.param({"shuffle": "global", "seed": 3}, id="global", marks=SLOW),
        pytest.param({}, id="unshuffled", marks=SLOW),
    ],
)
def test_a_bucketed_stream_resumes_at_its_pool_and_skips_inside_it(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    pipeline: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches cut from sorted pools: the pass is entered at the pool's start (no replay)."""
    n, batch, pool = 300, 4, 8  # pools of 32 examples; 75 batches an epoch
    data = _texts(tmp_path, n)
    # the stop lands a step or two after the signal, never on the next pool's start
    monkeypatch.setattr(tfr_hooks, "PreemptionCheckpoint", _NoticedPreemption)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        source = tfrecord.source(
            data,
            batch,
            bucket_boundaries=[8, 16, 32],
            pad_to="longest",
            read_config=tfrecord.ReadConfig(bucket_pool=pool),
            **pipeline,
        )
        assert source.position is not None and source.position.grain == pool
        return preemptible_run(source, "index", directory, at, EPOCHS)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == EPOCHS * 75
    before, (stop, _) = run(tmp_path / "p", (1, 19))  # inside the third pool of epoch 1
    assert stop is not None and stop.epoch == 1 and 2 * pool < stop.step < 3 * pool, stop
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        after, (_, total) = run(tmp_path / "p", None)
    assert total == EPOCHS * 75
    entered = stop.step // pool * pool * batch  # the records of the pools before
    assert f"Resumed the input at epoch 1, record {entered}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text  # no replay
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    resumed = [i for b in before[1][: stop.step] + after[1] for i in np.ravel(b)]
    assert sorted(resumed) == list(range(n))  # every example once
    with pytest.raises(ValueError, match="pool's start"):
        tfrecord.source(
            data, batch, bucket_boundaries=[8], read_config=tfrecord.ReadConfig(bucket_pool=pool)
        ).position.seek(0, batch)  # type: ignore[union-attr]


def _damaged(directory: Path) -> tuple[list[str], list[int]]:
    """Four files of 100 records; three damaged inside their blocks (one record lost each)."""
    from test_damaged_records import flip_data, flip_header, not_an_example, write

    directory.mkdir()
    files = [
        flip_data(write(directory / "a.tfrecord", range(0, 100)), 40),
        flip_header(write(directory / "b.tfrecord", range(100, 200)), 70),
        not_an_example(directory / "c.tfrecord", range(200, 300), 250),
        write(directory / "d.tfrecord", range(300, 400)),
    ]
    return [str(f) for f in files], sorted(set(range(400)) - {40, 170, 250})


def _packed(directory: Path) -> tuple[Path, list[int]]:
    """403 examples, 4 a record, in 3 shards: each shard's last record holds fewer."""
    tfrecord.write({"id": np.arange(403)}, directory, examples_per_record=4, shards=3)
    return directory, list(range(403))


# about 4 s of CPU each: the fast run keeps the packed one (the window arithmetic)
@pytest.mark.parametrize(
    "layout", [pytest.param("damaged", marks=SLOW), pytest.param("packed", marks=SLOW)]
)
def test_global_order_on_damaged_files_and_packed_shards_resumes_by_a_seek(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: str
) -> None:
    """``max_corrupt_records`` and packed shards under ``shuffle="global"``: a seek, exact."""
    batch = 13  # divides neither the 397 whole records nor the 403 examples
    extra: dict[str, Any] = {"max_corrupt_records": 3} if layout == "damaged" else {}
    data, whole = (_damaged if layout == "damaged" else _packed)(tmp_path / "data")
    per_epoch = -(-len(whole) // batch)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        source = tfrecord.source(data, batch, shuffle="global", seed=3, **extra)
        return preemptible_run(source, "id", directory, at, EPOCHS)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == EPOCHS * per_epoch
    before, (stop, _) = run(tmp_path / "p", (1, 17))
    assert stop is not None and stop.epoch == 1 and 17 <= stop.step < per_epoch
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        after, (_, total) = run(tmp_path / "p", None)
    assert total == EPOCHS * per_epoch
    assert f"Resumed the input at epoch 1, record {stop.step * batch}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text  # no replay
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    assert sorted(i for b in before[1][: stop.step] + after[1] for i in b) == whole
    assert reference[1] != reference[2]


# 11 positions a case (about 5 s of CPU): the fast run keeps the packed resume above
@pytest.mark.parametrize(
    "records",
    [pytest.param(384, marks=SLOW), pytest.param(400, marks=SLOW)],
    ids=["short-in-full-block", "in-tail"],
)
def test_packed_shards_entered_at_any_example_go_on_as_the_whole_pass(
    tmp_path: Path, records: int
) -> None:
    """Three windows of 512 records of 64 examples; each shard's last record is short.

    384 records a shard: the short record ends a full block of 128, whose window the
    epoch's order picks; 400: it is in a shard's last 16 records, dealt to a window.
    """
    n = 3 * (records * 64 - 5)
    tfrecord.write({"id": np.arange(n)}, tmp_path / "data", examples_per_record=64, shards=3)
    source = tfrecord.source(tmp_path / "data", 1000, shuffle="global", seed=5)
    position = source.position
    assert position is not None

    def ids_from(records: int) -> np.ndarray:
        position.seek(1, records)
        return np.concatenate([np.zeros(0, np.int64)] + [b["id"].numpy() for b in source.dataset])

    whole = ids_from(0)
    np.testing.assert_array_equal(np.sort(whole), np.arange(n))
    for at in (1, 13, 32_767, 32_768, 32_769, 40_000, 65_535, 65_536, 65_541, n - 1, n):
        np.testing.assert_array_equal(ids_from(at), whole[at:], err_msg=str(at))


@pytest.mark.parametrize(
    "reader", [pytest.param("source", marks=SLOW), pytest.param("dataset-map", marks=SLOW)]
)
def test_a_resumed_keras_model_reaches_the_weights_of_an_uninterrupted_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reader: str
) -> None:
    """BackupAndRestore through KerasCallbacks, resumed mid-epoch on shuffle='global'."""
    import keras

    from tfr_hooks import FunctionLoop, KerasCallbacks

    n, batch = 600, 20
    x = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
    y = (x @ np.arange(1, 5, dtype=np.float32))[:, None]
    tfrecord.write({"x": x, "y": y}, tmp_path / "data", shards=2)

    class Interrupt(keras.callbacks.Callback):
        def __init__(self, at: int) -> None:
            super().__init__()
            self.at, self.steps = at, 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps += 1
            if self.steps == self.at:
                raise KeyboardInterrupt("preempted")

    def train(backup: Path, interrupt: int | None) -> np.ndarray:
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
        read = tfrecord.source if reader == "source" else tfrecord.dataset
        source: Any = read(tmp_path / "data", batch, shuffle="global", seed=5, as_tuple=("x", "y"))
        if reader == "dataset-map":
            source = source.map(lambda x, y: (x * 1.0, y))
        callbacks: list[Any] = [keras.callbacks.BackupAndRestore(str(backup), save_freq=1)]
        if interrupt is not None:
            callbacks.append(Interrupt(interrupt))
        loop = FunctionLoop(source, model=model, hooks=[KerasCallbacks(callbacks, model=model)])
        with contextlib.suppress(KeyboardInterrupt):
            loop.run(epochs=3)
        return np.concatenate([w.reshape(-1) for w in model.get_weights()])

    reference = train(tmp_path / "ref", None)
    train(tmp_path / "b", 30 + 11)  # in epoch 1 (30 steps an epoch), at its step 11
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        resumed = train(tmp_path / "b", None)
    assert "Resumed the input at epoch 1, record" in caplog.text  # a seek, not a replay
    assert "Skipped" not in caplog.text
    np.testing.assert_allclose(resumed, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("pipeline", "entered"),
    [
        pytest.param("global", 3, marks=SLOW),
        pytest.param("unshuffled", 3, marks=SLOW),
        pytest.param("memory", 3, marks=SLOW),
        pytest.param("packed_global", 3, marks=SLOW),
        # pools of 2 batches: the second pool's start (FunctionLoop's case runs fast)
        pytest.param("global_bucketed", 2, marks=SLOW),
        # tfrecord.dataset(...).map(...) built in the graph, through tfrecord.batches_of
        ("dataset_map", 3),
    ],
)
def test_graph_mode_epoch_checkpoint_resumes_by_a_seek(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pipeline: str, entered: int
) -> None:
    """SessionLoop + EpochCheckpoint stopped mid-epoch: the resumed run seeks, exactly."""
    from _graph_resume_child import BATCH, StopAt, run, write_data
    from _graph_resume_child import EPOCHS as GRAPH_EPOCHS

    data = write_data(str(tmp_path / "data"))
    reference = run(data, pipeline, None)
    logdir = str(tmp_path / "ckpt")
    first = run(data, pipeline, logdir, StopAt(epoch=1, step=3))
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        second = run(data, pipeline, logdir)
    assert second["initial"] == (1, 3)
    assert f"Resumed the input at epoch 1, record {entered * BATCH}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text
    assert first["steps"] + second["steps"] == reference["steps"]
    assert len(second["history"]["loss"]) == GRAPH_EPOCHS - 1
    for name, value in second["state"].items():
        np.testing.assert_array_equal(value, reference["state"][name], err_msg=name)


@pytest.mark.slow  # three graph-mode runs (about 4 s of CPU); FunctionLoop's case runs fast
def test_graph_mode_epoch_checkpoint_replays_behind_a_filter_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``batches_of(tfrecord.dataset(...).filter(...))``: the epoch replayed, explained."""
    from _graph_resume_child import StopAt, run, write_data

    data = write_data(str(tmp_path / "data"))
    reference = run(data, "dataset_filter", None)
    logdir = str(tmp_path / "ckpt")
    first = run(data, "dataset_filter", logdir, StopAt(epoch=1, step=3))
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        second = run(data, "dataset_filter", logdir)
    assert "through stages that may drop or add batches (Filter)" in caplog.text
    assert "Skipped 3 batches" in caplog.text and "Resumed the input at" not in caplog.text
    assert first["steps"] + second["steps"] == reference["steps"]


@pytest.mark.slow  # two workers on 127.0.0.1, three clusters; about a minute of CPU
@pytest.mark.parametrize("pool", [None, "2"], ids=["batches", "bucketed-pools-of-2"])
def test_mwms_workers_resume_their_shares_by_a_seek(tmp_path: Path, pool: str | None) -> None:
    """shuffle='global' under MultiWorkerMirroredStrategy, a worker SIGTERMed mid-epoch.

    Bucketed, each worker's pools of 2 batches (4 steps): step 5 is entered at the
    second pool's start and the step inside it is skipped.
    """
    from _cluster import run_cluster

    n = 600  # 2 files of 300: each worker's share 300 records, 19 batches of 16
    tfrecord.write({"index": np.arange(n)}, tmp_path / "data" / "train", shards=2)
    argv = ["tests/_multi_worker_child.py", "order", str(tmp_path / "data"), "{out}"]
    env = {"GLOBAL_BATCH": "16", "ORDER_READ": "global"}
    if pool is not None:
        env["ORDER_BUCKET_POOL"] = pool

    def cluster(out: str, extra: dict[str, str]) -> list:
        args = [a.replace("{out}", out) for a in argv]
        return run_cluster(args, 2, timeout=300, env={**env, **extra})

    reference = [w.result() for w in cluster(str(tmp_path / "ref"), {})]
    term = {"TERM_AT_EPOCH": "1", "TERM_AT_BATCH": "5", "TERM_TASK": "1"}
    workers = cluster(str(tmp_path / "run"), term)
    before = []
    for worker in workers:
        assert worker.returncode == 42, worker.stderr[-3000:]
        line = [x for x in worker.stdout.splitlines() if x.startswith("PREEMPTED ")][-1]
        before.append(json.loads(line[len("PREEMPTED ") :]))
    step = before[0]["step"]
    after = [w.result() for w in cluster(str(tmp_path / "run"), {})]
    for ref, old, new in zip(reference, before, after, strict=True):
        assert new["steps"] == ref["steps"]
        assert old["seen"]["1"][:step] + new["seen"]["1"] == ref["seen"]["1"]
        assert new["seen"]["2"] == ref["seen"]["2"]
        assert new["position"]["epoch"] == EPOCHS  # the passes it read, counted
    for epoch in ("1", "2"):
        examples = [
            i
            for old, new in zip(before, after, strict=True)
            for b in old["seen"].get(epoch, [])[:step] + new["seen"][epoch]
            for i in b
        ]
        assert sorted(examples) == list(range(n)), epoch


def _rchar() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


#: the batches a pipeline reads ahead of the one asked for, at most (its prefetch stages)
READ_AHEAD = 8


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes in /proc/self/io")
@pytest.mark.parametrize(
    ("pipeline", "reader"),
    [  # a pass of 200,000 records each (about 6 s of CPU): two in the fast run
        pytest.param({"shuffle": "global", "seed": 3}, "source", id="global-source", marks=SLOW),
        pytest.param({"shuffle": "global", "seed": 3}, "dataset", id="global-dataset", marks=SLOW),
        pytest.param({}, "source", id="unshuffled-source", marks=SLOW),
        pytest.param({}, "dataset", id="unshuffled-dataset", marks=SLOW),
        pytest.param(
            {"read_config": tfrecord.ReadConfig(num_parallel_reads=1)},
            "dataset",
            id="1-read-dataset",
            marks=SLOW,
        ),
    ],
)
def test_a_resumed_read_does_not_read_the_records_before_its_position(
    tmp_path: Path, pipeline: dict[str, Any], reader: str
) -> None:
    """The first batch after a seek: its records, and the bytes read up to it.

    The record index is built (and the files' first bytes read) before anything is
    measured. Unshuffled, a seek enters each file at the block of 128 records holding
    its position, through a read buffer (``seek.py``'s 256 KiB, records after the
    position): at most a block and that buffer a file, plus the batches read ahead
    (about 8% of these files). In the global order it rereads the window it starts in
    (32,768 records) and reads ahead the next one.
    """
    from tfr_hooks.tfrecord.formats.index import INDEX_BLOCK
    from tfr_hooks.tfrecord.formats.records import READ_BUFFER as _READ_BUFFER
    from tfr_hooks.tfrecord.pipelines.contract import position_of_source
    from tfr_hooks.tfrecord.pipelines.orders.global_order import DEFAULT_WINDOW

    n, batch, shards = 200_000, 100, 4
    files = _plain(tmp_path / "data", n, shards, pad=24)
    size = sum(Path(f).stat().st_size for f in files)
    record = size / n
    if reader == "source":
        source = tfrecord.source(files, batch, **pipeline)
        data, position = source.dataset, source.position
    else:  # the dataset a script gives the loop, and the facts the loop finds for it
        data = tfrecord.dataset(files, batch, **pipeline).map(lambda b: b)
        position = position_of_source(data)
    assert position is not None
    position.seek(0, 0)
    whole = [i for b in data for i in b["index"].numpy()]  # epoch 0's order, whole
    assert sorted(whole) == list(range(n))
    position.seek(0, 50 * batch)  # builds the index (a read of every file), unmeasured
    next(iter(data))
    # each file: the index and the file's key checked (4 KiB at each end), a few KiB
    limit = shards * (16 << 10) + READ_AHEAD * batch * record
    if "shuffle" in pipeline:
        limit += 2 * DEFAULT_WINDOW * record + shards * INDEX_BLOCK * record
    else:  # the block the position is in, and the read buffer from there
        limit += shards * (INDEX_BLOCK * record + _READ_BUFFER)
    read = {}
    for fraction in (0.1, 0.9):
        records = int(n * fraction) // batch * batch
        position.seek(0, records)
        before = _rchar()
        first = next(iter(data))
        read[fraction] = _rchar() - before
        assert first["index"].numpy().tolist() == whole[records : records + batch], fraction
    # replayed, or each file entered at its start, the late read takes 90% of the files
    assert read[0.9] <= limit < size * 0.6, (read, limit, size)
    assert read[0.1] <= limit, (read, limit, size)


# each case checks every record (about 7 s of CPU): 2 reads in the fast run
@pytest.mark.parametrize(
    "reads",
    [pytest.param(n, marks=SLOW) for n in (1, 2, 3, 5)],
)
def test_an_unshuffled_stream_entered_at_any_record_goes_on_as_the_interleave(
    tmp_path: Path, reads: int
) -> None:
    """The interleave's state, played forward by arithmetic, at every record."""
    from tfr_hooks.tfrecord.formats.reading import RecordFiles
    from tfr_hooks.tfrecord.pipelines.position import ReadPosition
    from tfr_hooks.tfrecord.pipelines.seek import stream_from_position

    counts = [300, 1, 0, 129, 128, 5, 260]
    files = []
    for f, count in enumerate(counts):
        path = str(tmp_path / f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for r in range(count):
                writer.write(f"{f}:{r}".encode())
        files.append(path)
    paths = tf.data.Dataset.from_tensor_slices(files)
    parallel: dict[str, Any] = {"num_parallel_calls": reads} if reads > 1 else {}
    whole = list(
        paths.interleave(tf.data.TFRecordDataset, cycle_length=reads, block_length=1, **parallel)
    )
    position = ReadPosition(1)
    stream = stream_from_position(
        RecordFiles(files, ""), reads=reads, deterministic=True, position=position
    )
    for records in [*range(0, 40), *range(40, sum(counts) + 2, 37), sum(counts) - 1]:
        position.seek(0, records)
        assert [r.numpy() for r in stream] == [r.numpy() for r in whole[records:]], records


def test_the_input_state_is_a_few_integers(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", 300, 2)
    source = tfrecord.source(data, 10, shuffle="global", seed=7)
    position = source.position
    assert position is not None
    position.seek(4, 120)
    state = position.state()
    assert state == {"seed": 7, "workers": 1, "epoch": 4, "records": 120}
    assert len(json.dumps(state).encode()) <= 1024
    first = next(iter(source.dataset))  # the pass starts there, then counts itself
    assert position.state() == {"seed": 7, "workers": 1, "epoch": 5, "records": 0}
    assert int(tf.size(first["index"])) == 10


@pytest.mark.slow  # five sources built, two held in memory: 2 to 3 s (fast-run budget)
def test_what_replays_has_no_position(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", 300, 2)
    assert tfrecord.source(data, 10, shuffle=64, seed=1).position is None
    # in memory as streamed: a buffer's order is entered by replay
    assert tfrecord.source(data, 10, shuffle=64, seed=1, in_memory=True).position is None
    assert tfrecord.source(data, 10, shuffle="global", num_epochs=2).position is None
    bucketed: dict[str, Any] = {"bucket_boundaries": [2], "bucket_by": "index"}
    assert tfrecord.source(data, 10, shuffle=64, **bucketed).position is None
    assert tfrecord.source(data, 10, in_memory=True, **bucketed).position is None
    with pytest.raises(ValueError, match="epoch"):
        tfrecord.source(data, 10, shuffle="global", seed=1).position.seek(-1, 0)  # type: ignore[union-attr]


def test_the_facts_are_values_and_the_position_is_the_sources(tmp_path: Path) -> None:
    """``ReadFacts`` holds values (two reads of one data set have equal facts); the
    position (live variables) is reached from the source, and found behind a map."""
    from tfr_hooks.tfrecord.pipelines.contract import position_of_source

    data = _write(tmp_path / "data", 40, 2)
    source = tfrecord.source(data, 10, shuffle="global", seed=1)
    again = tfrecord.source(data, 10, shuffle="global", seed=1)
    assert source.facts == again.facts and source.position is not again.position
    assert isinstance(source.position, tfrecord.ReadPosition)
    assert source.map(lambda b: b).prefetch(1).position is source.position
    assert position_of_source(source) is source.position
    reader = tfrecord.dataset(data, 10, shuffle="global", seed=1)
    assert isinstance(position_of_source(reader.map(lambda b: b)), tfrecord.ReadPosition)
    assert position_of_source(reader.filter(lambda b: True)) is None  # may drop batches
    assert position_of_source(tf.data.Dataset.range(3)) is None


@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param({}, id="unshuffled"),
        pytest.param({"shuffle": "global", "seed": 3}, id="global", marks=SLOW),
        pytest.param({"in_memory": True}, id="memory", marks=SLOW),
    ],
)
def test_a_pass_entered_mid_way_is_shorter_than_the_cardinality_it_declares(
    tmp_path: Path, pipeline: dict[str, Any]
) -> None:
    """``tfrecord.dataset``'s exact ``cardinality()`` does not stop a pass after a seek."""
    from tfr_hooks.tfrecord.pipelines.contract import position_of_source

    data = _write(tmp_path / "data", 300, 2)
    reader = tfrecord.dataset(data, 10, **pipeline)
    assert int(reader.cardinality()) == 30  # Keras fit still knows the epoch's length
    train = reader.map(lambda b: b["index"])
    position = position_of_source(train)
    assert position is not None
    position.seek(0, 120)
    assert len(list(train)) == 18  # the rest of the pass, and no cardinality error
    assert len(list(train)) == 30  # the next pass, whole


def test_the_facts_a_reader_notes_go_with_its_dataset(tmp_path: Path) -> None:
    """Held weakly: a dropped dataset takes its facts (and its position) with it."""
    import gc
    import weakref

    from tfr_hooks.tfrecord.pipelines import contract

    data = _write(tmp_path / "data", 300, 2)
    reader = tfrecord.dataset(data, 10, shuffle="global", seed=1)
    assert reader in contract._READS
    assert contract.facts_of_dataset(reader.prefetch(1)).examples == 300
    gone = weakref.ref(reader)
    del reader
    gc.collect()  # (other tests' datasets may go too: count this one, not the table)
    assert gone() is None  # nothing the facts hold keeps the dataset alive


def test_batches_of_reads_a_graph_dataset_with_or_without_a_position(tmp_path: Path) -> None:
    """``tfrecord.batches_of`` in a graph whose session initializes no local variable."""
    data = _write(tmp_path / "data", 300, 2)
    for options, seeks in [
        ({"shuffle": "global", "seed": 1}, True),
        ({"shuffle": 8}, False),
    ]:
        with tf.Graph().as_default():
            batches = tfrecord.batches_of(tfrecord.dataset(data, 10, **options).prefetch(1))
            assert (batches.position is not None) is seeks, options
            with tf.compat.v1.Session() as session:
                ids = []
                session.run(batches.initializers)
                with contextlib.suppress(tf.errors.OutOfRangeError):
                    while True:
                        ids.extend(session.run(batches.tensors)["index"].tolist())
            assert sorted(ids) == list(range(300)), options
