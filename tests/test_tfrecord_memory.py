"""The in-memory pipeline: exact epochs, a new permutation each epoch, both loops, auto mode."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
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


def _epoch_orders(ds: tf.data.Dataset, epochs: int, key: str = "index") -> list[np.ndarray]:
    """The example order of ``epochs`` passes, each through a new iterator (as loops do)."""
    return [np.concatenate([b[key].numpy() for b in ds]) for _ in range(epochs)]


class EpochCounts(Hook):
    def begin(self) -> None:
        self.counts: list[tuple[int, int]] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.counts.append((self.loop.epoch_steps, self.loop.epoch_examples))


def _index_step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float32))}


@pytest.mark.parametrize("source", ["shards", "packed_shards"])
@pytest.mark.slow  # trains on 2 layouts; about 1 s of CPU
def test_function_loop_epochs_are_exact_in_memory(source, request):
    ds = tfrecord.dataset(request.getfixturevalue(source), 128, shuffle="global", in_memory=True)
    counter = EpochCounts()
    FunctionLoop(ds, step_fn=_index_step, hooks=[counter], steps_per_execution=3).run(epochs=3)
    assert counter.counts == [(8, 1000)] * 3  # 7 full batches and one of 104, each epoch


@pytest.mark.parametrize("source", ["shards", "packed_shards"])
@pytest.mark.slow  # trains on 2 layouts; about 2 s of CPU
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
    assert batches.facts.examples == 1000


def test_batch_sizes_and_drop_remainder(shards):
    sizes = [int(b["x"].shape[0]) for b in tfrecord.dataset(shards, 128, in_memory=True)]
    assert sizes == [128] * 7 + [104]
    dropped = tfrecord.dataset(shards, 128, in_memory=True, drop_remainder=True)
    assert dropped.element_spec["x"].shape.as_list() == [128, 3]
    assert sum(1 for _ in dropped) == 7
    two = tfrecord.dataset(shards, 128, in_memory=True, num_epochs=2)
    assert [int(b["x"].shape[0]) for b in two] == ([128] * 7 + [104]) * 2  # per epoch


@pytest.mark.slow  # three seeded readers: about 1 s of CPU
def test_every_epoch_is_a_new_permutation_reproducible_from_the_seed(shards):
    orders = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle="global", seed=5, in_memory=True), 3
    )
    for order in orders:
        assert sorted(order.tolist()) == list(range(1000))  # the same multiset, once each
    assert not np.array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[1], orders[2])
    assert not np.array_equal(orders[0], np.arange(1000))
    again = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle="global", seed=5, in_memory=True), 3
    )
    assert all(np.array_equal(a, b) for a, b in zip(orders, again, strict=True))
    other = _epoch_orders(
        tfrecord.dataset(shards, 128, shuffle="global", seed=6, in_memory=True), 1
    )
    assert not np.array_equal(orders[0], other[0])


def test_no_shuffle_keeps_file_order(shards):
    orders = _epoch_orders(tfrecord.dataset(shards, 128, in_memory=True), 2)
    assert all(np.array_equal(order, np.arange(1000)) for order in orders)


def _graph_orders(directory: Path, seed: int, epochs: int) -> list[np.ndarray]:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(directory, 128, in_memory=True, shuffle="global", seed=seed)
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


def _passes(
    arrays: dict[str, np.ndarray], drop: bool, passes: int, shuffle: int | str = "global"
) -> list[list[np.ndarray]]:
    """Batches (``index``) of ``passes`` passes of ``memory_dataset``, a new iterator each."""
    from tfr_hooks.tfrecord.pipelines.memory.serve import memory_dataset

    ds = memory_dataset(
        arrays, 128, shuffle=shuffle, seed=4, drop_remainder=drop, num_epochs=1, prefetch=2
    )
    return [[b["index"].numpy() for b in ds] for _ in range(passes)]


# drop_remainder both ways and both shuffles in the fast run, in two cases (the other two
# pairs, about 0.25 s of CPU each, with the slow tests)
@pytest.mark.parametrize(
    ("drop", "shuffle"),
    [
        pytest.param(False, "global", id="False-global"),
        pytest.param(True, 64, id="True-64"),
        pytest.param(False, 64, id="False-64", marks=pytest.mark.slow),
        pytest.param(True, "global", id="True-global", marks=pytest.mark.slow),
    ],
)
def test_small_data_gathered_whole_keeps_the_passes_and_batches(monkeypatch, drop, shuffle):
    from tfr_hooks.tfrecord.pipelines.memory import serve

    arrays = _arrays()
    assert serve._Gather(arrays, 128, shuffle, drop, None).whole  # 20 KB: gathered whole
    whole = _passes(arrays, drop, 3, shuffle)
    monkeypatch.setattr(serve, "WHOLE_PASS_BYTES", -1)  # a flat_map of each pass's slices
    assert not serve._Gather(arrays, 128, shuffle, drop, None).whole
    sliced = _passes(arrays, drop, 3, shuffle)
    sizes = [128] * 7 + ([] if drop else [104])  # each pass ends with its own final batch
    for batches, other in zip(whole, sliced, strict=True):
        assert [len(b) for b in batches] == sizes
        assert all(np.array_equal(a, b) for a, b in zip(batches, other, strict=True))
    orders = [np.concatenate(batches) for batches in whole]
    assert not np.array_equal(orders[0], orders[1])  # the next pass of the seeded sequence


def test_unaligned_arrays_are_served_whole_and_right():
    from tfr_hooks.tfrecord.pipelines.memory.serve import memory_dataset

    arrays = _arrays()
    unaligned = np.empty(arrays["x"].nbytes + 4, np.uint8)[4:].view(np.float32).reshape(-1, 3)
    unaligned[...] = arrays["x"]  # 4 bytes off: copied once into an aligned buffer
    ds = memory_dataset(
        {"x": unaligned, "index": arrays["index"]},
        100,
        shuffle="global",
        seed=1,
        drop_remainder=False,
        num_epochs=2,
        prefetch=None,
    )
    batches = list(ds)
    assert len(batches) == 20
    for batch in batches:
        np.testing.assert_array_equal(batch["x"].numpy(), arrays["x"][batch["index"].numpy()])


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


def test_eager_data_is_not_a_function_constant(tmp_path):
    # small data gathered whole: eager tensors, inputs of the gather function, not Const
    big = {"x": np.ones((4000, 256), np.float32), "y": np.arange(4000)}  # 4 MB decoded
    tfrecord.write(big, tmp_path, shards=2)
    data = tfrecord.dataset(tmp_path, 100, in_memory=True, as_tuple=("x", "y"))
    assert not data.options().experimental_optimization.apply_default_optimizations

    @tf.function
    def total():
        return data.reduce(tf.constant(0.0), lambda n, b: n + tf.reduce_sum(b[0]))

    assert total.get_concrete_function().graph.as_graph_def().ByteSize() < 200_000
    assert float(total()) == 4000 * 256
    stages, functions = [data], []
    while stages:  # every function of the pipeline: the data is an input, not in its graph
        stage = stages.pop()
        stages.extend(stage._inputs())
        if hasattr(stage, "_map_func"):
            functions.append(stage._map_func.function.graph.as_graph_def().ByteSize())
    assert functions and max(functions) < 200_000


def _single_device_functions(data: tf.data.Dataset) -> list[str]:
    """The functions of ``data``'s pipeline that TensorFlow instantiates single-device."""
    serialized = data._as_serialized_graph()
    if not tf.executing_eagerly():
        with v1.Session() as session:
            serialized = session.run(serialized)
    else:
        serialized = serialized.numpy()
    graph = tf.compat.v1.GraphDef.FromString(serialized)
    return [
        f.signature.name for f in graph.library.function if f.attr["experimental_ints_on_device"].b
    ]


