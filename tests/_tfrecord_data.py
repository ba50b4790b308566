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


# --- SequenceExample files from a plain writer (issue 26) ------------------------------


def sequence_values(index: int, frames: int, *, audio: bool = True, rgb: bool = True) -> dict:
    """The values of one SequenceExample record, as written.

    Context ``id`` (one int64) and ``labels`` (``index % 5`` int64 values); feature lists
    ``rgb`` (per frame 8 uint8 values stored as one bytes value, YouTube-8M's quantized
    layout) and ``audio`` (per frame 4 floats), each ``None`` when left out.
    """
    rng = np.random.default_rng(index)
    return {
        "id": index,
        "labels": rng.integers(0, 1000, index % 5).tolist(),
        "rgb": rng.integers(0, 256, (frames, 8)).astype(np.uint8) if rgb else None,
        "audio": rng.normal(size=(frames, 4)).astype(np.float32) if audio else None,
    }


def serialize_sequence(values: dict) -> bytes:
    """One ``tf.train.SequenceExample`` of :func:`sequence_values`, serialized."""
    sequence = tf.train.SequenceExample()
    context = sequence.context.feature
    context["id"].int64_list.value.append(values["id"])
    context["labels"].int64_list.value.extend(values["labels"])
    lists = sequence.feature_lists.feature_list
    if values["rgb"] is not None:
        rgb = lists["rgb"]  # created even with 0 frames: an empty feature list
        for frame in values["rgb"]:
            rgb.feature.add().bytes_list.value.append(frame.tobytes())
    if values["audio"] is not None:
        audio = lists["audio"]
        for frame in values["audio"]:
            audio.feature.add().float_list.value.extend(frame.tolist())
    return sequence.SerializeToString()


def sequence_frames(index: int) -> int:
    """Frames of record ``index``: 5 to 40."""
    return 5 + (index * 7) % 36


def write_sequences(
    path: str | os.PathLike[str], values: Sequence[dict], compression: str = ""
) -> str:
    """Write :func:`sequence_values` records with a plain ``tf.io.TFRecordWriter``."""
    return write_records(path, [serialize_sequence(v) for v in values], compression)
