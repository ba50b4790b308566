"""Each example exactly once an epoch through the tf.data service, whatever the files.

The dispatcher of ``processing_mode="distributed_epoch"`` splits the pipeline's first
splittable source: the readers make it the index blocks of the files
(:mod:`tfr_hooks.tfrecord.pipelines.splits`), so that one file is shared by every worker,
and never put a shuffle of the file list in front of it (every worker would read every
file). The matrix: 1, 2 and 5 files x 2 and 3 workers x unshuffled and a buffer shuffle,
under both loops, the ids of each of 2 epochs counted. The 2-worker service is the
session's shared one; the 3-worker one is started once for this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.service.local import LocalService
from tfr_hooks.tfrecord.formats.index import index_files
from tfr_hooks.tfrecord.pipelines.splits import block_splits

v1 = tf.compat.v1

#: records in all, however many files hold them: 8 blocks of the index in one file
TOTAL = 1000
BATCH = 64
START = 240  # seconds the servers may take to start on a loaded 2-core machine
MATRIX = pytest.mark.parametrize(
    ("files", "workers", "shuffle"),
    [(f, w, b) for f in (1, 2, 5) for w in (2, 3) for b in (None, 100)],
)


@pytest.fixture(scope="module")
def three_workers() -> Iterator[str]:
    with LocalService(workers=3, timeout=START) as local:
        yield local.address


@pytest.fixture
def services(request: pytest.FixtureRequest) -> dict[int, str]:
    """The address of a service with 2 or 3 workers, started when first asked for."""

    class Lazy(dict):  # type: ignore[type-arg]
        def __missing__(self, workers: int) -> str:
            name = {2: "shared_service", 3: "three_workers"}[workers]
            self[workers] = request.getfixturevalue(name)
            return self[workers]

    return Lazy()


def write_files(directory: Path, files: int, compression: str = "") -> list[str]:
    """``TOTAL`` records with ids ``0 .. TOTAL-1`` in ``files`` files, by TensorFlow's writer."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for f, ids in enumerate(np.array_split(np.arange(TOTAL), files)):
        path = str(directory / f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path, compression or None) as writer:
            for i in ids:
                feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i)]))}
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        paths.append(path)
    return paths


class EpochIds(tfr_hooks.Hook):
    """How many times each id was trained, per epoch, read from a counter variable."""

    def __init__(self, read: Any, reset: Any) -> None:
        self.read, self.reset = read, reset
        self.session: Any = None
        self.epochs: list[np.ndarray] = []

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.session = session

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        run = self.session.run if self.session is not None else lambda op: op()
        self.epochs.append(np.asarray(run(self.read)).copy())
        run(self.reset)


def count_ids(hits: Any, ids: Any) -> Any:
    """Add one to ``hits`` at each id of a batch."""
    ids = tf.reshape(tf.cast(ids, tf.int32), [-1])
    return hits.assign_add(tf.math.unsorted_segment_sum(tf.ones_like(ids), ids, TOTAL))


def assert_each_id_once(epochs: list[np.ndarray], skipped: frozenset[int] = frozenset()) -> None:
    assert len(epochs) == 2
    expected = np.ones(TOTAL, np.int64)
    expected[list(skipped)] = 0
    for epoch, hits in enumerate(epochs):
        twice, never = np.flatnonzero(hits > expected), np.flatnonzero(hits < expected)
        assert (twice.size, never.size) == (0, 0), (
            f"epoch {epoch}: {twice.size} ids more than once (e.g. {twice[:5].tolist()}), "
            f"{never.size} never (e.g. {never[:5].tolist()})"
        )


def test_the_splits_cut_one_file_for_every_worker_and_cover_each_record_once(
    tmp_path: Path,
) -> None:
    for files in (1, 2, 5):
        indexes = index_files(write_files(tmp_path / str(files), files))
        which, offsets, counts = block_splits(indexes)
        assert len(counts) >= 3  # 1,000 records: 8 blocks, so 3 workers each get some
        assert int(counts.sum()) == TOTAL
        for i, index in enumerate(indexes):  # each split starts at a block of its file
            mine = offsets[which == i]
            assert set(mine.tolist()) <= set(index.bounds[:-1].tolist())
            assert int(counts[which == i].sum()) == index.count


