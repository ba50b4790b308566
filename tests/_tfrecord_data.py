"""Tiny TFRecord data and graph-mode helpers for the tfrecord and CLI tests."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

RUN_TIMEOUT_MS = 60_000  # a session.run that blocks longer than this fails the test
JOIN_TIMEOUT_S = 30


def int64_feature(values: Iterable[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values: Iterable[float]) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def bytes_feature(values: Iterable[bytes]) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def example(**features: tf.train.Feature) -> bytes:
    proto = tf.train.Example(features=tf.train.Features(feature=features))
    return proto.SerializeToString()


def write_records(
    path: str | os.PathLike[str], records: Sequence[bytes], compression: str = ""
) -> str:
    """Write serialized records with TensorFlow's own writer (not through tfr_hooks)."""
    with tf.io.TFRecordWriter(os.fspath(path), options=compression) as writer:
        for record in records:
            writer.write(record)
    return os.fspath(path)


def image_label_arrays(n: int, side: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 256, size=(n, side, side), dtype=np.uint8),
        "label": np.arange(n, dtype=np.int64),
    }


def raw_image_records(n: int, nbytes: int = 16, bad: dict[int, bytes] | None = None) -> list[bytes]:
    """Records of a raw uint8 'image' and an int64 'label'; ``bad`` replaces some records."""
    records = [
        example(image=bytes_feature([bytes([i % 256]) * nbytes]), label=int64_feature([i]))
        for i in range(n)
    ]
    for index, record in (bad or {}).items():
        records[index] = record
    return records


def run_graph_batches(
    session: tf.compat.v1.Session,
    tensors: Any,
    initializers: Sequence[Any] = (),
    max_steps: int = 10_000,
) -> list[Any]:
    """Run ``tensors`` until OutOfRangeError, with queue runners started and joined."""
    coord = tf.compat.v1.train.Coordinator()
    threads = tf.compat.v1.train.start_queue_runners(session, coord=coord)
    options = tf.compat.v1.RunOptions(timeout_in_ms=RUN_TIMEOUT_MS)
    results = []
    try:
        if initializers:
            session.run(list(initializers), options=options)
        for _ in range(max_steps):
            try:
                results.append(session.run(tensors, options=options))
            except tf.errors.OutOfRangeError:
                break
        else:
            raise AssertionError(f"no OutOfRangeError after {max_steps} steps")
    finally:
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=JOIN_TIMEOUT_S)
    return results


def new_session() -> tf.compat.v1.Session:
    session = tf.compat.v1.Session()
    session.run(
        [tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()]
    )
    return session
