"""The in-memory pipeline: exact epochs, a new permutation each epoch, both loops, auto mode."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from tfr_hooks import FunctionLoop, Hook, tfrecord

v1 = tf.compat.v1


def _arrays(n: int = 1000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.normal(size=(n, 3)).astype(np.float32),
        "index": np.arange(n, dtype=np.int64),
    }


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 examples in 3 shards with a schema.json: batch 128 gives 7 + one of 104."""
    directory = tmp_path_factory.mktemp("memory")
    tfrecord.write(_arrays(), directory, shards=3)
    return directory


@pytest.fixture(scope="module")
def packed_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("packed")
    tfrecord.write(_arrays(), directory, shards=3, examples_per_record=64)
    return directory


def _epoch_orders(ds: tf.data.Dataset, epochs: int) -> list[np.ndarray]:
    """The example order of ``epochs`` passes, each through a new iterator (as loops do)."""
    return [np.concatenate([b["index"].numpy() for b in ds]) for _ in range(epochs)]


class EpochCounts(Hook):
    def begin(self) -> None:
        self.counts: list[tuple[int, int]] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.counts.append((self.loop.epoch_steps, self.loop.epoch_examples))


def _index_step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float32))}


@pytest.mark.parametrize("source", ["shards", "packed_shards"])
def test_function_loop_epochs_are_exact_in_memory(source, request):
    ds = tfrecord.dataset(request.getfixturevalue(source), 128, shuffle_buffer=1, in_memory=True)
    counter = EpochCounts()
    FunctionLoop(ds, step_fn=_index_step, hooks=[counter], steps_per_execution=3).run(epochs=3)
    assert counter.counts == [(8, 1000)] * 3  # 7 full batches and one of 104, each epoch


@pytest.mark.parametrize("source", ["shards", "packed_shards"])
def test_session_loop_epochs_are_exact_in_memory(source, request):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(request.getfixturevalue(source), 128, in_memory=True)
        total = tf.reduce_sum(tf.cast(batches.tensors["index"], tf.float32))
        step = v1.train.get_or_create_global_step()
        counter = EpochCounts()
        loop = tfr_hooks.SessionLoop(
            v1.assign_add(step, 1),
            fetches={"total": total},
            hooks=[counter],
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        loop.run(epochs=3)
    assert counter.counts == [(8, 1000)] * 3
    assert batches.num_examples == 1000


def test_batch_sizes_and_drop_remainder(shards):
    sizes = [int(b["x"].shape[0]) for b in tfrecord.dataset(shards, 128, in_memory=True)]
    assert sizes == [128] * 7 + [104]
    dropped = tfrecord.dataset(shards, 128, in_memory=True, drop_remainder=True)
    assert dropped.element_spec["x"].shape.as_list() == [128, 3]
    assert sum(1 for _ in dropped) == 7
    two = tfrecord.dataset(shards, 128, in_memory=True, num_epochs=2)
    assert [int(b["x"].shape[0]) for b in two] == ([128] * 7 + [104]) * 2  # per epoch


def test_every_epoch_is_a_new_permutation_reproducible_from_the_seed(shards):
    orders = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle_buffer=1, seed=5, in_memory=True), 3
    )
    for order in orders:
        assert sorted(order.tolist()) == list(range(1000))  # the same multiset, once each
    assert not np.array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[1], orders[2])
    assert not np.array_equal(orders[0], np.arange(1000))
    again = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle_buffer=1, seed=5, in_memory=True), 3
    )
    assert all(np.array_equal(a, b) for a, b in zip(orders, again, strict=True))
    other = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle_buffer=1, seed=6, in_memory=True), 1
    )
    assert not np.array_equal(orders[0], other[0])


def test_no_shuffle_keeps_file_order(shards):
    orders = _epoch_orders(tfrecord.dataset(shards, 128, in_memory=True), 2)
    assert all(np.array_equal(order, np.arange(1000)) for order in orders)


def _graph_orders(directory: Path, seed: int, epochs: int) -> list[np.ndarray]:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(directory, 128, in_memory=True, shuffle_buffer=1, seed=seed)
        orders = []
        with v1.Session() as session:
            for _ in range(epochs):
                session.run(batches.initializers)
                got = []
                while True:
                    try:
                        got.append(session.run(batches.tensors["index"]))
                    except tf.errors.OutOfRangeError:
                        break
                orders.append(np.concatenate(got))
    return orders


def test_graph_mode_reshuffles_at_each_initialization_reproducibly(shards):
    orders = _graph_orders(shards, 3, 3)
    assert all(sorted(o.tolist()) == list(range(1000)) for o in orders)
    assert not np.array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[1], orders[2])
    again = _graph_orders(shards, 3, 3)
    assert all(np.array_equal(a, b) for a, b in zip(orders, again, strict=True))


