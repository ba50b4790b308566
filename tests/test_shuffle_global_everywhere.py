"""``shuffle="global"`` beyond plain shards: packed shards, damaged files, TFDS, both loops.

Each reads every example once an epoch, a different order each epoch, the same orders
for the same seed; packed shards written in class order mix as plain ones do. The queue
pipeline and the tf.data service refuse it, saying why and what to use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tensorflow as tf

import _tfds_builders as builders
import tfr_hooks
from test_damaged_records import flip_data, flip_header, not_an_example, write
from tfr_hooks import FunctionLoop, tfrecord


def _epochs(data: tf.data.Dataset, name: str, epochs: int = 2) -> list[np.ndarray]:
    """The ids of ``epochs`` iterations of ``data`` (feature ``name``), one array each."""
    return [
        np.concatenate([np.asarray(b[name]).reshape(len(b[name]), -1)[:, 0] for b in data])
        for _ in range(epochs)
    ]


def _exact(make: Any, name: str, expected: np.ndarray) -> None:
    """Each id once an epoch, a new order each epoch, the same orders for the same seed."""
    first = _epochs(make(3), name)
    for ids in first:
        np.testing.assert_array_equal(np.sort(ids), np.sort(expected))
    assert not np.array_equal(first[0], first[1])
    again = _epochs(make(3), name)
    for ids, same in zip(first, again, strict=True):
        np.testing.assert_array_equal(ids, same)
    assert not np.array_equal(_epochs(make(4), name, 1)[0], first[0])


# -- packed shards ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed_classes(tmp_path_factory: pytest.TempPathFactory) -> str:
    """20 classes of 600 examples in class order, 4 examples a record, 3 shards."""
    ids = np.arange(12_000, dtype=np.int64)
    written = tfrecord.write(
        {"id": ids, "label": ids // 600},
        str(tmp_path_factory.mktemp("packed")),
        examples_per_record=4,
        shards=3,
    )
    return written.directory


@pytest.mark.slow  # several passes over 12,000 examples; read_batches below checks it lighter
def test_packed_shards_each_example_once_an_epoch(packed_classes: str) -> None:
    _exact(
        lambda seed: tfrecord.dataset(packed_classes, 256, shuffle="global", seed=seed),
        "id",
        np.arange(12_000),
    )


@pytest.mark.slow  # about 1.5 s of CPU; CI runs it
def test_packed_shards_mix_examples_not_records(packed_classes: str) -> None:
    data = tfrecord.dataset(packed_classes, 256, shuffle="global", seed=3)
    fewest, distances = 20, []
    for batch in data.take(20):
        labels, ids = batch["label"].numpy(), batch["id"].numpy()
        histogram = np.bincount(labels, minlength=20) / len(labels)
        fewest = min(fewest, int(np.count_nonzero(histogram)))
        distances.append(0.5 * np.abs(histogram - 0.05).sum())
        # a record's 4 examples are not handed out together
        assert np.mean(np.diff(ids) == 1) < 0.1
    assert fewest >= 15 and np.mean(distances) <= 0.25, (fewest, np.mean(distances))
    streamed = tfrecord.dataset(packed_classes, 256, shuffle=1_000, seed=3)
    first = next(iter(streamed))["label"].numpy()
    assert len(np.unique(first)) < 15


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
def test_packed_shards_under_read_batches_each_initialization_an_epoch(
    packed_classes: str,
) -> None:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(packed_classes, 500, shuffle="global", seed=3)
        epochs = _session_epochs(batches, "id")
    for ids in epochs:
        np.testing.assert_array_equal(np.sort(ids), np.arange(12_000))
    assert not np.array_equal(epochs[0], epochs[1])


def _session_epochs(batches: Any, name: str, epochs: int = 2) -> list[np.ndarray]:
    """Every batch of feature ``name`` of ``epochs`` initializations of ``batches``."""
    found = []
    with tf.compat.v1.Session() as session:
        for _ in range(epochs):
            session.run(batches.initializers)
            ids = []
            while True:
                try:
                    ids.append(session.run(batches.tensors[name]).reshape(-1))
                except tf.errors.OutOfRangeError:
                    break
            found.append(np.concatenate(ids))
    return found


# -- max_corrupt_records ------------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[list[str], np.ndarray]:
    """Four files of 400 records; three hold damage inside their blocks of 128."""
    files = [
        flip_data(write(tmp_path / "a.tfrecord", range(0, 400)), 150),
        flip_header(write(tmp_path / "b.tfrecord", range(400, 800)), 300),
        not_an_example(tmp_path / "c.tfrecord", range(800, 1200), 1000),
        write(tmp_path / "d.tfrecord", range(1200, 1600)),
    ]
    lost = {150, 700, 1000}
    return [str(f) for f in files], np.array(sorted(set(range(1600)) - lost))


@pytest.mark.slow  # several passes; the workers' shares below cover each whole record once
def test_damaged_files_each_whole_record_once_an_epoch(
    damaged: tuple[list[str], np.ndarray],
) -> None:
    files, whole = damaged
    _exact(
        lambda seed: tfrecord.dataset(
            files, 64, shuffle="global", seed=seed, max_corrupt_records=3
        ),
        "id",
        whole,
    )


def test_damaged_files_beyond_the_limit_still_raise(damaged: tuple[list[str], Any]) -> None:
    files, _ = damaged
    with pytest.raises(tfrecord.CorruptRecordError, match="max_corrupt_records"):
        tfrecord.dataset(files, 64, shuffle="global", seed=3, max_corrupt_records=2)


# -- directories written by TensorFlow Datasets --------------------------------------------


class ManyPhotos(builders.PhotosJpeg):
    """PhotosJpeg with 300 training examples (more than two blocks of 128)."""

    splits: ClassVar[dict[str, int]] = {"train": 300}


@pytest.mark.slow  # about 1.5 s of CPU; CI runs it
def test_tfds_directory_each_example_once_an_epoch(tmp_path: Path) -> None:
    builder = ManyPhotos(data_dir=str(tmp_path))
    builder.download_and_prepare()
    directory = str(builder.data_dir)
    _exact(
        lambda seed: tfrecord.dataset(directory, 32, shuffle="global", seed=seed),
        "weights",
        np.arange(300),
    )


# -- both loops ---------------------------------------------------------------------------


class SeenIds(tfr_hooks.Hook):
    """Records the ids of every batch, epoch by epoch (from the loop's batch fetch)."""

    def __init__(self, ids: Any) -> None:
        self.ids_tensor, self.epochs = ids, []

    def epoch_begin(self, epoch: int) -> None:
        self.epochs.append([])

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self.ids_tensor)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.epochs[-1].append(np.asarray(run_values.results).reshape(-1))


