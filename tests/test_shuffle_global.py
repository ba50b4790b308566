"""``shuffle="global"`` on the readers: mixing, exactness per epoch, graph mode, errors.

The files are written in class order by a plain ``tf.io.TFRecordWriter`` (the layout a
converter walking class folders writes), so a streamed buffer shuffle mixes little.
"""

from __future__ import annotations

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


def test_global_shuffle_mixes_class_ordered_files(tmp_path):
    files = _write(tmp_path, CLASSES, 6_000)  # the layout: 120,000 records
    fewest, distance = _mixing(tfrecord.dataset(files, 256, shuffle="global", seed=3))
    assert fewest >= 15 and distance <= 0.25, (fewest, distance)
    # a streamed buffer shuffle of the same files does not
    fewest, distance = _mixing(tfrecord.dataset(files, 256, shuffle_buffer=10_000, seed=3))
    assert fewest < 15 or distance > 0.25, (fewest, distance)
