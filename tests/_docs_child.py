"""Run every Python code block of one Markdown document, in order, as a reader would.

Usage: ``python tests/_docs_child.py DOCUMENT WORKDIR``. The blocks of one document share
one namespace (a later block may use what an earlier one defined) and run in ``WORKDIR``,
where this script first writes the data the documents read and defines the few names that
stand for the reader's own code (:func:`scaffold`). Blocks preceded by a
``<!-- skip: next ... -->`` comment (Sybil's skip directive) are not run; the reason
stands in the comment, visible in the source. The script prints one
``RESULT {json}`` line with the line numbers of the blocks it ran and skipped, and exits
non-zero with the failing block's location and traceback when one fails.

Each document runs in a fresh process (the tests fork it from a server that imported
TensorFlow once): blocks set process-wide state (threading, strategies, Keras' session)
that another document must not inherit.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import unittest
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from sybil import Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

v1 = tf.compat.v1
#: Documents whose first block configures TensorFlow's runtime (threads, a strategy).
CONFIGURES_TENSORFLOW = {"distributed.md"}
#: documents that read ``tensorflow_datasets/digits_png`` and ``episodes`` (1.0.0)
TFDS_DOCUMENTS = {"own_tfrecords.md"}
SYBIL = Sybil(parsers=[SkipParser(), PythonCodeBlockParser()])


def _example(features: dict[str, Any]) -> bytes:
    feature = {}
    for name, value in features.items():
        if isinstance(value, list) and value and isinstance(value[0], float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
        elif isinstance(value, tuple):  # an empty list of the given kind, as TFX writes it
            kind = value[0]
            feature[name] = (
                tf.train.Feature(float_list=tf.train.FloatList())
                if kind == "float"
                else tf.train.Feature(bytes_list=tf.train.BytesList())
            )
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_data(jpegs: bool = True) -> None:
    """The files the documents read, in the working directory.

    - ``data/train`` and ``data/validation``: scikit-learn's digits (1,200 and 597
      examples; ``image`` 64 floats in [0, 1], ``label`` int64), written by
      ``tfrecord.write`` into 2 shards with a ``schema.json``;
    - ``train.tfrecord``: the same 1,200 training digits, by a plain ``tf.io.TFRecordWriter``;
    - ``mnist_train.tfrecords``: 1,000 records in the layout of the seed's
      ``mnist_tfrecord.py`` (``image_raw`` 784 raw bytes, ``label``, ``height``,
      ``width``, ``depth``), written with a plain ``tf.io.TFRecordWriter``;
    - ``taxi.gz``: 500 GZIP records in TFX's layout, optional features held as empty lists;
    - ``images.tfrecord``: 200 records in the layout of TensorFlow's image pipelines
      (``image/encoded`` 16x16 JPEG bytes, ``image/class/label``), by a plain writer;
      only with ``jpegs`` (encoding JPEG starts TensorFlow's runtime);
    - ``objects.tfrecord.gz``: 200 GZIP records of the same layout with box lists: the
      same JPEGs, ``image/class/label``, and ``image/object/bbox/label`` (int64) and
      ``image/object/bbox/xmin`` (float) of 1 to 4 values, absent from every fifth
      record (an image without boxes); only with ``jpegs``;
    - ``text.tfrecord``: 400 records of token ids, ``tokens`` (int64, 1..999, lengths
      lognormal from 5 to 500, median about 40) and ``label``, by a plain writer.
    """
    from sklearn.datasets import load_digits

    from tfr_hooks import tfrecord

    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    tfrecord.write({"image": images[:1200], "label": labels[:1200]}, "data/train", shards=2)
    tfrecord.write({"image": images[1200:], "label": labels[1200:]}, "data/validation")
    with tf.io.TFRecordWriter("train.tfrecord") as writer:  # the same, by a plain writer
        for image, label in zip(images[:1200], labels[:1200], strict=True):
            writer.write(_example({"image": image.tolist(), "label": [int(label)]}))

    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter("mnist_train.tfrecords") as writer:
        for i in range(1000):
            pixels = rng.integers(0, 256, size=784, dtype=np.uint8).tobytes()
            record = {"image_raw": [pixels], "label": [i % 10]}
            record.update(height=[28], width=[28], depth=[1])
            writer.write(_example(record))

    options = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter("taxi.gz", options) as writer:
        for i in range(500):
            company = [b"Flash Cab"] if i % 3 else ("bytes",)
            writer.write(
                _example(
                    {
                        "company": company,
                        "dropoff_latitude": [41.9] if i % 2 else ("float",),
                        "tips": [float(i % 7)],
                        "trip_miles": [0.5 * i],
                        "trip_seconds": [60.0 * i] if i else ("float",),
                    }
                )
            )

    if not jpegs:
        return
    ramp = np.tile(np.arange(16, dtype=np.uint8) * 16, (16, 1))
    jpegs: list[bytes] = []
    with tf.io.TFRecordWriter("images.tfrecord") as writer:
        for i in range(200):
            image = np.stack([ramp, ramp.T, np.full_like(ramp, i)], -1)
            encoded = tf.io.encode_jpeg(image).numpy()
            writer.write(_example({"image/encoded": [encoded], "image/class/label": [i % 10]}))
            jpegs.append(encoded)

    options = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter("objects.tfrecord.gz", options) as writer:
        for i, encoded in enumerate(jpegs):
            record: dict[str, Any] = {"image/encoded": [encoded], "image/class/label": [i % 10]}
            if i % 5:  # producers leave the keys out for an image without boxes
                boxes = [(i + k) % 7 for k in range(i % 4 + 1)]
                record["image/object/bbox/label"] = boxes
                record["image/object/bbox/xmin"] = [b / 10 for b in boxes]
            writer.write(_example(record))

    lengths = np.clip(rng.lognormal(3.7, 0.8, 400), 5, 500).astype(int)
    with tf.io.TFRecordWriter("text.tfrecord") as writer:
        for i, length in enumerate(lengths):
            tokens = rng.integers(1, 1000, size=length).tolist()
            writer.write(_example({"tokens": tokens, "label": [i % 2]}))


def scaffold(document: str) -> dict[str, Any]:
    """The names that stand for the reader's own code in the documents' blocks.

    Graph-mode blocks call ``my_model_loss(image, label)`` (a linear softmax classifier on
    the digits), ``my_train_op(image, label)`` (its Adam train op, with a global step) and
    ``my_queue_batch(path)``; TF2 blocks use ``build_model()`` (a compiled-ready Keras 3
    MLP), ``model``, ``callbacks``, ``val_ds``/``val``; ``MyHook``/``my_hook`` is a hook of
    the reader's; ``images``/``labels`` are arrays to write. For a document that
    configures TensorFlow before its first op (:data:`CONFIGURES_TENSORFLOW`), only
    functions: an object made here would start TensorFlow's runtime first.
    """
    import keras

    import tfr_hooks
    from tfr_hooks import tfrecord

    def my_model_loss(image: Any, label: Any) -> Any:
        weights = v1.get_variable("weights", [64, 10], initializer=v1.zeros_initializer())
        bias = v1.get_variable("bias", [10], initializer=v1.zeros_initializer())
        logits = tf.matmul(tf.reshape(tf.cast(image, tf.float32), [-1, 64]), weights) + bias
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        )

    def my_train_op(image: Any, label: Any) -> Any:
        return v1.train.AdamOptimizer(1e-2).minimize(
            my_model_loss(image, label), global_step=v1.train.get_or_create_global_step()
        )

    def my_queue_batch(path: str) -> tuple[Any, Any]:
        """A reader's own queue pipeline: shuffle_batch over the digits in ``path``."""
        filenames = v1.train.string_input_producer([path])
        _, serialized = v1.TFRecordReader().read(filenames)
        features = tf.io.parse_single_example(
            serialized,
            {
                "image": tf.io.FixedLenFeature([64], tf.float32),
                "label": tf.io.FixedLenFeature([], tf.int64),
            },
        )
        return v1.train.shuffle_batch(
            [features["image"], features["label"]], 64, capacity=1000, min_after_dequeue=500
        )

    def build_model() -> Any:
        return keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )

    class MyHook(tfr_hooks.Hook):
        """Counts the epochs it saw."""

        def begin(self) -> None:
            self.epochs = 0

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            self.epochs += 1

    names: dict[str, Any] = {
        "my_model_loss": my_model_loss,
        "my_train_op": my_train_op,
        "my_queue_batch": my_queue_batch,
        "build_model": build_model,
        "MyHook": MyHook,
        "num_workers": 1,
    }
    if Path(document).name in CONFIGURES_TENSORFLOW:
        return names
    model = build_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(0)
    val_ds = tfrecord.dataset("data/validation", 100, as_tuple=("image", "label"))
    return {
        **names,
        "my_hook": MyHook(),
        "model": model,
        "callbacks": [keras.callbacks.EarlyStopping(monitor="val_loss", patience=3)],
        "val_ds": val_ds,
        "val": val_ds,
        "images": rng.integers(0, 256, size=(512, 28, 28), dtype=np.uint8),
        "labels": rng.integers(0, 10, size=512).astype(np.int64),
    }


def main(document: str, workdir: str) -> int:
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    write_data(jpegs=Path(document).name not in CONFIGURES_TENSORFLOW)
    if Path(document).name in TFDS_DOCUMENTS:  # directories TFDS itself prepares
        from _tfds_builders import prepare

        for name in ("digits_png", "episodes"):
            prepare(name, "tensorflow_datasets")
    parsed = SYBIL.parse(Path(document))
    parsed.namespace.update(scaffold(document))
    ran: list[int] = []
    skipped: list[tuple[int, str]] = []
    for example in parsed:
        if isinstance(example.region.evaluator, Skipper):
            if example.parsed[1] is None:  # Sybil would skip without a word
                print(f"{document}:{example.line}: give the skip a reason", file=sys.stderr)
                return 1
            example.evaluate()  # a skip directive: it arms the skip of the next block
            continue
        try:
            example.evaluate()
        except unittest.SkipTest as skip:
            skipped.append((example.line, str(skip)))
            continue
        except Exception:
            print(f"FAILED {document}, block at line {example.line}:", file=sys.stderr)
            print(example.parsed, file=sys.stderr)
            traceback.print_exc()
            return 1
        ran.append(example.line)
    print("RESULT " + json.dumps({"ran": ran, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
