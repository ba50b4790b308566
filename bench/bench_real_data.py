"""The real-world-shaped data sets of ``--suite real``: JPEG images and token sequences.

Both are generated at run time (seeded, no network) and written with a plain
``tf.io.TFRecordWriter`` in the layouts their producers use, not with the package's
writer, so the rows read files the package did not write (no ``schema.json``):

* **images**: 64x64 RGB JPEGs (quality 90) of 10 classes. Each class is a colour
  gradient at its own angle plus three blurred coloured blobs; an example is its class's
  picture shifted by up to 6 pixels, with a random brightness and mild pixel noise
  (compressible, as photos are, unlike pure noise). Features ``image/encoded`` (the JPEG
  bytes), ``image/class/label`` (int64) and ``image/object/bbox/label`` (0 to 5 int64
  values), the layout of TensorFlow's image-classification and detection pipelines.
  Encoded by ``tf.io.encode_jpeg`` in a parallel ``tf.data`` map.
* **text**: token-id sequences whose lengths follow a long tail as real text does
  (lognormal, median 48, clipped to 5..500), ids in 1..9,999 (0 is padding) drawn from
  a Zipf-like distribution, a quarter of them from a per-class set of words, and a
  binary ``label``. Features ``tokens`` (int64 list) and ``label`` (int64).

Each data set lives in its own directory of the benchmark's data directory, named by
its parameters (``images-<n>-seed<s>-v1``); a directory whose ``info.json`` exists is
reused, so reruns do not regenerate it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "IMAGE_SIDE",
    "IMAGE_CLASSES",
    "VOCAB",
    "TEXT_CLASSES",
    "MAX_LEN",
    "image_dir",
    "text_dir",
    "write_images",
    "write_text",
    "write_real",
    "make_text",
]

IMAGE_SIDE = 64
IMAGE_CLASSES = 10
SHIFT = 6
VOCAB = 10_000
TEXT_CLASSES = 2
MIN_LEN, MAX_LEN = 5, 500
SHARDS = 4
VERSION = "v1"


def image_dir(root: str | os.PathLike[str], examples: int, seed: int) -> Path:
    """The directory of the image data set with these parameters."""
    return Path(root) / f"images-{examples}-seed{seed}-{VERSION}"


def text_dir(root: str | os.PathLike[str], examples: int, seed: int) -> Path:
    """The directory of the text data set with these parameters."""
    return Path(root) / f"text-{examples}-seed{seed}-{VERSION}"


def _image_prototypes(rng: np.random.Generator) -> np.ndarray:
    """Ten float RGB pictures in [0, 1]: a gradient at a class angle, three blobs."""
    yy, xx = np.mgrid[0:IMAGE_SIDE, 0:IMAGE_SIDE].astype(np.float32) / IMAGE_SIDE
    protos = np.zeros((IMAGE_CLASSES, IMAGE_SIDE, IMAGE_SIDE, 3), np.float32)
    for c in range(IMAGE_CLASSES):
        angle = np.pi * c / IMAGE_CLASSES
        ramp = np.cos(angle) * xx + np.sin(angle) * yy
        base = rng.uniform(0.1, 0.5, size=3)
        protos[c] = base * (0.5 + 0.5 * ramp[..., None])
        for _ in range(3):
            cy, cx = rng.uniform(0.2, 0.8, size=2)
            radius = rng.uniform(0.06, 0.16)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
            protos[c] += blob[..., None] * rng.uniform(0.2, 0.8, size=3)
        protos[c] /= protos[c].max()
    return protos


def _image_chunks(examples: int, seed: int, chunk: int = 1024) -> Any:
    """Yield ``(uint8 [n, 64, 64, 3], labels, bbox label lists)`` chunks of the data set."""
    rng = np.random.default_rng(seed)
    protos = _image_prototypes(rng)
    shifts = [(dy, dx) for dy in range(-SHIFT, SHIFT + 1, 2) for dx in range(-SHIFT, SHIFT + 1, 2)]
    variants = np.stack([np.roll(protos, s, axis=(1, 2)) for s in shifts], axis=1)
    for start in range(0, examples, chunk):
        n = min(chunk, examples - start)
        labels = rng.integers(0, IMAGE_CLASSES, size=n)
        which = rng.integers(0, len(shifts), size=n)
        gain = rng.uniform(0.6, 1.0, size=(n, 1, 1, 1)).astype(np.float32) * 255.0
        images = variants[labels, which] * gain
        images += rng.normal(0.0, 6.0, size=images.shape).astype(np.float32)
        counts = rng.integers(0, 6, size=n)
        boxes = [rng.integers(0, IMAGE_CLASSES, size=k) for k in counts]
        yield np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64), boxes


def _int64(values: Any) -> Any:
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _writers(directory: Path, name: str) -> list[Any]:
    import tensorflow as tf

    return [
        tf.io.TFRecordWriter(str(directory / f"{name}-{i:05d}-of-{SHARDS:05d}.tfrecord"))
        for i in range(SHARDS)
    ]


def _finish(directory: Path, info: dict[str, Any]) -> dict[str, Any]:
    files = sorted(str(p) for p in directory.glob("*.tfrecord"))
    info.update(files=files, bytes=sum(os.path.getsize(f) for f in files))
    info["directory"] = str(directory)
    (directory / "info.json").write_text(json.dumps(info))
    return info


def _cached(directory: Path) -> dict[str, Any] | None:
    path = directory / "info.json"
    if not path.exists():
        return None
    return {**json.loads(path.read_text()), "reused": True}


def write_images(root: str | os.PathLike[str], examples: int, seed: int = 0) -> dict[str, Any]:
    """Write (or reuse) the JPEG data set; returns its ``info.json`` contents."""
    directory = image_dir(root, examples, seed)
    found = _cached(directory)
    if found is not None:
        return found
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    writers = _writers(directory, "images")
    index = 0
    for images, labels, boxes in _image_chunks(examples, seed + 1):
        encoded = (
            tf.data.Dataset.from_tensor_slices(images)
            .map(lambda x: tf.io.encode_jpeg(x, quality=90), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(len(images))
            .get_single_element()
            .numpy()
        )
        for jpeg, label, box in zip(encoded, labels, boxes, strict=True):
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                "image/class/label": _int64([int(label)]),
                "image/object/bbox/label": _int64(box.tolist()),
            }
            record = tf.train.Example(features=tf.train.Features(feature=feature))
            writers[index % SHARDS].write(record.SerializeToString())
            index += 1
    for writer in writers:
        writer.close()
    info = {"kind": "images", "examples": examples, "seed": seed, "side": IMAGE_SIDE}
    info["write_seconds"] = time.perf_counter() - start
    return _finish(directory, info)


def make_text(examples: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """``(token id arrays, labels)``: lengths lognormal (median 48) clipped to 5..500."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(48.0), 0.8, size=examples), MIN_LEN, MAX_LEN)
    lengths = lengths.astype(np.int64)
    labels = rng.integers(0, TEXT_CLASSES, size=examples).astype(np.int64)
    # Zipf-like background words, and a per-class set of 200 words a quarter of the time
    background = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), VOCAB - 1)
    marked = rng.random(size=background.shape) < 0.25
    topical = rng.integers(0, 200, size=background.shape) + 1000
    owner = np.repeat(labels, lengths)
    flat = np.where(marked, topical + 200 * owner, background).astype(np.int64)
    tokens = np.split(flat, np.cumsum(lengths)[:-1])
    return tokens, labels