@pytest.mark.parametrize("graph_mode", [False, True])
def test_passes_gathered_whole_start_without_grappler(tmp_path, graph_mode):
    # a multi-device tf.data function is optimized by Grappler at every new iterator (in
    # graph mode, every initialization): milliseconds of each in-memory pass's start
    from tfr_hooks import tf_private
    from tfr_hooks.tfrecord.pipelines.memory import serve

    plain = serve.single_device_map(tf.data.Dataset.range(5), lambda x: x * 2)
    assert isinstance(plain, tf_private.single_device_map_class())  # not the fallback map
    assert list(plain.as_numpy_iterator()) == [0, 2, 4, 6, 8]
    assert plain.cardinality() == 5
    arrays = _arrays()
    with tf.Graph().as_default() if graph_mode else contextlib.nullcontext():
        data = serve.memory_dataset(
            arrays, 128, shuffle="global", seed=4, drop_remainder=False, num_epochs=1, prefetch=2
        )
        names = _single_device_functions(data)
    # the gather (and in graph mode the pass seeds' map) run single-device
    assert len(names) == (2 if graph_mode else 1), names


def _prefetches(data: tf.data.Dataset) -> int:
    """The prefetch stages of ``data``'s pipeline (its ``PrefetchDataset`` nodes)."""
    graph = tf.compat.v1.GraphDef.FromString(data._as_serialized_graph().numpy())
    return sum(node.op == "PrefetchDataset" for node in graph.node)


