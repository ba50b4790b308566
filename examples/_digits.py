"""Shared by the examples: scikit-learn's bundled digits as TFRecord files, and readers.

The digits (1,797 images of 8x8 pixels, 10 classes) ship inside scikit-learn, so the
examples need no network. Each record holds ``image`` (64 floats in [0, 1]) and ``label``
(an int64). The split is fixed: 1,200 train, 297 validation, 300 test records.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np

from tfr_hooks.quiet import import_tensorflow

tf = import_tensorflow()  # drops TensorFlow's start-up notices, keeps real errors

# The queue API's deprecation notices would bury the examples' output; errors still show.
tf.get_logger().setLevel(logging.ERROR)

__all__ = [
    "FEATURES",
    "SPLITS",
    "NUM_CLASSES",
    "add_directory_flags",
    "add_steps_per_execution_flag",
    "write_digits",
    "write_digit_shards",
    "queue_batch",
    "dataset",
]

NUM_CLASSES = 10
SPLITS = {"train": (0, 1200), "validation": (1200, 1497), "test": (1497, 1797)}
FEATURES = {
    "image": tf.io.FixedLenFeature([64], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def add_directory_flags(parser: Any, logdir: str, what: str = "checkpoints and logs") -> None:
    """Give an example's ``parser`` the flags every example has: ``--data-dir``, ``--logdir``."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data/digits"),
        help="where the digits TFRecords are written (reused if there; default: %(default)s)",
    )
    parser.add_argument(
        "--logdir",
        type=Path,
        default=Path(logdir),
        help=f"where the {what} are written (default: %(default)s)",
    )


def add_steps_per_execution_flag(parser: Any, default: int | str = "auto") -> None:
    """Give an example's ``parser`` ``--steps-per-execution``: an integer, or ``auto``."""

    def steps(text: str) -> int | str:
        if text == "auto":
            return text
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}")
        return value

    parser.add_argument(
        "--steps-per-execution",
        type=steps,
        default=default,
        help="training steps per tf.function call, or 'auto' to let the loop choose from "
        "its timed calls (default: %(default)s)",
    )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits' images (floats in [0, 1]) and labels, in the examples' fixed order."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    images = (digits.data[order] / 16.0).astype(np.float32)
    return images, digits.target[order].astype(np.int64)


def write_digits(data_dir: str | Path) -> dict[str, Path]:
    """Write the digits splits as ``DATA_DIR/{train,validation,test}.tfrecord`` (once)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: data_dir / f"{name}.tfrecord" for name in SPLITS}
    if all(p.exists() for p in paths.values()):
        return paths
    images, labels = _digits_arrays()
    for name, (start, stop) in SPLITS.items():
        tmp = paths[name].with_suffix(".tmp")
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for image, label in zip(images[start:stop], labels[start:stop], strict=True):
                feature = {
                    "image": tf.train.Feature(float_list=tf.train.FloatList(value=image)),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        tmp.rename(paths[name])
    return paths


def write_digit_shards(data_dir: str | Path, train_shards: int = 4) -> dict[str, Path]:
    """Write the train and validation splits with ``tfrecord.write`` (once).

    ``DATA_DIR/train/`` holds ``train_shards`` files (1,200 examples split evenly),
    ``DATA_DIR/validation/`` one file of 297; each directory has its ``schema.json``,
    which lists every file's examples. Several files let several readers (workers of a
    cluster, or of a tf.data service) each take whole files.

    Returns:
        The two directories, by split name.
    """
    from tfr_hooks import tfrecord

    data_dir = Path(data_dir)
    paths = {"train": data_dir / "train", "validation": data_dir / "validation"}
    if all((p / "schema.json").exists() for p in paths.values()):
        return paths
    images, labels = _digits_arrays()
    for name, shards in (("train", train_shards), ("validation", 1)):
        start, stop = SPLITS[name]
        data = {"image": images[start:stop], "label": labels[start:stop]}
        tfrecord.write(data, paths[name], shards=shards, overwrite=True)
    return paths


def queue_batch(
    path: Path, batch_size: int, *, num_epochs: int | None, shuffle: bool = True
) -> tuple[Any, Any]:
    """The seed answer's queue pipeline: string_input_producer + TFRecordReader + shuffle_batch.

    Returns:
        ``(image, label)`` batch tensors of static shape ``(None, 64)`` and ``(None,)``.
    """
    v1 = tf.compat.v1
    files = v1.train.string_input_producer([str(path)], num_epochs=num_epochs, shuffle=False)
    _, serialized = v1.TFRecordReader().read(files)
    example = tf.io.parse_single_example(serialized, FEATURES)
    tensors = [example["image"], example["label"]]
    if shuffle:
        image, label = v1.train.shuffle_batch(
            tensors,
            batch_size,
            capacity=8 * batch_size,
            min_after_dequeue=2 * batch_size,
            num_threads=2,
            allow_smaller_final_batch=True,
            seed=0,
        )
    else:
        image, label = v1.train.batch(
            tensors, batch_size, num_threads=1, allow_smaller_final_batch=True
        )
    return image, label


def dataset(path: Path, batch_size: int, *, shuffle: bool = False) -> tf.data.Dataset:
    """The same records as a ``tf.data`` pipeline of ``(image, label)`` batches."""
    ds = tf.data.TFRecordDataset(str(path))
    if shuffle:
        ds = ds.shuffle(2048, seed=0)
    ds = ds.batch(batch_size).map(lambda s: tf.io.parse_example(s, FEATURES))
    return ds.map(lambda d: (d["image"], d["label"])).prefetch(2)
