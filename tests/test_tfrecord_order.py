"""tfr_hooks.tfrecord.pipelines.orders.global_order: shuffle="global".

Mixed, exact, sharded, entered at a position.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks.tfrecord.formats import index as ix
from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalOrder

FEATURES = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "id": tf.io.FixedLenFeature([], tf.int64),
}


def class_ordered(directory: Path, classes: int, per_class: int, files: int) -> list[str]:
    """Files written in class order by a plain TFRecordWriter, as a converter walking
    class folders writes them: file ``f`` holds classes ``f*c .. f*c+c-1``, each in a run."""
    paths, per_file, record = [], classes // files, 0
    example = tf.train.Example()  # one message, its values set for each record (fast)
    feature = example.features.feature
    feature["label"].int64_list.value.append(0)
    feature["id"].int64_list.value.append(0)
    feature["x"].float_list.value.extend([0.5] * 8)
    labels, ids = feature["label"].int64_list.value, feature["id"].int64_list.value
    for f in range(files):
        path = str(directory / f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for label in range(f * per_file, (f + 1) * per_file):
                for _ in range(per_class):
                    labels[0], ids[0] = label, record
                    writer.write(example.SerializeToString())
                    record += 1
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> list[ix.RecordIndex]:
    """20 classes x 6,000 records in 4 files, in class order, indexed."""
    directory = tmp_path_factory.mktemp("classes")
    return [ix.build_index(path) for path in class_ordered(directory, 20, 6000, 4)]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> list[ix.RecordIndex]:
    """4 classes x 1,500 records in 4 files (11 full blocks and 92 more each)."""
    directory = tmp_path_factory.mktemp("small")
    return [ix.build_index(path) for path in class_ordered(directory, 4, 1500, 4)]


def parsed(batches: tf.data.Dataset, key: str) -> list[np.ndarray]:
    return [tf.io.parse_example(batch, FEATURES)[key].numpy() for batch in batches]


def ids(records: tf.data.Dataset) -> np.ndarray:
    found = parsed(records.batch(1024), "id")
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def test_mixes_class_ordered_files_in_every_early_batch(indexed: list[ix.RecordIndex]) -> None:
    """At least 15 of 20 classes in each of the first 20 batches, mean TV <= 0.25."""
    order = GlobalOrder(indexed, seed=3)
    labels = parsed(order.batches(256).take(20), "label")
    assert len(labels) == 20
    classes = [len(np.unique(batch)) for batch in labels]
    distance = [0.5 * np.abs(np.bincount(b, minlength=20) / len(b) - 0.05).sum() for b in labels]
    assert min(classes) >= 15, classes
    assert np.mean(distance) <= 0.25, distance
    # what a streamed buffer of 10,000 gives on the same files (the 4 classes)
    streamed = tf.data.TFRecordDataset([index.file for index in indexed])
    buffered = parsed(streamed.shuffle(10_000, seed=3).batch(256).take(20), "label")
    assert max(len(np.unique(batch)) for batch in buffered) < 15


@pytest.mark.slow  # 4 passes over 120,000 records; the fast run checks it on 6,000 (below)
def test_each_record_once_new_order_each_epoch_same_for_a_seed(
    indexed: list[ix.RecordIndex],
) -> None:
    order = GlobalOrder(indexed, seed=3)
    first = ids(order.records(0))
    assert len(first) == order.total == 120_000
    assert np.array_equal(np.sort(first), np.arange(120_000))
    second = ids(order.records(1))
    assert np.array_equal(np.sort(second), np.arange(120_000))
    assert np.mean(first == second) < 0.01  # another order
    assert np.array_equal(ids(GlobalOrder(indexed, seed=3).records(1)), second)
    assert not np.array_equal(ids(GlobalOrder(indexed, seed=4).records(1)), second)
    batched = np.concatenate(parsed(order.batches(256, 1), "id"))
    assert np.array_equal(batched, second)  # batches cut from the same order


def test_epochs_as_a_tensor_in_one_pipeline(small: list[ix.RecordIndex]) -> None:
    order = GlobalOrder(small, seed=5, window=1024)
    passes = tf.data.Dataset.range(1, 3).flat_map(lambda epoch: order.records(epoch))
    expected = np.concatenate([ids(order.records(1)), ids(order.records(2))])
    assert np.array_equal(ids(passes), expected)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_get_disjoint_shares_that_cover_the_data(
    small: list[ix.RecordIndex], workers: int
) -> None:
    shares = [
        ids(GlobalOrder(small, seed=7, window=1024, shard=(i, workers)).records(2))
        for i in range(workers)
    ]
    together = np.concatenate(shares)
    assert np.array_equal(np.sort(together), np.arange(6000))  # disjoint and covering
    sizes = GlobalOrder(small, seed=7, window=1024, shard=(0, workers)).shard_sizes()
    assert sizes == [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 128 + 92  # a block and a short block at most


def test_locate_maps_a_position_to_its_window_by_arithmetic(small: list[ix.RecordIndex]) -> None:
    order = GlobalOrder(small, seed=1, window=1024)
    assert order.windows == 6 and order.total == 6000
    assert list(order.sizes) == [1024 + 92] * 4 + [1024, 512]  # a short block each in turn
    assert order.locate(0) == (0, 0)
    assert order.locate(int(order.starts[3]) + 5) == (3, 5)
    assert order.locate(6000) == (6, 0)
    with pytest.raises(ValueError, match="Received: position=6001"):
        order.locate(6001)
    assert ids(order.records(start=6000)).size == 0


def damage_before(order: GlobalOrder, window: int, epoch: int) -> None:
    """Spoil one record of every block read by the windows before ``window``."""
    for before in range(window):
        files, offsets, _, _ = (t.numpy() for t in order.plan(before, epoch))
        for file, offset in zip(files, offsets, strict=True):
            with open(order.indexes[file].file, "r+b") as handle:
                handle.seek(int(offset) + 12 + 2)  # a byte of the block's first record
                byte = handle.read(1)
                handle.seek(int(offset) + 12 + 2)
                handle.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "where", ["early", pytest.param("late", marks=pytest.mark.slow)]
)  # each about 1 s of CPU: the fast run enters one window
def test_a_read_from_a_position_reads_nothing_before_its_window(
    small: list[ix.RecordIndex], tmp_path: Path, where: str
) -> None:
    """Started at position p, the read equals the epoch from p on, and never touches a
    record of an earlier window: those are spoiled, and a read of one would fail."""
    copies = []
    for index in small:
        copy = str(tmp_path / Path(index.file).name)
        shutil.copyfile(index.file, copy)
        copies.append(ix.RecordIndex(copy, "", index.key, index.count, index.block, index.bounds))
    order = GlobalOrder(copies, seed=11, window=1024)
    epoch = 3
    whole = ids(order.records(epoch))
    window = 1 if where == "early" else order.windows - 1
    position = int(order.starts[window]) + 37
    damage_before(order, window, epoch)
    with pytest.raises(tf.errors.DataLossError):
        ids(order.records(epoch))  # the spoiled records are found when read
    resumed = ids(order.records(epoch, start=position))
    assert np.array_equal(resumed, whole[position:])
    batched = np.concatenate(parsed(order.batches(100, epoch, start=position), "id"))
    assert np.array_equal(batched, whole[position:])


def test_compressed_files_are_refused_by_name(tmp_path: Path) -> None:
    path = str(tmp_path / "a.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        writer.write(b"x")
    index = ix.build_index(path, "GZIP")
    with pytest.raises(
        ValueError, match=r"GZIP file cannot be entered at a block.*a\.tfrecord\.gz"
    ):
        GlobalOrder([index], seed=0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"window": 0}, "Received: window=0"),
        ({"shard": (2, 2)}, r"Received: shard=\(2, 2\)"),
        ({"shard": (0, 0)}, r"Received: shard\[1\]=0"),
        ({"seed": 1.5}, "Received: seed=1.5"),
    ],
)
def test_arguments_are_checked(
    small: list[ix.RecordIndex], arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        GlobalOrder(small, **{"seed": 0, **arguments})  # type: ignore[arg-type]


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
def test_a_start_given_as_a_tensor_reads_what_an_integer_start_reads(
    small: list[ix.RecordIndex],
) -> None:
    """A pass's position read from a variable when it starts (a resumed run's seek)."""
    order = GlobalOrder(small, seed=4, window=1024)
    whole = ids(order.records(epoch=1))
    position = tf.Variable(0, dtype=tf.int64)
    records = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).flat_map(
        lambda _: order.records(epoch=1, start=position.read_value())
    )
    for start in (0, 1, 1023, 1116, 3000, order.total - 1, order.total):
        position.assign(start)
        np.testing.assert_array_equal(ids(records), whole[start:])
        window, begin = order.locate_tensor(tf.constant(start, tf.int64))
        assert (int(window), int(begin)) == order.locate(start)