def test_passes_gathered_whole_prefetch_passes_not_batches(shards, monkeypatch):
    # a pass gathered whole is prefetched as a pass; its batches are slices of it, and a
    # prefetch a batch would add a thread handoff to each (about a third of the CPU time
    # of this pipeline on digits): by default only the pass is read ahead
    options = dict(seed=3, in_memory=True, shuffle="global", num_epochs=2)
    default = tfrecord.dataset(shards, 128, **options)
    assert _prefetches(default) == 1
    # a prefetch asked for is kept, and the batches are the same either way
    asked = tfrecord.dataset(shards, 128, read_config=tfrecord.ReadConfig(prefetch=2), **options)
    assert _prefetches(asked) == 2
    for ours, theirs in zip(default, asked, strict=True):
        np.testing.assert_array_equal(ours["index"].numpy(), theirs["index"].numpy())
    # gathered in parts (data over the whole-pass budget), the batches are prefetched
    from tfr_hooks.tfrecord.pipelines.memory import serve

    monkeypatch.setattr(serve, "WHOLE_PASS_BYTES", 0)
    assert _prefetches(tfrecord.dataset(shards, 128, **options)) == 1


def _prefetch_sizes(data: tf.data.Dataset) -> list[int]:
    """The buffer sizes of ``data``'s prefetch stages."""
    graph = tf.compat.v1.GraphDef.FromString(data._as_serialized_graph().numpy())
    consts = {node.name: node for node in graph.node if node.op == "Const"}
    return sorted(
        int(tf.make_ndarray(consts[node.input[1]].attr["value"].tensor))
        for node in graph.node
        if node.op == "PrefetchDataset"
    )


@pytest.mark.parametrize("after", ["none", "batch_map_fn"])
def test_an_explicit_prefetch_is_the_batches_asked_for(shards, after):
    # ReadConfig(prefetch=N) prefetches N batches, in memory as streamed (it was 2)
    extra = {"batch_map_fn": lambda batch: batch} if after == "batch_map_fn" else {}
    options = dict(seed=3, in_memory=True, shuffle="global", num_epochs=1, **extra)
    asked = tfrecord.dataset(shards, 128, read_config=tfrecord.ReadConfig(prefetch=5), **options)
    assert _prefetch_sizes(asked) == [5]
    none = tfrecord.dataset(shards, 128, read_config=tfrecord.ReadConfig(prefetch=0), **options)
    assert _prefetch_sizes(none) == []


def test_same_structure_as_streaming(shards):
    # one file at a time: the stored order, which the memory pipeline keeps
    streaming = tfrecord.dataset(
        shards, 128, as_tuple=("index", "x"), read_config=tfrecord.ReadConfig(num_parallel_reads=1)
    )
    memory = tfrecord.dataset(shards, 128, as_tuple=("index", "x"), in_memory=True)
    assert memory.element_spec == streaming.element_spec
    for a, b in zip(streaming, memory, strict=True):
        np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
        np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())


