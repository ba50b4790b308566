"""The TensorFlow Datasets rows of ``--suite real``: the JPEG image set as a TFDS directory.

The image set of :mod:`bench_real_data` (64x64x3 JPEGs and labels) is prepared once by
TensorFlow Datasets' own ``download_and_prepare`` (a ``GeneratorBasedBuilder`` that
yields the very JPEG bytes, so no image is encoded again) into
``<data_dir>/tfds-images-<n>-seed<s>/bench_images/1.0.0``. Its pipelines, endless,
batches ``(image, label)``:

* ``tfds_hand``: ``tfds.builder_from_directory(dir).as_dataset(split="train",
  as_supervised=True)`` (TFDS decodes each example), shuffled, batched, prefetched: what
  a TFDS user writes, with TFDS's auto-cache off (TFDS caches a data set under 250 MiB
  held in one shard by itself: that is the ``tfds_cached`` row);
* ``tfds_cached``: the same with ``.cache()`` after TFDS's decode (filled by a full pass
  before the warm-up epoch);
* ``tfds_stream``: ``tfrecord.dataset(dir, split="train", as_tuple=True)``, streamed;
* ``tfds_memory``: the same with ``in_memory=True`` (decoded once, batches gathered).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bench_workloads as w
import tensorflow as tf

from tfr_hooks import tfrecord

__all__ = ["SOURCES", "pipeline", "tfds_image_dir"]

#: The pipelines of this module (see the module docstring).
SOURCES = ("tfds_hand", "tfds_cached", "tfds_stream", "tfds_memory")


class _Images:
    """The builder class, made on first use (TFDS registers a builder's name when defined)."""

    builder: Any = None


def _builder_class() -> Any:
    import tensorflow_datasets as tfds
    from bench_real_data import IMAGE_SIDE

    if _Images.builder is not None:
        return _Images.builder
    side = IMAGE_SIDE

    class BenchImages(tfds.core.GeneratorBasedBuilder):
        """The image set's JPEG bytes and labels (``FILES``), as one ``train`` split."""

        VERSION = tfds.core.Version("1.0.0")
        FILES: tuple[str, ...] = ()

        def _info(self) -> tfds.core.DatasetInfo:
            features = tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(side, side, 3), encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            )
            return tfds.core.DatasetInfo(
                builder=self, features=features, supervised_keys=("image", "label")
            )

        def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
            return {"train": self._generate_examples()}

        def _generate_examples(self) -> Any:
            features = {
                "image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            }
            for i, record in enumerate(tf.data.TFRecordDataset(list(self.FILES))):
                parsed = tf.io.parse_single_example(record, features)
                label = int(parsed["image/class/label"])
                yield i, {"image": parsed["image/encoded"].numpy(), "label": label}

    _Images.builder = BenchImages
    return BenchImages


def tfds_image_dir(spec: w.Spec, files: list[str]) -> str:
    """The TFDS version directory of the image set's JPEGs, prepared once by TFDS."""
    examples = int(spec.real["img"]) if spec.real else 0
    data_dir = Path(spec.data_dir, f"tfds-images-{examples}-seed{spec.seed}")
    version_dir = data_dir / "bench_images" / "1.0.0"
    if not (version_dir / "dataset_info.json").exists():
        builder_class = _builder_class()
        builder_class.FILES = tuple(files)
        builder_class(data_dir=str(data_dir)).download_and_prepare()
    return str(version_dir)


def pipeline(spec: w.Spec, source: str, files: list[str], shuffle: int) -> Any:
    """The pipeline called ``source`` (one of :data:`SOURCES`), endless."""
    directory = tfds_image_dir(spec, files)
    autotune = tf.data.AUTOTUNE
    if source in ("tfds_hand", "tfds_cached"):
        import tensorflow_datasets as tfds

        builder = tfds.builder_from_directory(directory)
        # TFDS caches a data set under 250 MiB in one shard by itself: off, so that the
        # uncached row decodes every epoch and the cached one caches once
        config = tfds.ReadConfig(try_autocache=False)
        data = builder.as_dataset(
            split="train", shuffle_files=True, as_supervised=True, read_config=config
        )
        if source == "tfds_cached":
            data = data.cache()
            data.reduce(0, lambda n, _: n + 1)  # fill the cache (one pass, not timed)
        data = data.shuffle(shuffle, seed=spec.seed).repeat()
        return data.batch(spec.batch_size, drop_remainder=True).prefetch(autotune)
    if source not in SOURCES:
        raise ValueError(f"Expected a pipeline of {SOURCES}. Received: source={source!r}")
    memory = source == "tfds_memory"
    return tfrecord.dataset(
        directory,
        spec.batch_size,
        split="train",
        as_tuple=True,
        seed=spec.seed,
        num_epochs=None,
        drop_remainder=True,
        in_memory=memory,
        shuffle="global" if memory else shuffle,
    )