def write_text(root: str | os.PathLike[str], examples: int, seed: int = 0) -> dict[str, Any]:
    """Write (or reuse) the token data set; returns its ``info.json`` contents."""
    directory = text_dir(root, examples, seed)
    found = _cached(directory)
    if found is not None:
        return found
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tokens, labels = make_text(examples, seed + 2)
    writers = _writers(directory, "text")
    for i, (ids, label) in enumerate(zip(tokens, labels, strict=True)):
        feature = {"tokens": _int64(ids.tolist()), "label": _int64([int(label)])}
        record = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[i % SHARDS].write(record.SerializeToString())
    for writer in writers:
        writer.close()
    lengths = np.array([len(t) for t in tokens])
    info = {
        "kind": "text",
        "examples": examples,
        "seed": seed,
        "vocab": VOCAB,
        "mean_length": float(lengths.mean()),
        "median_length": float(np.median(lengths)),
        "max_length": int(lengths.max()),
        "write_seconds": time.perf_counter() - start,
    }
    return _finish(directory, info)


def write_real(
    root: str | os.PathLike[str], images: int, texts: int, seed: int = 0
) -> dict[str, Any]:
    """Both data sets (written or reused): ``{"images": info, "text": info}``."""
    return {"images": write_images(root, images, seed), "text": write_text(root, texts, seed)}
