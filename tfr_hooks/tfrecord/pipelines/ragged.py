"""Variable-length features: held as flat values with row offsets, padded, bucketed.

A feature whose length varies between examples (token ids, the box labels of
``image/object/bbox/label``) is read as a ``tf.RaggedTensor`` of shape ``[batch, None]``
on every pipeline; so is a feature list of a ``tf.train.SequenceExample``, whose length
is its number of frames (``[batch, None, *frame shape]``: padding and buckets act on
frames). Three choices shape those batches, with the same arguments in
:func:`~tfr_hooks.tfrecord.dataset` and :func:`~tfr_hooks.tfrecord.read_batches`:

* ``pad_to``: ``None`` keeps ragged tensors; ``"longest"`` pads each batch to its longest
  row (what ``padded_batch`` does); an integer ``L`` pads every row to ``L`` values,
  cutting longer rows (a fixed shape, e.g. a model's maximum sequence length); a dict
  chooses per feature. ``padding_values`` gives the value (0, ``b""`` or ``False`` by
  default; a scalar or a dict per feature).
* ``bucket_boundaries``: examples are batched with others of about the same length, so
  padding to the batch's longest wastes far less. In memory, as
  ``tf.data.Dataset.bucket_by_sequence_length`` does: bucket ``i`` holds the lengths
  ``boundaries[i-1] <= length < boundaries[i]`` (the first from 0, the last without an
  upper end) and each batch comes from one bucket. Streamed and packed, each batch comes
  from one pool of ``bucket_pool`` batches sorted by length (see
  :mod:`tfr_hooks.tfrecord.pipelines.pools`). ``bucket_by`` names the feature whose length decides
  (by default the only feature of varying length).

In memory, such a feature is held as a :class:`RaggedArray`: one flat array of all the
values and the row offsets (``row_splits``), so a batch is one gather, whatever the
lengths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.checks import expected

__all__ = [
    "RaggedArray",
    "Shaping",
    "check_shaping",
    "pad_batch",
    "bucket_of",
    "batch_examples",
    "is_list",
    "bucket_key",
]

PadTo = str | int | Mapping[str, str | int | None] | None


@dataclass
class RaggedArray:
    """A feature of varying length in memory, as values and row offsets.

    Example ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``. A feature list of a
    SequenceExample is held the same way, one row per frame. A value ragged in more
    levels (a feature list whose frames vary in length, a TensorFlow Datasets sequence of
    sequences) keeps the offsets of each inner level in ``inner_splits``, as
    ``tf.RaggedTensor.from_nested_row_splits`` takes them.

    Attributes:
        values: All the examples' values, one after the other: 1-D, or
            ``[total frames, *frame shape]`` for a feature list.
        row_splits: ``int64`` offsets, one more than there are examples, from 0.
        inner_splits: The ``int64`` offsets of each inner ragged level, outermost first
            (none for one level).
    """

    values: np.ndarray
    row_splits: np.ndarray
    inner_splits: tuple[np.ndarray, ...] = ()

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    @property
    def nbytes(self) -> int:
        """Bytes held (the values and the offsets)."""
        size = self.values.nbytes
        if self.values.dtype.kind == "O":
            size += sum(len(v) for v in self.values.ravel().tolist())
        size += sum(splits.nbytes for splits in self.inner_splits)
        return int(size + self.row_splits.nbytes)

    @property
    def lengths(self) -> np.ndarray:
        """Each example's number of values (of frames, for a feature list)."""
        return np.diff(self.row_splits)

    @classmethod
    def join(cls, parts: Sequence[tuple[np.ndarray, ...]]) -> RaggedArray:
        """One array from ``(values, row_splits, *inner_splits)`` parts, in order."""
        if not parts:
            return cls(np.zeros([0]), np.zeros([1], np.int64))
        values = np.concatenate([p[0] for p in parts])
        levels = []
        for level in range(1, len(parts[0])):
            lengths = np.concatenate([np.diff(p[level]) for p in parts])
            splits = np.zeros([len(lengths) + 1], np.int64)
            np.cumsum(lengths, out=splits[1:])
            levels.append(splits)
        return cls(values, levels[0], tuple(levels[1:]))

    @classmethod
    def parts_of(cls, value: Any) -> tuple[np.ndarray, ...]:
        """``(flat values, row_splits, *inner_splits)`` of a fetched ragged value."""
        splits = [np.asarray(value.row_splits)]
        inner = value.values
        while isinstance(inner, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
            splits.append(np.asarray(inner.row_splits))
            inner = inner.values
        return (np.asarray(inner), *splits)


@dataclass(frozen=True)
class Shaping:
    """How batches of variable-length features are shaped (see the module docstring)."""

    pad_to: PadTo = None
    padding_values: Any = None
    bucket_boundaries: tuple[int, ...] | None = None
    bucket_by: str | None = None

    @property
    def pads(self) -> bool:
        """Whether any feature is padded."""
        return self.pad_to is not None

    def length_of(self, name: str) -> str | int | None:
        """``"longest"``, a fixed length, or ``None`` (ragged) for feature ``name``."""
        if isinstance(self.pad_to, Mapping):
            return self.pad_to.get(name)
        return self.pad_to

    def padding_for(self, name: str, dtype: tf.DType) -> Any:
        """The value padding adds to feature ``name`` of ``dtype``."""
        value = self.padding_values
        if isinstance(value, Mapping):
            value = value.get(name)
        if value is None:
            if dtype == tf.string:
                return b""
            return False if dtype == tf.bool else 0
        return value


def _check_length(value: object, name: str) -> None:
    if value is None or value == "longest":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(expected(name, "None, 'longest' or a positive integer", value))


def check_shaping(
    pad_to: object,
    padding_values: object,
    bucket_boundaries: object,
    bucket_by: object,
) -> Shaping:
    """Check the shaping arguments of a reader and return them as a :class:`Shaping`.

    Raises:
        TypeError, ValueError: For an argument of the wrong type or value.
    """
    if isinstance(pad_to, Mapping):
        for key, value in pad_to.items():
            if not isinstance(key, str):
                raise TypeError(expected("pad_to", "a dict of feature name -> length", pad_to))
            _check_length(value, f"pad_to[{key!r}]")
        pad_to = dict(pad_to)
    else:
        _check_length(pad_to, "pad_to")
    if padding_values is not None and not isinstance(
        padding_values, (Mapping, int, float, bool, str, bytes)
    ):
        raise TypeError(
            expected(
                "padding_values",
                "None, a scalar or a dict of feature name -> scalar",
                padding_values,
            )
        )
    boundaries: tuple[int, ...] | None = None
    if bucket_boundaries is not None:
        if (
            isinstance(bucket_boundaries, (str, bytes))
            or not isinstance(bucket_boundaries, Sequence)
            or not bucket_boundaries
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in bucket_boundaries)
            or any(b < 1 for b in bucket_boundaries)
            or list(bucket_boundaries) != sorted(set(bucket_boundaries))
        ):
            raise ValueError(
                expected(
                    "bucket_boundaries",
                    "None or increasing positive integers such as [16, 32, 64]",
                    bucket_boundaries,
                )
            )
        boundaries = tuple(bucket_boundaries)
    if bucket_by is not None:
        if not isinstance(bucket_by, str):
            raise TypeError(expected("bucket_by", "None or a feature name", bucket_by))
        if boundaries is None:
            raise ValueError(expected("bucket_by", "None without `bucket_boundaries`", bucket_by))
    return Shaping(pad_to, padding_values, boundaries, bucket_by)  # type: ignore[arg-type]


