"""A mixture's position: weights changed at a checkpoint, and each source's reports.

A run restarted from its checkpoint with other ``weights=`` goes on where every source
stopped (no record of a source repeated within its epoch), draws at the new weights from
there, starts an added source at its beginning and drops a removed one
(:mod:`tfr_hooks.tfrecord.pipelines.mixture_position`). The history and TensorBoard get
each source's examples and epochs of every epoch, for any ``num_epochs``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _tfrecord_data import example, int64_feature, write_records
from tfr_hooks import tfrecord

#: the id of record ``i`` of source ``s`` is ``s * SPAN + i``: a batch's ids say its sources
SPAN = 100_000


def _write(directory: Any, source: int, n: int, *, files: int = 2) -> str:
    """``n`` records of ``source`` in ``files`` files under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        records = [
            example(id=int64_feature([source * SPAN + i]), src=int64_feature([source]))
            for i in range(f, n, files)
        ]
        write_records(str(directory / f"part-{f}.tfrecord"), records)
    return str(directory)


def _stream(sources: dict[str, str], name: str, count: int) -> list[int]:
    """The first ``count`` draws of source ``name``: its stream in any mixture of seed 3."""
    alone = tfrecord.dataset(
        {name: sources[name]},
        64,
        weights={name: 1},
        shuffle="global",
        seed=3,
        num_epochs=None,
        as_tuple=("id", "src"),
    )
    ids: list[int] = []
    for batch, _ in alone:
        ids.extend(batch.numpy().tolist())
        if len(ids) >= count:
            return ids[:count]
    raise AssertionError("unreachable: the stream never ends")


