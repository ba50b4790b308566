"""Tiny TensorFlow Datasets builders, prepared offline by TFDS itself for the TFDS tests.

Each builder writes a real ``<data_dir>/<name>/<version>/`` directory with TFDS's own
``download_and_prepare()`` (no download: the examples come from ``_generate_examples``),
so the tests read files someone else wrote. The values are small and deterministic, and
:data:`EXPECTED` holds what each split must read back (sums, counts, shapes).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import tensorflow_datasets as tfds

__all__ = [
    "BUILDERS",
    "DigitsPng",
    "PhotosJpeg",
    "Detection",
    "Tokens",
    "Episodes",
    "Nested",
    "Extras",
    "prepare",
    "image",
]

_CLASSES = ["zero", "one", "two"]


def image(i: int, shape: tuple[int, int, int]) -> np.ndarray:
    """The ``i``-th test image: a smooth uint8 pattern (JPEG keeps it nearly exact)."""
    h, w, c = shape
    base = (np.arange(h)[:, None, None] * 8 + np.arange(w)[None, :, None] * 4) % 200
    return (base + np.zeros((1, 1, c), np.int64) + 10 * i).astype(np.uint8)


class _Builder(tfds.core.GeneratorBasedBuilder):
    """A builder whose splits are generated in memory: ``splits`` maps split -> size."""

    VERSION = tfds.core.Version("1.0.0")
    splits: ClassVar[dict[str, int]] = {"train": 5, "test": 3}

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        del dl_manager
        return {name: self._generate_examples(name, n) for name, n in self.splits.items()}

    def _generate_examples(self, split: str, n: int) -> Any:
        offset = 0 if split == "train" else 100
        for i in range(n):
            yield i, self.example(i + offset)

    def example(self, i: int) -> dict[str, Any]:
        raise NotImplementedError


class DigitsPng(_Builder):
    """PNG images 6x5x1 with a named ClassLabel (supervised keys image, label)."""

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(6, 5, 1), encoding_format="png"),
                "label": tfds.features.ClassLabel(names=_CLASSES),
            }
        )
        return tfds.core.DatasetInfo(
            builder=self, features=features, supervised_keys=("image", "label")
        )

    def example(self, i: int) -> dict[str, Any]:
        return {"image": image(i % 50, (6, 5, 1)), "label": i % 3}


class PhotosJpeg(_Builder):
    """JPEG images 8x8x3, a float Tensor, a Text and an unnamed ClassLabel."""

    splits: ClassVar[dict[str, int]] = {"train": 4}

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "photo": tfds.features.Image(shape=(8, 8, 3), encoding_format="jpeg"),
                "kind": tfds.features.ClassLabel(num_classes=4),
                "weights": tfds.features.Tensor(shape=(2, 3), dtype=np.float32),
                "caption": tfds.features.Text(),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        return {
            "photo": image(i, (8, 8, 3)),
            "kind": i % 4,
            "weights": np.full((2, 3), i, np.float32),
            "caption": f"photo {i}",
        }


class Detection(_Builder):
    """An image and an ``objects`` Sequence of boxes and labels (i % 3 objects)."""

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=(4, 4, 3)),
                "objects": tfds.features.Sequence(
                    {
                        "bbox": tfds.features.BBoxFeature(),
                        "label": tfds.features.ClassLabel(names=["cat", "dog"]),
                    }
                ),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        n = i % 3
        boxes = [tfds.features.BBox(0.1 * k, 0.1, 0.1 * k + 0.5, 0.6) for k in range(n)]
        return {
            "image": image(i % 50, (4, 4, 3)),
            "objects": {"bbox": boxes, "label": [k % 2 for k in range(n)]},
        }


class Tokens(_Builder):
    """Variable-length int64 tokens (a Sequence of scalars) and a fixed-length pair."""

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "tokens": tfds.features.Sequence(np.int64),
                "pair": tfds.features.Tensor(shape=(2,), dtype=np.int32),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        return {"tokens": list(range(i % 4 + 1)), "pair": np.array([i, -i], np.int32)}


class Episodes(_Builder):
    """RLDS-style episodes: ``steps``, a Dataset of an image, a vector and scalars."""

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "steps": tfds.features.Dataset(
                    {
                        "observation": {
                            "image": tfds.features.Image(shape=(4, 3, 3)),
                            "state": tfds.features.Tensor(shape=(2,), dtype=np.float32),
                        },
                        "action": tfds.features.Tensor(shape=(7,), dtype=np.float32),
                        "reward": np.float32,
                        "is_last": np.bool_,
                    }
                ),
                "episode_id": np.int64,
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        n = i % 3 + 1
        steps = [
            {
                "observation": {
                    "image": image(i + t, (4, 3, 3)),
                    "state": np.array([t, i], np.float32),
                },
                "action": np.full((7,), t, np.float32),
                "reward": np.float32(t),
                "is_last": t == n - 1,
            }
            for t in range(n)
        ]
        return {"steps": steps, "episode_id": i}


class Nested(_Builder):
    """A sequence of sequences of int64 (``paragraphs``: sentences of word ids)."""

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {"paragraphs": tfds.features.Sequence(tfds.features.Sequence(np.int64))}
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        return {"paragraphs": [list(range(k + 1)) for k in range(i % 3)]}


class Extras(_Builder):
    """An image of unknown size (kept encoded) and tensors TFDS stores as (zlib) bytes."""

    splits: ClassVar[dict[str, int]] = {"train": 3}

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(
            {
                "snapshot": tfds.features.Image(shape=(None, None, 3)),
                "heatmap": tfds.features.Tensor(shape=(2, 2), dtype=np.float32, encoding="zlib"),
                "mask": tfds.features.Tensor(shape=(3,), dtype=np.uint8, encoding="bytes"),
            }
        )
        return tfds.core.DatasetInfo(builder=self, features=features)

    def example(self, i: int) -> dict[str, Any]:
        return {
            "snapshot": image(i, (2 + i, 3, 3)),
            "heatmap": np.full((2, 2), i / 4, np.float32),
            "mask": np.array([i, 1, 2], np.uint8),
        }


BUILDERS: dict[str, type[_Builder]] = {
    "digits_png": DigitsPng,
    "photos_jpeg": PhotosJpeg,
    "detection": Detection,
    "tokens": Tokens,
    "episodes": Episodes,
    "nested": Nested,
    "extras": Extras,
}


def prepare(name: str, data_dir: str | os.PathLike[str], file_format: str = "tfrecord") -> str:
    """Prepare builder ``name`` under ``data_dir`` in ``file_format``; its version directory.

    ``file_format="array_record"`` writes ArrayRecord shards, as TFDS does for the data
    sets ``tfds.data_source`` reads.
    """
    builder = BUILDERS[name](data_dir=os.fspath(data_dir), file_format=file_format)
    builder.download_and_prepare()
    return os.fspath(builder.data_dir)