def is_list(spec: Any) -> bool:
    """Whether an element spec is one example's list of varying length.

    A list of values (``[None]``) or of frames of one shape (``[None, 8]``: one
    example's feature list): its first dimension is unknown, the others are known.
    """
    if isinstance(spec, tf.RaggedTensorSpec):
        return spec.shape.rank == 1 or (spec.ragged_rank == 0 and _of_frames(spec.shape))
    return isinstance(spec, tf.TensorSpec) and _of_frames(spec.shape)


def _of_frames(shape: tf.TensorShape) -> bool:
    """Whether ``shape`` is ``[None, *known]``: rows (frames) of one known shape."""
    return (
        shape.rank is not None
        and shape.rank >= 1
        and shape[0] is None
        and shape[1:].is_fully_defined()
    )


def bucket_key(shaping: Shaping, spec: Mapping[str, Any]) -> str:
    """The feature whose length picks the bucket: ``bucket_by``, else the only list.

    ``spec`` maps names to one example's specs (lists of varying length are
    ``TensorSpec``s of unknown first dimension: ``[None]``, or ``[None, 8]`` for the frames
    of a feature list) or to batch specs (``RaggedTensorSpec``).
    """
    varying = [name for name, s in spec.items() if is_list(s) or isinstance(s, tf.RaggedTensorSpec)]
    if shaping.bucket_by is not None:
        if shaping.bucket_by not in spec:
            raise ValueError(
                expected("bucket_by", f"one of the features {sorted(spec)}", shaping.bucket_by)
            )
        return shaping.bucket_by
    if len(varying) != 1:
        raise ValueError(
            expected(
                "bucket_by",
                "the feature whose length picks the bucket, as "
                + (
                    f"several features vary in length: {varying}"
                    if varying
                    else "no feature varies in length"
                ),
                None,
            )
        )
    return varying[0]