def _by_source(batches: list[list[int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for batch in batches:
        for i in batch:
            out.setdefault(i // SPAN, []).append(i)
    return out


def _check_epochs_once(ids: list[int], size: int) -> None:
    """Each record of a source once per its epoch: every chunk of ``size`` draws distinct."""
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        assert len(set(chunk)) == len(chunk), start


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("reweight")
    return {
        "web": _write(root / "web", 0, 300),
        "books": _write(root / "books", 1, 60, files=1),
        "code": _write(root / "code", 2, 40, files=1),
    }


@pytest.mark.slow  # three mixed reads and two sources read alone: about 7 s of CPU
def test_a_seek_with_a_state_of_other_weights_goes_on_where_each_source_stopped(small, caplog):
    """The position alone: a read of other weights seeks with the state saved by the first."""
    batch, stop = 40, 4  # the first read stops after 4 batches
    first = tfrecord.source(
        {"web": small["web"], "books": small["books"]},
        batch,
        weights={"web": 0.75, "books": 0.25},
        shuffle="global",
        seed=3,
        num_epochs=None,
        as_tuple=("id", "src"),
    )
    assert first.position is not None
    before = [b.numpy().tolist() for b, _ in first.dataset.take(stop)]
    saved = first.position.input_state()
    assert saved is not None and len(saved) <= 1024
    second = tfrecord.source(
        {"web": small["web"], "code": small["code"]},
        batch,
        weights={"web": 0.25, "code": 0.75},  # books removed, code added
        shuffle="global",
        seed=3,
        num_epochs=None,
        as_tuple=("id", "src"),
    )
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.pipelines.mixture_position"):
        second.position.seek(0, stop * batch, state=saved)
    assert f"goes on at global position {stop * batch}" in caplog.text
    after = [b.numpy().tolist() for b, _ in second.dataset.take(10)]
    was, now = _by_source(before), _by_source(after)
    web = was[0] + now[0]
    assert web == _stream(small, "web", len(web))  # web goes on where it stopped
    assert now[2] == _stream(small, "code", len(now[2]))  # code from its beginning
    assert 1 not in now  # books dropped
    for ids in after:
        assert abs(np.mean(np.array(ids) // SPAN == 2) - 0.75) <= 0.05
    # the new state holds both stretches: the earlier positions stay reproducible
    state = second.position.mixture
    assert [s.start for s in state.stretches] == [0, stop * batch]
    assert state.stretches[0].names == ("web", "books")


# two mixture builds and a seek, about 4 s of CPU: the fast run enters a reweighted
# mixture's stream at a position (test_tfrecord_mixture.py)
@pytest.mark.slow
def test_a_seek_with_a_state_of_the_same_weights_reads_as_before(small):
    weights = {"web": 0.6, "books": 0.4}
    pair = {"web": small["web"], "books": small["books"]}
    read = lambda: tfrecord.source(  # noqa: E731
        pair, 20, weights=weights, shuffle="global", seed=3, as_tuple=("id", "src")
    )
    first = read()
    saved = first.position.input_state()  # a fresh read's: position 0, these weights
    whole = [b.numpy().tolist() for b, _ in first.dataset.take(6)]
    resumed = read()
    resumed.position.seek(0, 3 * 20, state=saved)
    assert [b.numpy().tolist() for b, _ in resumed.dataset.take(3)] == whole[3:]
    assert resumed.position.input_state() == saved


def _run(sources, weights, directory, at, epochs, *, batch):
    """A FunctionLoop with a PreemptionCheckpoint; a real SIGTERM after ``at``."""
    from helpers import SigtermAt

    data = tfrecord.source(
        sources, batch, weights=weights, shuffle="global", seed=3, as_tuple=("id", "src")
    )
    seen: dict[int, list[list[int]]] = {}
    counter = tf.Variable(0, dtype=tf.int64)
    state: list[Any] = []

    def note(ids: Any) -> Any:
        seen.setdefault(state[0].epoch, []).append(ids.numpy().tolist())
        return np.int64(0)

    def step(b: Any) -> dict[str, Any]:
        tf.py_function(note, [b[0]], tf.int64)
        counter.assign_add(1)
        return {"steps": tf.cast(counter, tf.float64)}

    hooks: list[Any] = [tfr_hooks.PreemptionCheckpoint(directory, objects={"counter": counter})]
    if at is not None:
        hooks.insert(0, SigtermAt(*at))
    loop = tfr_hooks.FunctionLoop(data, step_fn=step, hooks=hooks)
    state.append(loop.loop)
    history, stop = {}, None
    try:
        history = loop.run(epochs=epochs)
    except tfr_hooks.Preempted as preempted:
        stop = preempted
    return seen, stop, history


@pytest.mark.slow  # two FunctionLoop runs, one SIGTERMed, and the sources read alone: ~15 s
def test_a_preempted_run_restarted_with_other_weights_goes_on_where_each_source_stopped(
    tmp_path,
):
    """PreemptionCheckpoint, a real SIGTERM mid-epoch, a restart with other weights."""
    root = tmp_path / "data"
    sources = {
        "web": _write(root / "web", 0, 2000),
        "books": _write(root / "books", 1, 300, files=1),
        "old": _write(root / "old", 2, 200, files=1),
        "code": _write(root / "code", 3, 150, files=1),
    }
    sizes = {0: 2000, 1: 300, 2: 200, 3: 150}
    batch = 64
    first = {"web": 0.5, "books": 0.3, "old": 0.2}
    second = {"web": 0.2, "books": 0.5, "code": 0.3}  # old removed, code added
    run1 = {k: sources[k] for k in first}
    before, stop, _ = _run(run1, first, tmp_path / "ckpt", (1, 11), 3, batch=batch)
    assert stop is not None and stop.epoch == 1 and stop.step >= 11
    trained = before[0] + before[1][: stop.step]
    run2 = {k: sources[k] for k in second}
    after, again, history = _run(run2, second, tmp_path / "ckpt", None, 3, batch=batch)
    assert again is None and sorted(after) == [1, 2]
    resumed = after[1] + after[2]
    was, now = _by_source(trained), _by_source(resumed)
    for source, name in ((0, "web"), (1, "books")):  # kept: each goes on where it stopped
        ids = was[source] + now[source]
        assert ids == _stream(sources, name, len(ids)), name
        _check_epochs_once(ids, sizes[source])
    assert 2 not in now  # removed
    assert now[3] == _stream(sources, "code", len(now[3]))  # added: from its beginning
    _check_epochs_once(now[3], sizes[3])
    weights = {0: 0.2, 1: 0.5, 3: 0.3}
    for ids in resumed:  # every whole batch after the restart at the new weights
        if len(ids) == batch:
            for source, weight in weights.items():
                share = np.mean(np.array(ids) // SPAN == source)
                assert abs(share - weight) <= 0.05, (source, share)
    # each epoch of the new run is the new sources' records: 2,450 positions
    assert sum(len(b) for b in after[2]) == 2000 + 300 + 150
    # the history of the resumed epoch counts each source's examples in both stretches
    epoch1 = _by_source(before[1][: stop.step] + after[1])
    for source, name in ((0, "web"), (1, "books"), (2, "old"), (3, "code")):
        assert history[f"input/examples/{name}"][0] == len(epoch1.get(source, [])), name


@pytest.mark.slow  # a FunctionLoop run of two epochs with TensorBoard: about 5 s of CPU
def test_history_and_tensorboard_get_each_sources_examples_for_any_num_epochs(small, tmp_path):
    """num_epochs=2: a loop epoch is two epochs of the mixture; both reports count it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    seen: list[np.ndarray] = []

    def note(src: Any) -> Any:
        seen.append(src.numpy())
        return np.int64(0)

    def step(batch: Any) -> dict[str, Any]:
        tf.py_function(note, [batch[1]], tf.int64)
        return {"n": tf.cast(tf.size(batch[1]), tf.float32)}

    weights = {"web": 0.5, "books": 0.3, "code": 0.2}
    data = tfrecord.source(
        small, 64, weights=weights, shuffle="global", seed=3, num_epochs=2, as_tuple=("id", "src")
    )
    assert data.position is not None  # any num_epochs: a position
    board = tfr_hooks.TensorBoardLogger(tmp_path / "tb")
    history = tfr_hooks.FunctionLoop(data, step_fn=step, hooks=[board]).run(epochs=2)
    per_epoch = -(-2 * 400 // 64)
    epochs = [np.concatenate(seen[:per_epoch]), np.concatenate(seen[per_epoch:])]
    assert [len(e) for e in epochs] == [800, 800]
    events = EventAccumulator(str(tmp_path / "tb" / "train"))
    events.Reload()
    sizes = {"web": 300, "books": 60, "code": 40}
    for source, name in enumerate(weights):
        counts = [int(np.sum(e == source)) for e in epochs]
        assert history[f"input/examples/{name}"] == counts, name
        done = [sum(counts[: e + 1]) // sizes[name] for e in range(2)]
        assert history[f"input/epochs/{name}"] == done, name
        scalars = events.Scalars(f"input/examples/{name}")
        assert [(s.step, s.value) for s in scalars] == list(enumerate(map(float, counts)))
        assert [s.value for s in events.Scalars(f"input/epochs/{name}")] == done


@pytest.mark.slow  # two graph-mode SessionLoop runs and the sources read alone: ~10 s of CPU
def test_graph_mode_epoch_checkpoint_restarted_with_other_weights(tmp_path):
    """SessionLoop + EpochCheckpoint stopped mid-epoch, then resumed at other weights."""
    from _graph_resume_child import BATCH, SEED, StopAt, run, write_data

    data = write_data(str(tmp_path / "data"))
    logdir = str(tmp_path / "ckpt")
    first = run(data, "mixture_ac_75", logdir, StopAt(epoch=1, step=3))
    assert tuple(first["steps"][-1][:2]) == (1, 2)  # stopped after epoch 1's third step
    second = run(data, "mixture_ac_25", logdir)
    assert second["initial"] == (1, 3)
    trained = [ids for _, _, ids in first["steps"]]
    resumed = [ids for _, _, ids in second["steps"]]
    for name, pick in (("a", lambda i: i < 1000), ("c", lambda i: i >= 1000)):
        ids = [i for batch in trained + resumed for i in batch if pick(i)]
        alone = tfrecord.dataset(
            {name: data["plain" if name == "a" else "other"]},
            BATCH,
            weights={name: 1},
            shuffle="global",
            seed=SEED,
            num_epochs=None,
        )
        stream = [int(i) for b in alone.take(-(-len(ids) // BATCH)) for i in b["id"]]
        assert ids == stream[: len(ids)], name  # each goes on where it stopped
        _check_epochs_once(ids, 44 if name == "a" else 20)
    for ids in resumed:  # at the new weights: a 0.25, c 0.75, within a record a batch
        if len(ids) == BATCH:
            assert abs(np.mean(np.array(ids) >= 1000) - 0.75) <= 1 / BATCH + 1e-9
