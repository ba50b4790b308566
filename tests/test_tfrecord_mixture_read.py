"""Mixtures through the readers: ``files`` a mapping of named sources, ``weights=``.

The readers (``dataset``, ``source``, graph-mode ``read_batches``) read several named
sources at chosen weights through the mixture's order
(:mod:`tfr_hooks.tfrecord.pipelines.orders.mixture`): the shares of the batches they
yield, each source's records once per its own epoch, the same stream for the same seed,
a ``map_fn`` a source, and the errors that name what is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _tfrecord_data import example, float_feature, int64_feature, write_records
from tfr_hooks import tfrecord

WEB, BOOKS, CODE = 0, 1, 2
BATCH = 256


def _write(directory, source: int, n: int, *, files: int = 2, extra: bool = False) -> str:
    """``n`` records of ``source`` (ids 0..n-1) in ``files`` files under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        ids = range(f, n, files)
        records = []
        for i in ids:
            features = {"id": int64_feature([i]), "src": int64_feature([source])}
            if extra:
                features["score"] = float_feature([0.5])
            records.append(example(**features))
        write_records(str(directory / f"part-{f}.tfrecord"), records)
    return str(directory)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    return {
        "web": _write(root / "web", WEB, 3000),
        "books": _write(root / "books", BOOKS, 700),
        "code": _write(root / "code", CODE, 50, files=1),
    }


WEIGHTS = {"web": 0.5, "books": 0.3, "code": 0.2}


def _mixture(sources, **options):
    given = {"shuffle": "global", "seed": 3, "num_epochs": None, "as_tuple": ("id", "src")}
    given.update(options)
    weights = given.pop("weights", WEIGHTS)
    return tfrecord.dataset(sources, BATCH, weights=weights, **given)


def _stream(data, batches: int) -> tuple[np.ndarray, np.ndarray]:
    ids, srcs = [], []
    for i, s in data.take(batches):
        ids.append(i.numpy())
        srcs.append(s.numpy())
    return np.concatenate(ids), np.concatenate(srcs)


@pytest.fixture(scope="module")
def stream(sources):
    """The first 80 batches of the mixture of seed 3: read once for the tests that read it."""
    return _stream(_mixture(sources), 80)


def test_shares_of_every_batch_and_window(stream):
    _, srcs = stream
    assert len(srcs) == 80 * BATCH
    for b in range(80):
        batch = srcs[b * BATCH : (b + 1) * BATCH]
        for source, weight in zip((WEB, BOOKS, CODE), WEIGHTS.values(), strict=True):
            assert abs(np.mean(batch == source) - weight) <= 0.05
    window = 10_000
    for source, weight in zip((WEB, BOOKS, CODE), WEIGHTS.values(), strict=True):
        counts = np.concatenate(([0], np.cumsum(srcs == source)))
        shares = (counts[window:] - counts[:-window]) / window
        assert np.abs(shares - weight).max() <= 0.005


