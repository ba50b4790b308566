"""Reading TFRecord files as batches: eager tf.data, and graph-mode dataset/queue pipelines."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _tfrecord_data import (
    example,
    image_label_arrays,
    int64_feature,
    new_session,
    run_graph_batches,
    write_records,
)
from helpers import EpochSizes
from tfr_hooks import tfrecord

N = 1000
BATCH = 128


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("shards")
    tfrecord.write(image_label_arrays(N), directory, shards=3, compression="gzip")
    return directory


def test_eager_batches_count_every_example_once(shards):
    sizes, labels = [], []
    for batch in tfrecord.dataset(shards, BATCH):
        sizes.append(int(batch["image"].shape[0]))
        labels.extend(batch["label"].numpy().tolist())
        assert batch["image"].dtype == tf.uint8
        assert batch["image"].shape[1:] == (4, 4)
    assert sorted(sizes, reverse=True) == [BATCH] * 7 + [104]
    assert sorted(labels) == list(range(N))


def test_drop_remainder_gives_static_batch_dimension(shards):
    ds = tfrecord.dataset(shards, BATCH, drop_remainder=True, as_tuple=("image", "label"))
    assert ds.element_spec[0].shape == (BATCH, 4, 4)
    assert ds.element_spec[1].shape == (BATCH,)
    assert sum(1 for _ in ds) == 7


def test_paths_globs_and_directories_give_the_same_files(shards):
    files = sorted(str(p) for p in shards.glob("*.tfrecord.gz"))
    from_glob = tfrecord.resolve_files(str(shards / "data-*.tfrecord.gz"))
    assert tfrecord.resolve_files(shards) == files
    assert from_glob == files
    assert tfrecord.resolve_files(files[:2]) == files[:2]
    assert tfrecord.resolve_files(str(shards / "*")) == files  # not schema.json
    assert tfrecord.resolve_files([files[1], files[0], files[1]]) == [files[1], files[0]]
    total = sum(int(b["label"].shape[0]) for b in tfrecord.dataset(files[:2], 100))
    assert total == 667  # two of the three shards: 333 + 334


def test_shuffle_is_seeded_and_deterministic(shards):
    def labels(seed):
        ds = tfrecord.dataset(shards, 100, shuffle=200, seed=seed)
        return np.concatenate([b["label"].numpy() for b in ds])

    first, again, other = labels(1), labels(1), labels(2)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert sorted(first.tolist()) == list(range(N))


def test_per_example_map_and_epochs(shards):
    def to_float(example):
        return {"image": tf.cast(example["image"], tf.float32) / 255.0, "y": example["label"]}

    ds = tfrecord.dataset(shards, BATCH, map_fn=to_float, num_epochs=2, as_tuple=("image", "y"))
    count = 0
    for images, labels in ds:
        assert images.dtype == tf.float32
        assert float(tf.reduce_max(images)) <= 1.0
        count += int(labels.shape[0])
    assert count == 2 * N


def test_graph_mode_dataset_pipeline_one_epoch_per_initialization(shards):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            shards, BATCH, pipeline="dataset", shuffle=4 * BATCH, as_tuple=("image", "label")
        )
        x, y = batches.tensors
        assert x.shape.as_list() == [None, 4, 4]
        assert len(batches.initializers) == 1
        assert list(batches.facts.files) == tfrecord.resolve_files(shards)
        with new_session() as session:
            for _ in range(2):  # two epochs, each started by running the initializer
                results = run_graph_batches(session, (x, y), batches.initializers)
                sizes = [len(labels) for _, labels in results]
                assert sorted(sizes, reverse=True) == [BATCH] * 7 + [104]
                labels = np.concatenate([labels for _, labels in results])
                assert sorted(labels.tolist()) == list(range(N))


def _streamed_graph_orders(files: list[str], epochs: int) -> list[list[int]]:
    """The ids of each of ``epochs`` passes of a seeded streamed graph pipeline, in a new graph."""
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(files, 16, shuffle=32, seed=3)
        assert not batches.facts.kind.in_memory
        with new_session() as session:
            return [
                np.concatenate(
                    run_graph_batches(session, batches.tensors["id"], batches.initializers)
                ).tolist()
                for _ in range(epochs)
            ]


def test_graph_mode_streamed_pipeline_reshuffles_each_pass_reproducibly(tmp_path):
    # plain TFRecord files without a schema.json: the streamed tf.data pipeline
    files = [
        write_records(
            tmp_path / f"ids-{k}.tfrecord", [example(id=int64_feature([i])) for i in part]
        )
        for k, part in enumerate((range(0, 60), range(60, 100)))
    ]
    orders = _streamed_graph_orders(files, 3)
    assert all(sorted(order) == list(range(100)) for order in orders)
    assert orders[0] != orders[1] and orders[1] != orders[2]  # a new order each pass
    assert _streamed_graph_orders(files, 3) == orders  # the same sequence in a new graph


def test_graph_mode_queue_pipeline_reads_num_epochs(shards):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            shards,
            BATCH,
            pipeline="queue",
            num_epochs=3,
            shuffle=4 * BATCH,
            read_config=tfrecord.ReadConfig(num_parallel_reads=2),
            seed=3,
        )
        assert batches.initializers == []
        assert set(batches.tensors) == {"image", "label"}
        assert batches.tensors["image"].shape.as_list() == [None, 4, 4]
        assert tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.QUEUE_RUNNERS)
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors)
    labels = np.concatenate([r["label"] for r in results])
    assert len(labels) == 3 * N
    assert np.bincount(labels).tolist() == [3] * N
    assert sum(len(r["label"]) < BATCH for r in results) == 1  # only the final batch


def test_graph_mode_queue_pipeline_without_smaller_final_batch(shards):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            shards,
            BATCH,
            pipeline="queue",
            num_epochs=1,
            drop_remainder=True,
            as_tuple=("image", "label"),
        )
        x, y = batches.tensors
        assert x.shape.as_list() == [BATCH, 4, 4]
        with new_session() as session:
            results = run_graph_batches(session, (x, y))
    assert [len(labels) for _, labels in results] == [BATCH] * 7


def test_graph_mode_batch_size_tensor(shards):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(shards, 100, pipeline="dataset")
        with new_session() as session:
            sizes = run_graph_batches(session, batches.batch_size, batches.initializers)
    assert sorted(int(s) for s in sizes) == [100] * 10


@pytest.mark.parametrize(
    ("batch_size", "kwargs", "sizes"),
    [
        (128, {"drop_remainder": True}, [128] * 7),
        (128, {"in_memory": True, "drop_remainder": True}, [128] * 7),
    ],
    ids=["streamed-drop_remainder", "in_memory-drop_remainder"],
)
def test_graph_mode_static_batch_size_tensor_takes_a_batch(shards, batch_size, kwargs, sizes):
    # a static batch dimension made tf.shape(x)[0] a constant that read nothing (issue 36)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(shards, batch_size, **kwargs)
        assert batches.tensors["label"].shape[0] == batch_size  # static
        with new_session() as session:
            run = run_graph_batches(session, batches.batch_size, batches.initializers, 100)
    assert [int(s) for s in run] == sizes


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("batch_size", "kwargs", "sizes"),
    [
        # a count the batch divides, in memory: the global order's case runs fast
        pytest.param(100, {"in_memory": True}, [(10, 1000)] * 2, marks=pytest.mark.slow),
        (125, {"in_memory": True, "shuffle": "global"}, [(8, 1000)] * 2),
        (128, {"drop_remainder": True}, [(7, 896)] * 2),
        (128, {"in_memory": True, "drop_remainder": True}, [(7, 896)] * 2),
        # one stream of two passes: the batch crossing 1,000 counts in the first epoch
        (
            128,
            {"pipeline": "queue", "num_epochs": 2, "drop_remainder": True},
            [(8, 1024), (7, 896)],
        ),
    ],
    ids=["in_memory-1000/100", "in_memory-1000/125", "drop_remainder", "in_memory-drop", "queue"],
)
def test_session_loop_epochs_end_with_a_counter_train_op(shards, batch_size, kwargs, sizes):
    # issue 36: with a static batch dimension, a train op reading no batch never ended
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(shards, batch_size, **kwargs)
        step = tf.compat.v1.train.get_or_create_global_step()
        hook = EpochSizes(max_steps=20)
        loop = tfr_hooks.SessionLoop(
            tf.compat.v1.assign_add(step, 1), hooks=[hook], data=batches, handle_signals=False
        )
        loop.run(epochs=2)
    assert hook.sizes == sizes


def test_queue_tensors_feed_a_tf_keras_input(shards):
    import tf_keras

    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            shards, 32, pipeline="queue", num_epochs=1, as_tuple=("image", "label")
        )
        x, _ = batches.tensors
        inputs = tf_keras.layers.Input(tensor=tf.cast(x, tf.float32))
        assert inputs.shape.as_list() == [None, 4, 4]


def test_read_batches_needs_a_graph(shards):
    with pytest.raises(RuntimeError, match=r"read_batches builds graph-mode tensors"):
        tfrecord.read_batches(shards, 8)


def _config(**fields):
    """The fields of a ReadConfig, made inside the test (a bad field raises there)."""
    return fields


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"pipeline": "threads"}, ValueError, r"Received: pipeline='threads'"),
        ({"read_config": _config(num_parallel_reads=0)}, ValueError, r"num_parallel_reads=0"),
        ({"shuffle_buffer": -1}, ValueError, r"Received: shuffle_buffer=-1"),
        ({"num_epochs": 0}, ValueError, r"Received: num_epochs=0"),
        (
            {"pipeline": "queue", "read_config": _config(capacity=10), "shuffle": 20},
            ValueError,
            r"Expected `capacity` to exceed the buffer of `shuffle` .* capacity=10, shuffle=20",
        ),
        (
            {"read_config": _config(capacity=10)},
            ValueError,
            r"Expected `read_config.capacity` to be None with pipeline='dataset'",
        ),
        (
            {"read_config": _config(shard="off")},
            ValueError,
            r"`read_config.shard` to be 'auto' with read_batches\(\)",
        ),
        ({"pipeline": "memory"}, ValueError, r"Expected `pipeline` to be 'dataset' or 'queue'"),
        ({"in_memory": "yes"}, ValueError, r"Received: in_memory='yes'"),
        (
            {"pipeline": "queue", "in_memory": True},
            ValueError,
            r"Expected `in_memory` to be False with pipeline='queue' .* Received: in_memory=True",
        ),
        (
            {"pipeline": "queue", "in_memory": "auto"},
            ValueError,
            r"Received: in_memory='auto'",
        ),
        ({"as_tuple": "image"}, TypeError, r"Received: as_tuple='image'"),
        ({"as_tuple": ("image", "mask")}, ValueError, r"features of the schema"),
    ],
)
def test_read_batches_rejects_bad_arguments(shards, kwargs, error, match):
    with tf.Graph().as_default(), pytest.raises(error, match=match):
        if "read_config" in kwargs:
            kwargs = {**kwargs, "read_config": tfrecord.ReadConfig(**kwargs["read_config"])}
        tfrecord.read_batches(shards, 8, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, r"Received: batch_size=0"),
        ({"batch_size": 8, "shuffle_buffer": -1}, r"Received: shuffle_buffer=-1"),
        ({"batch_size": 8, "schema": 3}, r"Received: schema=3"),
    ],
)
def test_dataset_rejects_bad_arguments(shards, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tfrecord.dataset(shards, **kwargs)


def test_autotuning_is_off_by_default_and_can_be_turned_on(shards):
    # with tf.data's autotuning on, a new iterator each epoch sometimes waits about 2 s
    # for the tuning thread (TensorFlow 2.21), so the reader turns it off unless asked
    default = tfrecord.dataset(shards, 100)
    assert default.options().autotune.enabled is False
    tuned = tfrecord.dataset(shards, 100, read_config=tfrecord.ReadConfig(autotune=True))
    assert tuned.options().autotune.enabled is not False
    assert sum(len(b["label"]) for b in default) == sum(len(b["label"]) for b in tuned)


@pytest.mark.parametrize(
    ("reader", "kwargs", "match"),
    [
        (
            "dataset",
            {"prefetch": 2},
            r"dataset\(\) takes prefetch in its read_config: pass "
            r"read_config=ReadConfig\(prefetch=2\).*Received: prefetch=2",
        ),
        (
            "source",
            {"num_parallel_reads": 4, "memory_budget": 10},
            r"pass read_config=ReadConfig\(num_parallel_reads=4, memory_budget=10\)",
        ),
        ("read_batches", {"capacity": 64}, r"read_config=ReadConfig\(capacity=64\)"),
        ("dataset", {"decode": {}}, r"read_config=ReadConfig\(decode=\{\}\)"),
        (
            "dataset",
            {"shuffle_files": True},
            r"Expected the keywords of dataset\(\) to be among files, batch_size, schema, "
            r"split, .*read_config .*Received: shuffle_files=True",
        ),
        ("read_batches", {"threads": 2}, r"among files, batch_size, pipeline, schema.*threads=2"),
    ],
)
def test_a_moved_or_unknown_keyword_names_the_right_spelling(shards, reader, kwargs, match):
    with tf.Graph().as_default(), pytest.raises(TypeError, match=match):
        getattr(tfrecord, reader)(shards, 8, **kwargs)


def test_read_config_checks_its_fields_when_made():
    with pytest.raises(ValueError, match=r"Received: prefetch=-3"):
        tfrecord.ReadConfig(prefetch=-3)
    with pytest.raises(ValueError, match=r"Received: shard='rows'"):
        tfrecord.ReadConfig(shard="rows")
    with pytest.raises(TypeError, match=r"Received: deterministic='yes'"):
        tfrecord.ReadConfig(deterministic="yes")
    with pytest.raises(TypeError, match=r"Received: read_config=\{'prefetch': 2\}"):
        tfrecord.dataset("unused", 8, read_config={"prefetch": 2})
    with pytest.raises(TypeError):  # keywords only: a new field never shifts a position
        tfrecord.ReadConfig(4)  # type: ignore[misc]


def _op_types(files, **kwargs):
    serialized = tfrecord.dataset(files, BATCH, **kwargs)._as_serialized_graph()
    return {node.op for node in tf.compat.v1.GraphDef.FromString(serialized.numpy()).node}


def test_read_config_knobs_reach_the_pipeline(shards):
    assert "PrefetchDataset" in _op_types(shards)
    assert "PrefetchDataset" not in _op_types(shards, read_config=tfrecord.ReadConfig(prefetch=0))
    config = tfrecord.ReadConfig(num_parallel_reads=1, compression="gzip")
    ds = tfrecord.dataset(shards, BATCH, read_config=config)
    assert sorted(int(x) for b in ds for x in b["label"].numpy()) == list(range(N))
    with pytest.raises(tfrecord.NotTFRecordError, match=r"not a TFRecord file \(uncompressed\)"):
        tfrecord.dataset(shards, BATCH, read_config=tfrecord.ReadConfig(compression=""))


def _packed(directory, tmp_path):
    tfrecord.convert(directory, tmp_path / "packed", examples_per_record=8)
    return tmp_path / "packed"


#: the pipeline kinds, as (reader keywords, how the files are written)
KINDS = {
    "streamed": ({}, False),
    "packed": ({}, True),
    "memory_decoded": ({"in_memory": True}, False),
    "memory_encoded": (
        {
            "in_memory": "auto",
            "map_fn": lambda e: {"image": tf.tile(e["image"], [64, 1]), "label": e["label"]},
            "read_config": tfrecord.ReadConfig(memory_budget=200_000),
        },
        False,
    ),
}


@pytest.mark.parametrize(
    "kind",
    [k if k == "memory_decoded" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS],
)  # about 2 s of CPU each: the fast run keeps the in-memory read the issue found
def test_the_batch_dimension_is_static_only_with_drop_remainder(shards, tmp_path, kind):
    # issue 44: an in-memory read whose count the batch divides had a static batch
    # dimension without drop_remainder, so tf.shape(x)[0] folded to a constant and a
    # graph-mode counter built on it counted one batch too many per epoch
    kwargs, packed = KINDS[kind]
    files = _packed(shards, tmp_path) if packed else shards
    for drop, static in ((False, None), (True, 100)):
        source = tfrecord.source(files, 100, drop_remainder=drop, **kwargs)
        assert source.facts.kind.value == kind
        for name, spec in source.element_spec.items():
            assert spec.shape[0] == static, (name, drop)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(files, 100, **kwargs)
        assert batches.facts.kind.value == kind
        assert batches.tensors["label"].shape[0] is None
        counted = tf.compat.v1.get_variable("counted", [], tf.int32, tf.zeros_initializer())
        count = tf.compat.v1.assign_add(counted, tf.shape(batches.tensors["label"])[0])
        with new_session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(2):  # two epochs: each initialization reads one pass
                session.run(batches.initializers)
                with pytest.raises(tf.errors.OutOfRangeError):
                    for _ in range(20):
                        session.run(count)
            assert session.run(counted) == 2 * N