def test_graph_mode_data_is_not_a_graph_constant(tmp_path):
    big = {"x": np.ones((4000, 256), np.float32), "y": np.arange(4000)}  # 4 MB decoded
    tfrecord.write(big, tmp_path, shards=2)
    with tf.Graph().as_default() as graph:
        batches = tfrecord.read_batches(tmp_path, 100, in_memory=True, as_tuple=("x", "y"))
        assert graph.as_graph_def().ByteSize() < 200_000
        with v1.Session() as session:
            session.run(batches.initializers)
            x, y = session.run(batches.tensors)
    assert x.shape == (100, 256) and y.shape == (100,)


def test_same_structure_as_streaming(shards):
    # one file at a time: the stored order, which the memory pipeline keeps
    streaming = tfrecord.dataset(shards, 128, as_tuple=("index", "x"), num_parallel_reads=1)
    memory = tfrecord.dataset(shards, 128, as_tuple=("index", "x"), in_memory=True)
    assert memory.element_spec == streaming.element_spec
    for a, b in zip(streaming, memory, strict=True):
        np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
        np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())


def test_cardinality_is_exact(shards, tmp_path):
    assert int(tfrecord.dataset(shards, 128).cardinality()) == 8
    assert int(tfrecord.dataset(shards, 128, num_epochs=3).cardinality()) == 24  # 3000 / 128
    assert int(tfrecord.dataset(shards, 128, num_epochs=3, drop_remainder=True).cardinality()) == 23
    assert int(tfrecord.dataset(shards, 128, num_epochs=None).cardinality()) < 0
    assert int(tfrecord.dataset(shards, 128, in_memory=True).cardinality()) == 8
    memory = tfrecord.dataset(shards, 128, in_memory=True, num_epochs=2, drop_remainder=True)
    assert int(memory.cardinality()) == 14
    assert memory.cardinality() == sum(1 for _ in memory)
    endless = tfrecord.dataset(shards, 128, in_memory=True, num_epochs=None)
    assert int(endless.cardinality()) == tf.data.INFINITE_CARDINALITY
    # files without a schema.json: unknown until counted
    plain = tmp_path / "plain.tfrecord"
    with tf.io.TFRecordWriter(str(plain)) as writer:
        for i in range(10):
            feature = {"i": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    assert int(tfrecord.dataset(str(plain), 4).cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert int(tfrecord.dataset(str(plain), 4, in_memory=True).cardinality()) == 3


def test_keras_fit_knows_the_epoch_length(shards, recwarn):
    import keras

    ds = tfrecord.dataset(shards, 128, as_tuple=("x", "index"), in_memory=True, shuffle_buffer=1)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    history = model.fit(ds, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert not [w for w in recwarn if "ran out of data" in str(w.message)]


@pytest.mark.parametrize(
    "budget, chosen", [(10**9, "holding the data in memory"), (1000, "streaming")]
)
def test_auto_picks_each_side_of_the_budget(tmp_path, caplog, budget, chosen):
    tfrecord.write(_arrays(200), tmp_path, shards=2)  # 200 * (12 + 8) = 4,000 bytes decoded
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.read"):
        ds = tfrecord.dataset(tmp_path, 64, in_memory="auto", memory_budget=budget)
    assert chosen in caplog.text and "memory_budget" in caplog.text
    for path in tfrecord.resolve_files(tmp_path):
        os.remove(path)  # data in memory no longer needs the files; a stream does
    if chosen == "streaming":
        with pytest.raises(tf.errors.NotFoundError):
            sum(1 for _ in ds)
    else:
        assert sum(int(b["x"].shape[0]) for b in ds) == 200


def test_auto_streams_with_a_map_fn(shards, caplog):
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.read"):
        tfrecord.dataset(shards, 8, in_memory="auto", map_fn=lambda d: d)
    assert "streaming from the files, as a map_fn is given" in caplog.text


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"in_memory": "yes"}, r"Expected `in_memory` to be False, True or 'auto'. Received: in_m"),
        ({"in_memory": True, "map_fn": lambda d: d}, r"Expected no `map_fn` with `in_memory=True`"),
        ({"memory_budget": 0}, r"Expected `memory_budget` to be a positive integer"),
    ],
)
def test_bad_arguments(shards, kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        tfrecord.dataset(shards, 8, **kwargs)


def test_corrupt_shard_stops_the_load_naming_the_file(tmp_path):
    result = tfrecord.write(_arrays(300), tmp_path, shards=2)
    data = bytearray(Path(result.files[1]).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the record's checksum tells
    Path(result.files[1]).write_bytes(bytes(data))
    with pytest.raises(
        tfrecord.CorruptRecordError,
        match=r"'.*data-00001-of-00002.tfrecord' \(uncompressed\) is damaged at record \d+",
    ):
        tfrecord.dataset(tmp_path, 8, in_memory=True)