@pytest.fixture
def plain(tmp_path: Path) -> list[str]:
    return [
        str(write(tmp_path / f"part-{i}.tfrecord", range(i * 300, (i + 1) * 300))) for i in range(2)
    ]


def test_session_loop_reads_every_record_each_epoch(plain: list[str]) -> None:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(plain, 50, shuffle="global", seed=3)
        step = tf.compat.v1.train.get_or_create_global_step()
        hook = SeenIds(batches.tensors["id"])
        loop = tfr_hooks.SessionLoop(
            tf.compat.v1.assign_add(step, 1), hooks=[hook], data=batches, handle_signals=False
        )
        loop.run(epochs=2)
    epochs = [np.concatenate(ids) for ids in hook.epochs]
    for ids in epochs:
        np.testing.assert_array_equal(np.sort(ids), np.arange(600))
    assert not np.array_equal(epochs[0], epochs[1])


def test_function_loop_reads_every_record_each_epoch(plain: list[str]) -> None:
    data = tfrecord.dataset(plain, 50, shuffle="global", seed=3)
    seen: list[list[np.ndarray]] = []

    class Epochs(tfr_hooks.Hook):
        def epoch_begin(self, epoch: int) -> None:
            seen.append([])

    def note(ids: tf.Tensor) -> int:
        seen[-1].append(ids.numpy().reshape(-1))
        return 0

    def step(batch: Any) -> dict[str, Any]:
        noted = tf.py_function(note, [batch["id"]], tf.int64)
        return {"noted": tf.cast(noted, tf.float32)}

    FunctionLoop(data, step_fn=step, hooks=[Epochs()]).run(epochs=2)
    epochs = [np.concatenate(ids) for ids in seen]
    assert len(epochs) == 2
    for ids in epochs:
        np.testing.assert_array_equal(np.sort(ids), np.arange(600))
    assert not np.array_equal(epochs[0], epochs[1])


# -- the pipelines that refuse it ------------------------------------------------------------


def test_queue_and_service_say_why_and_what_works(plain: list[str]) -> None:
    with (
        tf.Graph().as_default(),
        pytest.raises(ValueError, match=r"pipeline=.queue.*no seek to a block.*pipeline=.dataset."),
    ):
        tfrecord.read_batches(plain, 8, shuffle="global", pipeline="queue")
    with pytest.raises(ValueError, match=r"service=.*do not know which epoch.*without service="):
        tfrecord.dataset(plain, 8, shuffle="global", service="grpc://localhost:1")


# -- workers --------------------------------------------------------------------------------


@pytest.mark.slow  # about 1.5 s of CPU; CI runs it
def test_workers_read_one_packed_or_damaged_sequence_split_by_data(
    packed_classes: str, damaged: tuple[list[str], np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under MWMS every worker reads the one global order (the strategy splits by data)."""
    files, whole = damaged
    cases = [
        (packed_classes, {}, np.arange(12_000)),
        (files, {"max_corrupt_records": 3}, whole),
    ]
    for source, extra, expected in cases:
        shares = []
        for worker in range(2):
            cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
            config = {"cluster": cluster, "task": {"type": "worker", "index": worker}}
            monkeypatch.setenv("TF_CONFIG", json.dumps(config))
            data = tfrecord.dataset(source, 64, shuffle="global", seed=3, **extra)
            shares.append(_epochs(data, "id", 1)[0])
        np.testing.assert_array_equal(shares[0], shares[1])
        np.testing.assert_array_equal(np.sort(shares[0]), np.sort(expected))