@pytest.mark.slow  # reads every batch size; about 1 s of CPU
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

    ds = tfrecord.dataset(shards, 128, as_tuple=("x", "index"), in_memory=True, shuffle="global")
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
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.pipelines.memory.build"):
        ds = tfrecord.dataset(
            tmp_path, 64, in_memory="auto", read_config=tfrecord.ReadConfig(memory_budget=budget)
        )
    assert chosen in caplog.text and "memory_budget" in caplog.text
    for path in tfrecord.resolve_files(tmp_path):
        os.remove(path)  # data in memory no longer needs the files; a stream does
    if chosen == "streaming":
        with pytest.raises(tf.errors.NotFoundError):
            sum(1 for _ in ds)
    else:
        assert sum(int(b["x"].shape[0]) for b in ds) == 200


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"in_memory": "yes"}, r"Expected `in_memory` to be False, True or 'auto'. Received: in_m"),
        ({"memory_budget": 0}, r"Expected `memory_budget` to be a positive integer"),
    ],
)
def test_bad_arguments(shards, kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        if "memory_budget" in kwargs:
            kwargs = {"read_config": tfrecord.ReadConfig(**kwargs)}
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


# --- encoded records (JPEG/PNG bytes, as TensorFlow's image pipelines write them) -------


def _image(i: int) -> np.ndarray:
    """A 16x16 gradient, different for each example (JPEG keeps it close)."""
    ramp = np.arange(16, dtype=np.uint8) * 16
    image = np.stack([np.tile(ramp, (16, 1)), np.tile(ramp[:, None], (1, 16))], -1)
    return np.concatenate([image, np.full((16, 16, 1), i % 256, np.uint8)], -1)


def _write_images(path: Path, n: int, encode: Any = tf.io.encode_jpeg, shapes: Any = None) -> Path:
    """``n`` records by a plain TFRecordWriter: image/encoded, image/class/label, id."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            image = _image(i) if shapes is None else np.zeros((*shapes(i), 3), np.uint8)
            feature = {
                "image/encoded": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[encode(image).numpy()])
                ),
                "image/class/label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[i % 10])
                ),
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return path


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_images(tmp_path_factory.mktemp("jpeg") / "images.tfrecord", 100)


class Counter:
    """Counts the examples ``decode`` decodes, through a tf.py_function side effect."""

    def __init__(self) -> None:
        self.calls = 0

    def _count(self, image: Any) -> Any:
        self.calls += 1
        return image

    def decode(self, example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        image = tf.io.decode_jpeg(example["image/encoded"], channels=3)
        image = tf.py_function(self._count, [image], tf.uint8)
        image.set_shape([None, None, 3])
        return {
            "image": tf.cast(image, tf.float32) / 255.0,
            "label": example["image/class/label"],
            "id": example["id"],
        }


def _noise(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {**batch, "image": batch["image"] + tf.random.uniform(tf.shape(batch["image"]))}


def test_map_fn_runs_once_per_example_over_epochs(jpegs):
    counter = Counter()
    ds = tfrecord.dataset(jpegs, 32, in_memory=True, map_fn=counter.decode, shuffle="global")
    assert counter.calls == 100  # decoded here, once
    assert ds.element_spec["image"].shape.as_list() == [None, 16, 16, 3]
    orders = _epoch_orders(ds, 3, key="id")
    assert counter.calls == 100
    for order in orders:
        assert sorted(order.tolist()) == list(range(100))  # every example once an epoch
    assert not np.array_equal(orders[0], orders[1])
    assert not np.array_equal(orders[1], orders[2])
    first = next(iter(ds))
    expected = tf.io.decode_jpeg(tf.io.encode_jpeg(_image(int(first["id"][0])))).numpy() / 255.0
    np.testing.assert_allclose(first["image"][0].numpy(), expected, atol=1e-6)


def test_map_fn_runs_once_in_graph_mode(jpegs):
    counter = Counter()
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        batches = tfrecord.read_batches(
            jpegs, 32, in_memory=True, map_fn=counter.decode, shuffle="global", seed=1
        )
        assert batches.facts.kind.in_memory and batches.facts.examples == 100
        orders = []
        with v1.Session() as session:
            for _ in range(3):
                session.run(batches.initializers)
                got = []
                while True:
                    try:
                        got.append(session.run(batches.tensors["id"]))
                    except tf.errors.OutOfRangeError:
                        break
                orders.append(np.concatenate(got))
    assert counter.calls == 100
    assert all(sorted(o.tolist()) == list(range(100)) for o in orders)
    assert not np.array_equal(orders[0], orders[1])


def test_map_fn_in_memory_with_session_loop(jpegs):
    counter = Counter()
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            jpegs, 32, in_memory=True, map_fn=counter.decode, as_tuple=("image", "label")
        )
        image, _ = batches.tensors
        step = v1.train.get_or_create_global_step()
        epochs = EpochCounts()
        loop = tfr_hooks.SessionLoop(
            v1.assign_add(step, 1),
            fetches={"mean": tf.reduce_mean(image)},
            hooks=[epochs],
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        loop.run(epochs=3)
    assert epochs.counts == [(4, 100)] * 3
    assert counter.calls == 100


def test_png_and_a_tuple_returning_map_fn(tmp_path):
    path = _write_images(tmp_path / "png.tfrecord", 40, encode=tf.io.encode_png)

    def decode(example: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.io.decode_png(example["image/encoded"], channels=3), example["id"]

    ds = tfrecord.dataset(path, 16, in_memory=True, map_fn=decode, as_tuple=("image", "id"))
    images, ids = next(iter(ds))
    assert images.dtype == tf.uint8 and images.shape == (16, 16, 16, 3)
    np.testing.assert_array_equal(images[3].numpy(), _image(int(ids[3])))  # PNG: lossless


def _by_id(ds: tf.data.Dataset) -> np.ndarray:
    """One epoch's images, in the order of their ids."""
    ids, images = [], []
    for batch in ds:
        ids.append(batch["id"].numpy())
        images.append(batch["image"].numpy())
    return np.concatenate(images)[np.argsort(np.concatenate(ids))]


@pytest.mark.parametrize("pipeline", ["stream", "packed", "memory", "encoded"])
@pytest.mark.slow  # 4 pipelines over several epochs; about 3 s of CPU
def test_batch_map_fn_draws_anew_every_epoch(jpegs, tmp_path, pipeline):
    tf.random.set_seed(0)  # would repeat an unseeded op at each new iterator
    if pipeline == "packed":
        tfrecord.write(
            {
                "image": np.stack([_image(i) for i in range(64)]).astype(np.float32) / 255.0,
                "id": np.arange(64),
            },
            tmp_path,
            examples_per_record=16,
        )
        ds = tfrecord.dataset(tmp_path, 16, batch_map_fn=_noise, shuffle=8)
    else:
        in_memory: bool | str = {"stream": False, "memory": True, "encoded": "auto"}[pipeline]
        budget = 200_000 if pipeline == "encoded" else None  # decoded 300 KB; records 30 KB
        ds = tfrecord.dataset(
            jpegs,
            16,
            map_fn=Counter().decode,
            batch_map_fn=_noise,
            in_memory=in_memory,
            read_config=tfrecord.ReadConfig(memory_budget=budget),
            shuffle=8 if pipeline == "stream" else "global",
        )
    epochs = [_by_id(ds) for _ in range(2)]
    clean = _by_id(
        tfrecord.dataset(tmp_path, 16)
        if pipeline == "packed"
        else tfrecord.dataset(jpegs, 16, map_fn=Counter().decode)
    )
    for epoch in epochs:
        noise = epoch - clean
        assert noise.min() >= 0 and noise.max() < 1 and noise.std() > 0.2  # applied
    assert not np.allclose(epochs[0], epochs[1])  # the same examples, new noise


def test_batch_map_fn_in_graph_mode_draws_anew_every_initialization(jpegs):
    for in_memory in (True, False):
        with tf.Graph().as_default():
            v1.set_random_seed(0)
            batches = tfrecord.read_batches(
                jpegs, 100, map_fn=Counter().decode, batch_map_fn=_noise, in_memory=in_memory
            )
            with v1.Session() as session:
                session.run(batches.initializers)
                first = session.run(batches.tensors["image"])
                session.run(batches.initializers)
                second = session.run(batches.tensors["image"])
        assert not np.allclose(first, second)


def test_batch_map_fn_on_the_queue_pipeline(shards):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            shards, 10, pipeline="queue", batch_map_fn=lambda b: {**b, "x": b["x"] * 0 + 1}
        )
        assert "x" in batches.tensors


