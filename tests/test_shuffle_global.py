"""``shuffle="global"`` on the readers: mixing, exactness per epoch, graph mode, errors.

The files are written in class order by a plain ``tf.io.TFRecordWriter`` (the layout a
converter walking class folders writes), so a streamed buffer shuffle mixes little.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tfrecord

CLASSES = 20
PER_CLASS = 300


def _example(label: int, ident: int) -> bytes:
    feature = {
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[ident])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write(directory, classes: int, per_class: int, files: int = 4) -> list[str]:
    """``classes * per_class`` records in class order over ``files`` files."""
    paths = [str(directory / f"part-{i}.tfrecord") for i in range(files)]
    total = classes * per_class
    ident = 0
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as writer:
            for ident in range(i * total // files, (i + 1) * total // files):
                writer.write(_example(ident // per_class, ident))
    return paths


@pytest.fixture(scope="module")
def class_files(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("classes"), CLASSES, PER_CLASS)


def _ids(data) -> list[np.ndarray]:
    return [batch["id"].numpy().reshape(-1) for batch in data]


def _mixing(data, batches: int = 20) -> tuple[int, float]:
    """The fewest classes in one of the first ``batches`` batches, and the mean TV distance."""
    fewest, distances = CLASSES, []
    for batch in data.take(batches):
        labels = batch["label"].numpy().reshape(-1)
        histogram = np.bincount(labels, minlength=CLASSES) / len(labels)
        fewest = min(fewest, int(np.count_nonzero(histogram)))
        distances.append(0.5 * np.abs(histogram - 1 / CLASSES).sum())
    return fewest, float(np.mean(distances))


@pytest.mark.slow  # writes 120,000 records: test_tfrecord_order.py mixes them in the fast run
def test_global_shuffle_mixes_class_ordered_files(tmp_path):
    files = _write(tmp_path, CLASSES, 6_000)  # the layout: 120,000 records
    fewest, distance = _mixing(tfrecord.dataset(files, 256, shuffle="global", seed=3))
    assert fewest >= 15 and distance <= 0.25, (fewest, distance)
    # a streamed buffer shuffle of the same files does not
    fewest, distance = _mixing(tfrecord.dataset(files, 256, shuffle=10_000, seed=3))
    assert fewest < 15 or distance > 0.25, (fewest, distance)


def _epoch_ids(data) -> np.ndarray:
    return np.concatenate(_ids(data))


def test_each_example_once_per_epoch_new_order_each_epoch(class_files):
    data = tfrecord.dataset(class_files, 256, shuffle="global", seed=3)
    first, second = _epoch_ids(data), _epoch_ids(data)
    everything = np.arange(CLASSES * PER_CLASS)
    np.testing.assert_array_equal(np.sort(first), everything)
    np.testing.assert_array_equal(np.sort(second), everything)
    assert not np.array_equal(first, second)
    # the same seed, the same orders (epoch by epoch)
    again = tfrecord.dataset(class_files, 256, shuffle="global", seed=3)
    np.testing.assert_array_equal(_epoch_ids(again), first)
    np.testing.assert_array_equal(_epoch_ids(again), second)
    other = tfrecord.dataset(class_files, 256, shuffle="global", seed=4)
    assert not np.array_equal(_epoch_ids(other), first)


def test_num_epochs_in_one_iterator(class_files):
    data = tfrecord.dataset(class_files, 256, shuffle="global", seed=3, num_epochs=2)
    ids = _epoch_ids(data)
    total = CLASSES * PER_CLASS
    assert len(ids) == 2 * total
    np.testing.assert_array_equal(np.sort(ids[:total]), np.arange(total))
    np.testing.assert_array_equal(np.sort(ids[total:]), np.arange(total))
    assert not np.array_equal(ids[:total], ids[total:])


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_counts_that_do_not_divide_the_batch(tmp_path, drop_remainder):
    files = _write(tmp_path, 7, 53, files=3)  # 371 records, blocks of 128 and short ones
    data = tfrecord.dataset(files, 100, shuffle="global", seed=1, drop_remainder=drop_remainder)
    sizes = [len(ids) for ids in _ids(data)]
    assert sizes == ([100] * 3 if drop_remainder else [100, 100, 100, 71])
    ids = _epoch_ids(data)
    if not drop_remainder:
        np.testing.assert_array_equal(np.sort(ids), np.arange(371))
    else:
        assert len(np.unique(ids)) == 300


def test_seed_none_draws_a_seed(class_files):
    first = _epoch_ids(tfrecord.dataset(class_files, 256, shuffle="global"))
    second = _epoch_ids(tfrecord.dataset(class_files, 256, shuffle="global"))
    np.testing.assert_array_equal(np.sort(first), np.arange(CLASSES * PER_CLASS))
    assert not np.array_equal(first, second)


def test_read_batches_graph_mode_each_initialization_an_epoch(class_files):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(class_files, 256, shuffle="global", seed=3)
        ids_op = batches.tensors["id"]
        epochs = []
        with tf.compat.v1.Session() as session:
            for _ in range(2):
                session.run(batches.initializers)
                ids = []
                while True:
                    try:
                        ids.append(session.run(ids_op).reshape(-1))
                    except tf.errors.OutOfRangeError:
                        break
                epochs.append(np.concatenate(ids))
    for ids in epochs:
        np.testing.assert_array_equal(np.sort(ids), np.arange(CLASSES * PER_CLASS))
    assert not np.array_equal(epochs[0], epochs[1])


def test_in_memory_global_is_a_fresh_permutation_each_epoch(class_files):
    data = tfrecord.dataset(class_files, 256, shuffle="global", seed=3, in_memory=True)
    first, second = _epoch_ids(data), _epoch_ids(data)
    np.testing.assert_array_equal(np.sort(first), np.arange(CLASSES * PER_CLASS))
    assert not np.array_equal(first, np.arange(CLASSES * PER_CLASS))
    assert not np.array_equal(first, second)


@pytest.mark.slow  # two training epochs
def test_function_loop_trains_an_epoch(class_files):
    import tfr_hooks

    total = CLASSES * PER_CLASS
    data = tfrecord.dataset(class_files, 256, shuffle="global", seed=3, as_tuple=("id", "label"))
    data = data.map(lambda x, y: (tf.cast(x, tf.float32) / total, y))
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(CLASSES)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trained: list[np.ndarray] = []  # the ids of each batch the model trained on
    train_step = model.train_step

    def note(x):
        trained.append(np.rint(x.numpy().reshape(-1) * total).astype(np.int64))
        return np.int64(0)

    def recording_step(batch):
        done = tf.py_function(note, [batch[0]], tf.int64)
        with tf.control_dependencies([done]):
            return train_step(batch)

    model.train_step = recording_step
    initial = model.get_weights()
    history = tfr_hooks.FunctionLoop(data, model=model, steps_per_execution=1).run(epochs=2)

    steps = -(-total // 256)
    assert len(trained) == 2 * steps and len(history["loss"]) == 2
    # each epoch trains on every example once, in the order a plain read of it gives
    reads = tfrecord.dataset(class_files, 256, shuffle="global", seed=3)
    for epoch in range(2):
        ids = np.concatenate(trained[epoch * steps : (epoch + 1) * steps])
        np.testing.assert_array_equal(ids, _epoch_ids(reads))
    assert not np.array_equal(trained[0], trained[steps])  # a new order each epoch
    assert all(np.isfinite(history["loss"]))
    assert not np.allclose(model.get_weights()[0], initial[0])  # it trained


def test_errors_name_shuffle_and_what_works(class_files, tmp_path):
    match = r"shuffle.*None.*a positive int.*'global'.*Received: shuffle='full'"
    with pytest.raises(ValueError, match=match):
        tfrecord.dataset(class_files, 8, shuffle="full")
    with pytest.raises(ValueError, match=r"Received: shuffle='global', shuffle_buffer=100"):
        tfrecord.dataset(class_files, 8, shuffle="global", shuffle_buffer=100)
    with pytest.raises(ValueError, match=r"shuffle=None with service="):
        tfrecord.dataset(class_files, 8, shuffle="global", service="grpc://localhost:1")
    gzipped = str(tmp_path / "data.tfrecord.gz")
    with tf.io.TFRecordWriter(gzipped, options="GZIP") as writer:
        writer.write(_example(0, 0))
    with pytest.raises(ValueError, match=r"uncompressed files with shuffle='global'"):
        tfrecord.dataset([gzipped], 8, shuffle="global")
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"shuffle.*pipeline='queue'"):
        tfrecord.read_batches(class_files, 8, shuffle="global", pipeline="queue")


@pytest.mark.slow  # two passes; test_tfrecord_order.py checks GlobalOrder's shares
def test_workers_read_one_sequence_for_any_worker_count_split_by_data(class_files, monkeypatch):
    """Under MWMS every worker reads the same global order; the strategy splits it by data.

    Worker 0 of 2 and worker 2 of 3 read one sequence: a position in it is the same
    place on any worker count (tests/test_resume_worker_count.py resumes across counts).
    """
    sequences = []
    for worker, workers in ((0, 2), (2, 3)):
        cluster = {"worker": [f"127.0.0.1:{port}" for port in range(1, workers + 1)]}
        config = {"cluster": cluster, "task": {"type": "worker", "index": worker}}
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
        data = tfrecord.dataset(class_files, 64, shuffle="global", seed=3)
        assert (
            data.options().experimental_distribute.auto_shard_policy
            == tf.data.experimental.AutoShardPolicy.DATA
        )
        sequences.append(_epoch_ids(data))
    np.testing.assert_array_equal(sequences[0], sequences[1])
    np.testing.assert_array_equal(np.sort(sequences[0]), np.arange(CLASSES * PER_CLASS))