def test_each_record_once_per_its_sources_epoch(stream):
    ids, srcs = (part[: 40 * BATCH] for part in stream)  # 10,240 positions: code cycles ~40 times
    code = ids[srcs == CODE]
    epochs = [code[e * 50 : (e + 1) * 50] for e in range(len(code) // 50)]
    assert len(epochs) >= 30
    for epoch in epochs:
        assert sorted(epoch) == list(range(50))  # each record once per its epoch
    assert len({tuple(e) for e in epochs}) == len(epochs)  # a new order each epoch
    web = ids[srcs == WEB]  # web in its second epoch while code is in its 40th
    assert sorted(web[:3000]) == list(range(3000))
    assert len(set(web[3000:])) == len(web) - 3000
    books = ids[srcs == BOOKS]
    for e in range(len(books) // 700):
        assert sorted(books[e * 700 : (e + 1) * 700]) == list(range(700))


@pytest.mark.slow  # four mixed reads of every source: about 12 s of CPU
def test_same_seed_same_stream_another_seed_another(sources):
    first, _ = _stream(_mixture(sources, seed=3), 6)
    again, _ = _stream(_mixture(sources, seed=3), 6)
    other, _ = _stream(_mixture(sources, seed=4), 6)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.slow  # two passes of a mixture: about 3 s of CPU
def test_an_epoch_is_the_sum_of_the_sources_and_passes_go_on(sources):
    data = _mixture(sources, num_epochs=1)
    total = 3000 + 700 + 50
    assert int(data.cardinality()) == -(-total // BATCH)
    first, first_src = _stream(data, 100)
    second, second_src = _stream(data, 100)  # the next pass: each source goes on
    assert len(first) == len(second) == total
    code = np.concatenate([first[first_src == CODE], second[second_src == CODE]])
    for e in range(len(code) // 50):
        assert sorted(code[e * 50 : (e + 1) * 50]) == list(range(50))


@pytest.mark.slow  # a graph-mode read beside the eager one: about 10 s of CPU
def test_source_and_graph_mode_read_batches_take_the_same_arguments(sources):
    read = tfrecord.source(
        sources,
        BATCH,
        weights=WEIGHTS,
        shuffle="global",
        seed=3,
        num_epochs=None,
        as_tuple=("id", "src"),
    )
    np.testing.assert_array_equal(_stream(read.dataset, 3)[0], _stream(_mixture(sources), 3)[0])
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            sources,
            BATCH,
            weights=WEIGHTS,
            shuffle="global",
            seed=3,
            num_epochs=1,
            as_tuple=("id", "src"),
        )
        with tf.compat.v1.Session() as session:
            session.run(batches.initializers)
            srcs = []
            try:
                while True:
                    srcs.append(session.run(batches.tensors[1]))
            except tf.errors.OutOfRangeError:
                pass
    srcs = np.concatenate(srcs)
    assert len(srcs) == 3000 + 700 + 50
    assert abs(np.mean(srcs == WEB) - 0.5) <= 0.005


@pytest.mark.slow  # two sources parsed by their own plans: about 8 s of CPU
def test_a_map_fn_a_source_maps_other_features_to_one_structure(sources, tmp_path):
    scored = _write(tmp_path / "scored", CODE, 40, files=1, extra=True)
    mixed = {"web": sources["web"], "scored": scored}
    with pytest.raises(ValueError, match=r"differ between them: \['score'\]"):
        tfrecord.dataset(mixed, BATCH, weights={"web": 1, "scored": 1}, shuffle="global")
    keep = lambda x: {"id": x["id"], "src": x["src"], "w": tf.constant(1.0)}  # noqa: E731
    data = tfrecord.dataset(
        mixed,
        BATCH,
        weights={"web": 0.75, "scored": 0.25},
        shuffle="global",
        seed=1,
        num_epochs=None,
        map_fn={"web": keep, "scored": lambda x: {"id": x["id"], "src": x["src"], "w": x["score"]}},
    )
    batch = next(iter(data))
    weights, srcs = batch["w"].numpy(), batch["src"].numpy()
    np.testing.assert_array_equal(weights == 0.5, srcs == CODE)
    assert abs(np.mean(srcs == CODE) - 0.25) <= 0.05


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"weights": {"web": 1, "books": 1}}, r"missing \['code'\].*Received: weights="),
        ({"weights": {"web": 1, "books": 1, "code": 1, "x": 1}}, r"unknown \['x'\]"),
        ({"weights": {"web": -1, "books": 1, "code": 1}}, r"Received: weights="),
        ({"weights": {"web": 0, "books": 0, "code": 0}}, r"above 0.*Received: weights="),
        ({"shuffle": 100}, r"'global' with weights=.*Received: shuffle=100"),
        ({"shuffle": None}, r"Received: shuffle=None"),
        ({"in_memory": True}, r"Received: in_memory=True"),
    ],
)
def test_errors_name_the_argument(sources, given, match):
    options = {"weights": WEIGHTS, "shuffle": "global", **given}
    with pytest.raises(ValueError, match=match):
        tfrecord.dataset(sources, BATCH, **options)