def bucket_of(lengths: np.ndarray, boundaries: Sequence[int]) -> np.ndarray:
    """The bucket of each length: ``i`` where ``boundaries[i-1] <= length < boundaries[i]``."""
    return np.searchsorted(np.asarray(boundaries), lengths, side="right").astype(np.int64)


def _pad(value: Any, length: str | int, padding: Any) -> Any:
    if not isinstance(value, tf.RaggedTensor):
        return value
    if length == "longest":
        return value.to_tensor(default_value=padding)
    # a feature list pads (or cuts) its frames, each of the frame's shape
    return value.to_tensor(default_value=padding, shape=[None, length, *value.shape[2:]])


def pad_batch(batch: Any, shaping: Shaping) -> Any:
    """A batch (dict of tensors) with its ragged features padded as ``shaping`` says."""
    if not shaping.pads or not isinstance(batch, dict):
        return batch
    out = dict(batch)
    for name, value in batch.items():
        length = shaping.length_of(name)
        if length is not None and isinstance(value, tf.RaggedTensor):
            padding = tf.constant(shaping.padding_for(name, value.dtype), value.dtype)
            out[name] = _pad(value, length, padding)
    return out


def batch_examples(data: tf.data.Dataset, batch_size: int, drop_remainder: bool) -> tf.data.Dataset:
    """Batch one-example elements; lists of varying length become ragged rows.

    Other components are batched densely, as ``Dataset.batch`` would (one that
    ``ragged_batch`` made ragged only for an unknown static shape is made dense again).
    """
    spec = data.element_spec
    flat = tf.nest.flatten(spec)
    if not any(is_list(s) for s in flat):
        return data.batch(batch_size, drop_remainder=drop_remainder)
    keep = tf.nest.map_structure(is_list, spec)
    batched = data.ragged_batch(batch_size, drop_remainder=drop_remainder)

    def densify(*values: Any) -> Any:
        structure = tf.nest.pack_sequence_as(spec, list(values))
        return tf.nest.map_structure(
            lambda v, k: v.to_tensor() if isinstance(v, tf.RaggedTensor) and not k else v,
            structure,
            keep,
        )

    return batched.map(lambda *v: densify(*tf.nest.flatten(v)))