@pytest.mark.parametrize(
    "budget, chosen, why",
    [
        (10**8, "holding the decoded data (map_fn's output) in memory", "decode to about"),
        (200_000, "holding the encoded records in memory", "more than memory_budget"),
        (1_000, "streaming from the files", "the records take"),
    ],
)
@pytest.mark.slow  # decodes every record for each budget; about 2 s of CPU
def test_auto_with_a_map_fn_chooses_by_the_budget(jpegs, caplog, budget, chosen, why):
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.pipelines.memory.build"):
        ds = tfrecord.dataset(
            jpegs,
            32,
            in_memory="auto",
            map_fn=Counter().decode,
            read_config=tfrecord.ReadConfig(memory_budget=budget),
        )
    assert chosen in caplog.text and why in caplog.text and "memory_budget" in caplog.text
    assert "100 examples decode to about 0.3 MiB" in caplog.text  # 100 * 16*16*3 floats
    assert sorted(np.concatenate([b["id"].numpy() for b in ds]).tolist()) == list(range(100))
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            jpegs,
            32,
            in_memory="auto",
            map_fn=Counter().decode,
            read_config=tfrecord.ReadConfig(memory_budget=budget),
        )
    assert batches.facts.kind.in_memory is not chosen.startswith("streaming")


def test_map_fn_of_varying_shape_names_the_feature(tmp_path):
    path = _write_images(tmp_path / "sizes.tfrecord", 20, shapes=lambda i: (8 + i % 2, 8))

    def decode(example: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"pixels": tf.io.decode_jpeg(example["image/encoded"]), "id": example["id"]}

    with pytest.raises(
        ValueError,
        match=r"feature 'pixels' varies .*in_memory=False\). "
        r"Received: shapes \[8, 8, 3\] and \[9, 8, 3\]",
    ):
        tfrecord.dataset(path, 4, in_memory=True, map_fn=decode)
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"feature 'pixels' varies"):
        tfrecord.read_batches(path, 4, in_memory=True, map_fn=decode)