def test_a_mapping_of_sources_needs_weights_and_weights_a_mapping(sources):
    with pytest.raises(ValueError, match=r"Expected weights=.*Received: files="):
        tfrecord.dataset(sources, BATCH, shuffle="global")
    with pytest.raises(ValueError, match=r"Expected `files` to be a mapping.*Received: files="):
        tfrecord.dataset(sources["web"], BATCH, weights={"web": 1}, shuffle="global")
    with pytest.raises(TypeError, match=r"Received: weights=\[1, 2\]"):
        tfrecord.dataset(sources, BATCH, weights=[1, 2], shuffle="global")


@pytest.mark.slow  # three FunctionLoop runs, one SIGTERMed: about 10 s of CPU
def test_a_preempted_mixture_resumes_by_a_seek_to_the_same_batches(tmp_path, caplog):
    """FunctionLoop, PreemptionCheckpoint, a real SIGTERM mid-epoch: a seek, the same batches."""
    import logging

    from helpers import preemptible_run

    root = tmp_path / "data"
    mixed = {
        "web": _write(root / "web", WEB, 300),
        "books": _write(root / "books", BOOKS, 40, files=1),
    }
    batch, epochs = 13, 3
    per_epoch = -(-340 // batch)

    def run(directory, at):
        source = tfrecord.source(
            mixed, batch, weights={"web": 0.6, "books": 0.4}, shuffle="global", seed=3
        )
        assert source.position is not None
        return preemptible_run(source, "id", directory, at, epochs)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == epochs * per_epoch
    before, (stop, _) = run(tmp_path / "p", (1, 11))
    assert stop is not None and stop.epoch == 1 and 11 <= stop.step < per_epoch
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        after, (_, total) = run(tmp_path / "p", None)
    assert total == epochs * per_epoch
    assert f"Resumed the input at epoch 1, record {stop.step * batch}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text  # no replay
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    assert reference[1] != reference[2]


@pytest.mark.slow  # three graph-mode SessionLoop runs: about 12 s of CPU
def test_graph_mode_epoch_checkpoint_resumes_a_mixture_by_a_seek(tmp_path, caplog):
    """SessionLoop + EpochCheckpoint stopped mid-epoch on read_batches(weights=): exact."""
    import logging

    from _graph_resume_child import BATCH, StopAt, run, write_data

    data = write_data(str(tmp_path / "data"))
    reference = run(data, "mixture", None)
    logdir = str(tmp_path / "ckpt")
    first = run(data, "mixture", logdir, StopAt(epoch=1, step=3))
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        second = run(data, "mixture", logdir)
    assert second["initial"] == (1, 3)
    assert f"Resumed the input at epoch 1, record {3 * BATCH}" in caplog.text
    assert "Skipped" not in caplog.text and "Started" not in caplog.text
    assert first["steps"] + second["steps"] == reference["steps"]
    for name, value in second["state"].items():
        np.testing.assert_array_equal(value, reference["state"][name], err_msg=name)


@pytest.mark.slow  # a FunctionLoop run: about 5 s of CPU
def test_the_history_has_each_sources_examples_and_epochs(sources):
    """FunctionLoop's history: input/examples/<name> counts what the steps trained on."""
    seen: list[np.ndarray] = []

    def note(src):
        seen.append(src.numpy())
        return np.int64(0)

    def step(batch):
        tf.py_function(note, [batch["src"]], tf.int64)
        return {"n": tf.cast(tf.size(batch["src"]), tf.float32)}

    data = tfrecord.source(sources, BATCH, weights=WEIGHTS, shuffle="global", seed=3)
    history = tfr_hooks.FunctionLoop(data, step_fn=step).run(epochs=2)
    per_epoch = -(-3750 // BATCH)
    epochs = [np.concatenate(seen[:per_epoch]), np.concatenate(seen[per_epoch:])]
    for name, source in (("web", WEB), ("books", BOOKS), ("code", CODE)):
        assert history[f"input/examples/{name}"] == [int(np.sum(e == source)) for e in epochs]
    total = {name: sum(history[f"input/examples/{name}"]) for name in WEIGHTS}
    sizes = {"web": 3000, "books": 700, "code": 50}
    assert history["input/epochs/code"] == [
        sum(history["input/examples/code"][: e + 1]) // 50 for e in range(2)
    ]
    assert history["input/epochs/web"][-1] == total["web"] // sizes["web"]


@pytest.mark.slow  # two clusters on 127.0.0.1 (2 workers, then 1): about 40 s of CPU
def test_two_workers_take_disjoint_parts_and_resume_onto_one(tmp_path):
    """MWMS on loopback: each global batch split over the workers; a resume on 1 worker."""
    import json

    from _cluster import run_cluster

    batch, stop = 32, 7
    for name, ids in (("train", range(400)), ("extra", range(1000, 1150))):
        (tmp_path / "data" / name).mkdir(parents=True)
        write_records(
            str(tmp_path / "data" / name / "part-0.tfrecord"),
            [example(index=int64_feature([i])) for i in ids],
        )
    # the global stream one process reads: what the workers' parts must make up
    reference = tfrecord.dataset(
        {"train": str(tmp_path / "data" / "train"), "extra": str(tmp_path / "data" / "extra")},
        batch,
        weights={"train": 0.7, "extra": 0.3},
        shuffle="global",
        seed=5,
    )
    epoch0 = [int(i) for b in reference for i in b["index"]]
    argv = ["tests/_multi_worker_child.py", "order", str(tmp_path / "data"), str(tmp_path / "run")]
    env = {"GLOBAL_BATCH": str(batch), "ORDER_READ": "mixture", "ORDER_EPOCHS": "1"}
    env["ORDER_LOG"] = "1"
    term = {"TERM_AT_EPOCH": "0", "TERM_AT_BATCH": str(stop), "TERM_TASK": "0"}
    first = run_cluster(argv, 2, timeout=300, env={**env, **term})
    preempted = []
    for worker in first:
        assert worker.returncode == 42, worker.stderr[-3000:]
        line = [x for x in worker.stdout.splitlines() if x.startswith("PREEMPTED ")][-1]
        preempted.append(json.loads(line[len("PREEMPTED ") :]))
    step = preempted[0]["step"]
    for parts in zip(*(p["seen"]["0"][:step] for p in preempted), strict=True):
        assert [len(part) for part in parts] == [16, 16]  # disjoint halves of each batch
    (resumed,) = [w.result() for w in run_cluster(argv, 1, timeout=300, env=env)]
    trained = [i for p in preempted for b in p["seen"]["0"][:step] for i in b]
    assert sorted(trained) == sorted(epoch0[: step * batch])  # the parts cover the batches
    later = [i for b in resumed["seen"]["0"] for i in b]
    assert later == epoch0[step * batch :]  # resumed on 1 worker: the rest of the stream


@pytest.mark.slow  # two TFDS directories prepared: about 5 s of CPU
def test_tfds_directories_with_split_mix_with_their_decoding(tmp_path):
    """Two TFDS directories (split=): ragged tokens decoded per source, then mixed."""
    import _tfds_builders as builders

    dirs = {name: builders.prepare("tokens", tmp_path / name) for name in ("a", "b")}
    data = tfrecord.dataset(
        dirs, 10, weights={"a": 0.5, "b": 0.5}, split="train", shuffle="global", seed=2
    )
    batch = next(iter(data))  # 10 positions: each source's 5 examples once
    pairs = batch["pair"].numpy()
    assert sorted(pairs[:, 0].tolist()) == sorted(list(range(5)) * 2)
    assert isinstance(batch["tokens"], tf.RaggedTensor)
    for row, (first, _) in zip(batch["tokens"].to_list(), pairs, strict=True):
        assert row == list(range(first % 4 + 1))