def test_the_splits_stay_few_enough_for_the_graph_on_large_data(tmp_path: Path) -> None:
    (small,) = index_files(write_files(tmp_path, 1))
    # a file of 1,000 blocks (the offsets made up: only the split table is built)
    large = dataclasses.replace(small, count=128_000, bounds=np.arange(1001, dtype=np.int64))
    _, offsets, counts = block_splits([large], target=4, most=2, cap=100)
    assert len(counts) == 100  # 10 blocks a split (past `most`), not 500 splits of 2
    assert offsets.tolist() == list(range(0, 1000, 10)) and set(counts.tolist()) == {1280}


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(2 * START + 300)
@MATRIX
def test_function_loop_trains_each_example_once_an_epoch_through_the_service(
    services: dict[int, str], tmp_path: Path, files: int, workers: int, shuffle: int | None
) -> None:
    paths = write_files(tmp_path, files)
    source = tfrecord.source(paths, BATCH, shuffle=shuffle, service=services[workers])
    hits = tf.Variable(tf.zeros([TOTAL], tf.int32))

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        count_ids(hits, batch["id"])
        return {"n": tf.cast(tf.size(batch["id"]), tf.float32)}

    counted = EpochIds(hits.numpy, lambda: hits.assign(tf.zeros_like(hits)))
    FunctionLoop(source, step_fn=step, hooks=[counted], steps_per_execution=1).run(epochs=2)
    assert_each_id_once(counted.epochs)


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(2 * START + 300)
@MATRIX
def test_session_loop_trains_each_example_once_an_epoch_through_the_service(
    services: dict[int, str], tmp_path: Path, files: int, workers: int, shuffle: int | None
) -> None:
    paths = write_files(tmp_path, files)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(paths, BATCH, shuffle=shuffle, service=services[workers])
        hits = v1.get_variable("hits", [TOTAL], tf.int32, initializer=tf.zeros_initializer())
        train_op = count_ids(hits, batches.tensors["id"])
        counted = EpochIds(hits.value(), hits.assign(tf.zeros_like(hits)))
        tfr_hooks.SessionLoop(train_op, {}, hooks=[counted], data=batches).run(epochs=2)
    assert_each_id_once(counted.epochs)


def flip_record(path: str, record: int) -> None:
    """Damage ``record`` of an uncompressed file: a byte of its data flipped (its CRC fails)."""
    data, at = bytearray(Path(path).read_bytes()), 0
    for _ in range(record):
        at += 16 + int.from_bytes(data[at : at + 8], "little")
    data[at + 12 + 3] ^= 0x5A
    Path(path).write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 300)
@pytest.mark.parametrize(
    "kind", ["gzip, 1 file", "gzip, 2 files", "damaged", "64 files", "packed, 1 shard"]
)
def test_compressed_damaged_packed_and_many_files_give_each_example_once_through_the_service(
    services: dict[int, str], tmp_path: Path, kind: str
) -> None:
    # compressed (no block to enter) and 64 files or more: one split a file, extra workers
    # idle; a damaged file: the runs of whole records around the damage cut in blocks;
    # one packed shard (2 examples a record, 500 records): its records cut in blocks
    files = {"gzip, 1 file": 1, "gzip, 2 files": 2, "damaged": 1, "64 files": 64}.get(kind, 1)
    paths: Any = write_files(tmp_path / "plain", files, "GZIP" if "gzip" in kind else "")
    skipped: frozenset[int] = frozenset()
    read: dict[str, Any] = {}
    if kind == "damaged":
        flip_record(paths[0], 300)
        skipped, read = frozenset({300}), {"max_corrupt_records": 1}
    if kind.startswith("packed"):
        paths = tmp_path / "packed"
        tfrecord.convert(write_files(tmp_path / "plain", 1), paths, examples_per_record=2)
    data = tfrecord.dataset(
        paths,
        BATCH,
        shuffle=100,
        service=services[3],
        **read,
    )
    epochs = []
    for _ in range(2):  # a new iterator each: a new epoch
        hits = np.zeros(TOTAL, np.int64)
        for batch in data:
            np.add.at(hits, np.asarray(batch["id"]).ravel(), 1)
        epochs.append(hits)
    assert_each_id_once(epochs, skipped)