def test_map_fn_returning_ragged_is_refused_naming_it(jpegs):
    def ragged(example: dict[str, tf.Tensor]) -> dict[str, Any]:
        return {"r": tf.RaggedTensor.from_row_lengths([1, 2, 3], [1, 2]), "id": example["id"]}

    with pytest.raises(ValueError, match=r"dense tensors, or 1-D lists of varying length.*'r'"):
        tfrecord.dataset(jpegs, 4, in_memory=True, map_fn=ragged)


def test_bad_functions(jpegs):
    with pytest.raises(TypeError, match=r"Expected `batch_map_fn` to be callable or None"):
        tfrecord.dataset(jpegs, 4, batch_map_fn=3)
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"Expected `map_fn` to be None"):
        tfrecord.read_batches(jpegs, 4, pipeline="queue", map_fn=lambda d: d)


@pytest.mark.slow  # decodes every record; about 1 s of CPU
def test_feature_lists_are_held_as_frames_and_row_splits(tmp_path):
    from _tfrecord_data import sequence_frames, sequence_values, write_sequences
    from tfr_hooks.tfrecord.formats.reading import RecordFiles
    from tfr_hooks.tfrecord.pipelines.memory.estimate import records_nbytes
    from tfr_hooks.tfrecord.pipelines.memory.loading import load, nbytes_of
    from tfr_hooks.tfrecord.pipelines.ragged import RaggedArray

    values = [sequence_values(i, sequence_frames(i)) for i in range(20)]
    path = write_sequences(tmp_path / "videos.tfrecord", values)
    schema = tfrecord.Schema(
        [
            tfrecord.Feature("id", "int64"),
            tfrecord.Feature("rgb", "uint8", (8,), sequence=True),
            tfrecord.Feature("audio", "float32", (4,), sequence=True),
        ]
    )
    held = load(RecordFiles([path], ""), schema, progress=False)
    frames = [sequence_frames(i) for i in range(20)]
    for name, width, dtype in (("rgb", 8, np.uint8), ("audio", 4, np.float32)):
        ragged = held[name]
        assert isinstance(ragged, RaggedArray)
        assert ragged.values.shape == (sum(frames), width) and ragged.values.dtype == dtype
        assert ragged.lengths.tolist() == frames
        np.testing.assert_array_equal(ragged.values, np.concatenate([v[name] for v in values]))
    held_bytes = sum(nbytes_of(v) for v in held.values())
    estimate = records_nbytes(RecordFiles([path], ""), schema, 20)
    assert estimate == held_bytes  # every example sampled: exact


@pytest.mark.slow
def test_the_load_hands_its_free_memory_back(tmp_path):
    """After the in-memory load, the C allocator holds no free memory it could hand back.

    The load decodes chunks on several threads; glibc keeps what they free in their
    arenas, resident. The pipeline trims the arenas once the data is held, so a second
    trim by the user finds next to nothing; without it, that trim released about 15 MB
    of 47.5 MB of digits held (finding 19).
    """
    child = Path(__file__).with_name("_memory_rss_child.py")
    done = subprocess.run(
        [sys.executable, str(child), str(tmp_path), "60000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    grown = json.loads(done.stdout.strip().splitlines()[-1])
    assert grown["batches"] == 3 * (60000 // 128)
    assert grown["loaded"] >= grown["held"]  # the data is held (RssAnon counts it)
    assert grown["released"] <= 4 << 20, grown
