"""The benchmark's data set: seeded, synthetic "digits-like" 28x28 uint8 images.

Ten class prototypes are drawn as a few thick, blurred strokes on a 28x28 canvas; each
example is its class's prototype shifted by up to two pixels, with a random contrast
and Gaussian pixel noise. A model can learn it (the classes differ in shape, not in a
single pixel) and it is the size and type of MNIST: 784 uint8 values and an int64 label.
The arrays are written with the package's own writer (``tfr_hooks.tfrecord.write``) in
4 shards; the write is timed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SIDE",
    "PIXELS",
    "CLASSES",
    "PACKED_PER_RECORD",
    "make_arrays",
    "write_dataset",
    "load_arrays",
]

SIDE = 28
PIXELS = SIDE * SIDE
CLASSES = 10
SHIFT = 2
#: Examples per record of the packed copy of the data set (``directory/packed``).
PACKED_PER_RECORD = 128


def _prototypes(rng: np.random.Generator) -> np.ndarray:
    """Ten float images in [0, 1]: each a few random thick strokes, blurred."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    protos = np.zeros((CLASSES, SIDE, SIDE), np.float32)
    for c in range(CLASSES):
        for _ in range(3):
            (y0, x0), (y1, x1) = rng.uniform(6, SIDE - 6, size=(2, 2))
            for t in np.linspace(0.0, 1.0, 24):
                cy, cx = y0 + t * (y1 - y0), x0 + t * (x1 - x0)
                protos[c] += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 3.0)
        protos[c] /= protos[c].max()
    return protos


def make_arrays(examples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(images, labels)``: ``uint8 [examples, 784]`` and ``int64 [examples]``."""
    rng = np.random.default_rng(seed)
    protos = _prototypes(rng)
    shifts = [(dy, dx) for dy in range(-SHIFT, SHIFT + 1) for dx in range(-SHIFT, SHIFT + 1)]
    variants = np.stack(
        [np.roll(protos, s, axis=(1, 2)) for s in shifts], axis=1
    )  # [class, shift, 28, 28]
    labels = rng.integers(0, CLASSES, size=examples)
    which = rng.integers(0, len(shifts), size=examples)
    contrast = rng.uniform(0.6, 1.0, size=(examples, 1)).astype(np.float32)
    images = variants[labels, which].reshape(examples, PIXELS) * contrast * 255.0
    images += rng.normal(0.0, 40.0, size=images.shape).astype(np.float32)
    return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64)


def write_dataset(
    directory: str | os.PathLike[str], examples: int, seed: int = 0
) -> dict[str, Any]:
    """Write the data set as 4 TFRecord shards with the package's writer; time the write.

    Also writes the same examples as packed shards (:data:`PACKED_PER_RECORD` a record)
    to ``directory/packed``, and saves the arrays to ``arrays.npz`` (for the in-memory
    ``feed_dict`` row and the model-alone ceiling, which must not pay for reading).

    Returns:
        ``{"examples", "shards", "write_seconds", "bytes", "directory"}``.
    """
    from tfr_hooks import tfrecord

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    images, labels = make_arrays(examples, seed)
    np.savez(directory / "arrays.npz", image=images, label=labels)
    shards = 4 if examples >= 4 else 1
    start = time.perf_counter()
    result = tfrecord.write(
        {"image": images, "label": labels}, directory / "records", shards=shards, overwrite=True
    )
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    tfrecord.write(
        {"image": images, "label": labels},
        directory / "packed",
        shards=shards,
        overwrite=True,
        examples_per_record=PACKED_PER_RECORD,
    )
    packed_seconds = time.perf_counter() - start
    info = {
        "examples": examples,
        "shards": shards,
        "write_seconds": seconds,
        "packed_write_seconds": packed_seconds,
        "bytes": sum(os.path.getsize(f) for f in result.files),
        "directory": str(directory / "records"),
    }
    (directory / "info.json").write_text(json.dumps(info))
    return info


def load_arrays(directory: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """The arrays saved next to the records by :func:`write_dataset`."""
    with np.load(Path(directory) / "arrays.npz") as data:
        return data["image"], data["label"]
