"""The schema of TFRecord examples: each feature's name, dtype, shape and encoding.

A :class:`Schema` says how arrays were stored in ``tf.train.Example`` records and how to
turn a batch of serialized records back into tensors of the stored dtype and shape. The
writer saves it, with the shard list and compression, in a JSON sidecar
(``schema.json``, see :mod:`tfr_hooks.tfrecord.sidecar`) next to the shards, so readers
need no hand-written feature spec.

Encodings:

* ``"raw"``: the array's bytes (little-endian) in one ``bytes_list`` value per record.
  Used for every numeric array with at least one dimension (images, vectors): the
  fastest to write and parse, and the smallest for ``uint8`` images.
* ``"int64"``: an ``int64_list``, used for integer and boolean scalars.
* ``"float"``: a ``float_list``, used for ``float16``/``float32`` scalars, and for
  ``float16``/``float32`` values of any shape declared with a ``default``.
* ``"bytes"``: a ``bytes_list`` of strings or bytes.

A :class:`Feature` declared without an encoding gets the one :func:`~tfr_hooks.tfrecord.write`
would choose for its dtype and shape (``"auto"``), so ``Feature("label", "int64")`` reads
the usual ``int64_list`` of one value.

A feature with a ``default`` is optional: a record may hold no value for it (the key
absent, or an empty list, as TFX writes missing values), and the default is read in its
place, so the batch stays a dense tensor.

A shape may be ``(None,)`` for a feature whose length varies between records (found
when inferring the schema of files written by other tools, also for one that some
records lack); it is read as a ``tf.RaggedTensor``, with an empty row for a record that
holds no value, whichever record that is (as ``tf.io.RaggedFeature`` reads it).

A feature declared with ``sequence=True`` is a feature list of a
``tf.train.SequenceExample``: one value per frame (or token), of the feature's per-frame
dtype, shape and encoding (YouTube-8M's quantized ``rgb``: one ``bytes`` value of 1024
bytes per frame, ``Feature("rgb", "uint8", (1024,), sequence=True)``). A batch holds it
as a ``tf.RaggedTensor`` of shape ``[batch, (frames), *shape]``, ragged in its frames; a
record without the feature list holds 0 frames. The other features are the context.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import MissingFeatureError, SchemaMismatchError
from tfr_hooks.tfrecord.records import NEITHER, as_record_content, not_a_proto_error, where

__all__ = [
    "Feature",
    "Schema",
    "ENCODINGS",
    "AUTO",
]

#: The ways a feature can be stored in a ``tf.train.Example``.
ENCODINGS = ("raw", "int64", "float", "bytes")
#: The encoding of a :class:`Feature` declared without one: chosen as ``write`` does.
AUTO = "auto"

_NUMERIC = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
)
_STRINGS = ("string", "bytes")
_KIND_OF_ENCODING = {"raw": "bytes_list", "bytes": "bytes_list", "int64": "int64_list"}
_KIND_OF_ENCODING["float"] = "float_list"
# dtype -> (dtype decode_raw produces, dtype to bitcast to afterwards, if any)
_RAW_DECODE = {"bool": ("uint8", None), "uint32": ("int32", "uint32")}
_RAW_DECODE["uint64"] = ("int64", "uint64")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Feature:
    """One named feature of the records.

    Args:
        name: The key in ``tf.train.Example.features``.
        dtype: The numpy dtype name of the stored array (``"uint8"``, ``"float32"``, ...),
            or ``"string"``/``"bytes"`` for text and bytes (read as ``tf.string``).
        shape: The shape of one example's value, ``()`` for a scalar, or ``(None,)`` for a
            1-D value whose length varies between records.
        encoding: How the value is stored: ``"raw"``, ``"int64"``, ``"float"`` or
            ``"bytes"`` (see the module docstring). ``"auto"`` (the default) chooses
            as :func:`~tfr_hooks.tfrecord.write` does: ``"int64"`` for integer and bool
            scalars, ``"float"`` for ``float16``/``float32`` scalars, ``"bytes"`` for
            strings, ``"raw"`` for other numeric values (arrays, ``float64`` and
            ``uint64`` scalars); a varying length gets a list (``"int64"`` or
            ``"float"``), and so does a ``float16``/``float32`` value of any shape with
            a ``default`` (``"float"``: optional values are lists, as
            ``tf.io.FixedLenFeature(default_value=...)`` reads them). When the files
            have a ``schema.json``, a feature of the stored dtype and shape takes the
            stored encoding instead.
        default: The value to read when a record holds none for this feature (the key
            absent or its list empty), like ``tf.io.FixedLenFeature(default_value=...)``;
            broadcast to ``shape``. ``None`` (the default) makes the feature required.
            Needs a fixed shape, and no ``sequence``.
        sequence: Whether the feature is a feature list of a ``tf.train.SequenceExample``
            (in its ``feature_lists``, one value per frame) rather than a context feature
            (in an ``Example``'s features or a SequenceExample's context). ``dtype``,
            ``shape`` and ``encoding`` then describe one frame; ``"auto"`` chooses a
            ``float_list`` for ``float16``/``float32`` frames, as other tools write them.
            A batch holds it as a ``tf.RaggedTensor`` ``[batch, (frames), *shape]``.

    Raises:
        ValueError: If the fields do not fit together.

    Examples:
        >>> Feature("label", "int64").encoding
        'int64'
        >>> Feature("image", "uint8", (28, 28, 1)).encoding
        'raw'
        >>> Feature("trip_seconds", "float32", default=0.0).describe()
        'float32 of shape () (optional, default 0.0)'
        >>> Feature("xy", "float32", (2,), default=[0.0, 0.0]).encoding
        'float'
        >>> Feature("rgb", "uint8", (1024,), sequence=True).describe()
        'feature list of uint8 of shape (1024,) per frame'
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] = ()
    encoding: str = AUTO
    default: Any = None
    sequence: bool = False
    # whether the encoding was chosen (``"auto"``), not declared: a stored one may replace it
    _auto_encoded: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(
                f"Expected `name` to be a non-empty string. Received: name={self.name!r}"
            )
        if self.dtype not in _NUMERIC + _STRINGS:
            raise ValueError(
                f"Expected `dtype` of feature {self.name!r} to be one of "
                f"{', '.join(_NUMERIC + _STRINGS)}. Received: dtype={self.dtype!r}"
            )
        if not isinstance(self.sequence, bool):
            raise TypeError(
                f"Expected `sequence` of feature {self.name!r} to be a bool. "
                f"Received: sequence={self.sequence!r}"
            )
        if self.sequence and self.default is not None:
            raise ValueError(
                f"Expected feature list {self.name!r} (sequence=True) to have no default: "
                f"a record without it holds 0 frames. Received: default={self.default!r}"
            )
        if self.encoding == AUTO:
            listed = self.default is not None or self.sequence
            chosen = _auto_encoding(self.dtype, self.shape, listed)
            object.__setattr__(self, "encoding", chosen)
            object.__setattr__(self, "_auto_encoded", True)
        if self.encoding not in ENCODINGS:
            raise ValueError(
                f"Expected `encoding` of feature {self.name!r} to be one of "
                f"{', '.join(ENCODINGS)}. Received: encoding={self.encoding!r}"
            )
        shape = tuple(self.shape)
        ok = all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in shape)
        if not ok or any(d is not None and d < 0 for d in shape):
            raise ValueError(
                f"Expected `shape` of feature {self.name!r} to be a tuple of non-negative "
                f"integers, or (None,) for a varying length. Received: shape={self.shape!r}"
            )
        if None in shape and shape != (None,):
            raise ValueError(
                f"Expected `shape` of feature {self.name!r} to have no None, or to be "
                f"(None,) for a varying length. Received: shape={self.shape!r}"
            )
        if self.encoding == "raw" and (self.dtype in _STRINGS or self.varying):
            raise ValueError(
                f"Feature {self.name!r}: the 'raw' encoding needs a numeric dtype and a "
                f"fixed shape. Received: dtype={self.dtype!r}, shape={self.shape!r}"
            )
        if (self.encoding == "bytes") != (self.dtype in _STRINGS):
            raise ValueError(
                f"Feature {self.name!r}: the 'bytes' encoding goes with dtype 'string' or "
                f"'bytes' and only with them. Received: dtype={self.dtype!r}, "
                f"encoding={self.encoding!r}"
            )
        object.__setattr__(self, "shape", shape)
        if self.default is not None:
            object.__setattr__(self, "default", self._checked_default(self.default))

    def _checked_default(self, default: Any) -> Any:
        """``default`` as a hashable, JSON-ready value of the feature's dtype."""
        if self.varying:
            raise ValueError(
                f"Expected feature {self.name!r} with a default to have a fixed shape (a "
                f"record holds either no value or the whole value). Received: "
                f"shape={self.shape!r}, default={default!r}"
            )
        try:
            if self.dtype in _STRINGS:
                array = np.asarray(default, dtype=object)
                items = [v.encode() if isinstance(v, str) else v for v in array.flat]
                if not all(isinstance(v, bytes) for v in items):
                    raise TypeError("not a string")
                array = np.array(items, dtype=object).reshape(array.shape)
            else:
                array = np.asarray(default)
                if array.dtype.kind not in "biuf" or (
                    array.dtype.kind == "f" and np.dtype(self.dtype).kind != "f"
                ):
                    raise TypeError("not a number of the dtype")
                array = array.astype(self.dtype)
            np.broadcast_to(array, self._fixed_shape)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"Expected `default` of feature {self.name!r} to be a {self.dtype} value "
                f"that broadcasts to shape {self.shape}. Received: default={default!r}"
            ) from error
        return _hashable(array.tolist())

    def default_array(self) -> np.ndarray:
        """The default broadcast to the feature's shape, or raise if it has none."""
        if self.default is None:
            raise ValueError(f"Feature {self.name!r} has no default.")
        if self.dtype in _STRINGS:
            values = np.asarray(self.default, dtype=object)
        else:
            values = np.asarray(self.default, dtype=self.dtype)
        return np.broadcast_to(values, self._fixed_shape)

    @property
    def _fixed_shape(self) -> tuple[int, ...]:
        return tuple(d for d in self.shape if d is not None)

    @property
    def optional(self) -> bool:
        """Whether a record may hold no value for the feature (it has a default)."""
        return self.default is not None

    @property
    def varying(self) -> bool:
        """Whether the length of the value varies between records."""
        return self.shape == (None,)

    @property
    def size(self) -> int | None:
        """Values per example (the product of the shape), or ``None`` when varying."""
        return None if self.varying else math.prod(d for d in self.shape if d is not None)

    @property
    def kind(self) -> str:
        """The ``tf.train.Feature`` list the value is stored in, e.g. ``"bytes_list"``."""
        return _KIND_OF_ENCODING[self.encoding]

    @property
    def tf_dtype(self) -> tf.DType:
        """The dtype of the decoded tensor."""
        return tf.string if self.dtype in _STRINGS else tf.as_dtype(self.dtype)

    @property
    def raw_nbytes(self) -> int:
        """Bytes of one example's value with the ``"raw"`` encoding."""
        return (self.size or 0) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        """A short human description, e.g. ``"uint8 of shape (28, 28)"``."""
        shape = "(varying length)" if self.varying else str(self.shape)
        if self.sequence:
            return f"feature list of {self.dtype} of shape {shape} per frame"
        if self.optional:
            return f"{self.dtype} of shape {shape} (optional, default {self.default!r})"
        return f"{self.dtype} of shape {shape}"

    def expected_values(self) -> str:
        """What one record should hold for this feature, in words."""
        if self.sequence:
            return f"a feature list of frames each holding {self.frame.expected_values()}"
        if self.encoding == "raw":
            one = "no or one" if self.optional else "one"
            return f"{one} bytes value of {self.raw_nbytes} bytes ({self.describe()}, raw)"
        if self.varying:
            return f"a {self.kind} of any length"
        if self.optional:
            return f"a {self.kind} of 0 or {self.size} value(s) (optional)"
        return f"a {self.kind} of {self.size} value(s)"

    @property
    def frame(self) -> Feature:
        """One frame of a feature list, as a context feature (itself if not a sequence)."""
        return dataclasses.replace(self, sequence=False) if self.sequence else self

    def parse_spec(self) -> Any:
        """The ``tf.io`` feature spec for ``tf.io.parse_example``.

        For a feature list (``sequence``), the spec for the ``sequence_features`` of
        ``tf.io.parse_sequence_example``: a ``tf.io.RaggedFeature``, parsed as
        ``[batch, (frames), (values)]``.
        """
        stored = {"raw": tf.string, "bytes": tf.string, "int64": tf.int64, "float": tf.float32}
        stored_dtype = stored[self.encoding]
        if self.varying or self.optional or self.sequence:  # an optional one is filled in by decode
            return tf.io.RaggedFeature(dtype=stored_dtype, row_splits_dtype=tf.int64)
        if self.encoding == "raw":
            return tf.io.FixedLenFeature([], tf.string)
        return tf.io.FixedLenFeature(list(self.shape), stored_dtype)

    def decode(self, parsed: Any) -> Any:
        """Turn the parsed batch of this feature into a tensor of the stored dtype and shape.

        Args:
            parsed: The value ``tf.io.parse_example`` returned for this feature.

        Returns:
            A tensor of shape ``[batch, *shape]`` (ragged when the length varies), or for
            a feature list a ``tf.RaggedTensor`` of shape ``[batch, (frames), *shape]``.
        """
        if self.sequence:
            return self._decode_frames(parsed)
        if self.optional and isinstance(parsed, tf.RaggedTensor):
            parsed = self._fill_default(parsed)
        if self.encoding == "raw":
            decoded_dtype, bitcast_to = _RAW_DECODE.get(self.dtype, (self.dtype, None))
            flat = tf.io.decode_raw(parsed, tf.as_dtype(decoded_dtype), little_endian=True)
            # Take the batch size from the records, so that a wrong byte count fails the
            # reshape instead of silently changing the number of examples.
            batch = tf.shape(parsed, out_type=tf.int64)[:1]
            value = tf.reshape(flat, tf.concat([batch, tf.constant(self.shape, tf.int64)], 0))
            if bitcast_to is not None:
                value = tf.bitcast(value, tf.as_dtype(bitcast_to))
            if self.dtype == "bool":
                value = tf.not_equal(value, 0)
            value.set_shape(parsed.shape.concatenate(self.shape))
            return value
        if parsed.dtype != self.tf_dtype:
            if isinstance(parsed, tf.RaggedTensor):
                return tf.ragged.map_flat_values(tf.cast, parsed, self.tf_dtype)
            return tf.cast(parsed, self.tf_dtype)
        return parsed

    def _decode_frames(self, parsed: Any) -> Any:
        """``[batch, (frames), *shape]`` from a feature list parsed as ragged values."""
        frames = parsed.values  # [total frames, (values)]
        if self.varying:
            values = frames if frames.dtype == self.tf_dtype else tf.cast(frames, self.tf_dtype)
            return tf.RaggedTensor.from_row_splits(values, parsed.row_splits, validate=False)
        per_frame = 1 if self.encoding == "raw" else (self.size or 0)
        lengths = frames.row_lengths()
        message = (
            # "tf.train.SequenceExample" marks it a data error for explain_error
            f"Expected every frame of feature list {self.name!r} to hold "
            f"{self.frame.expected_values()} in every tf.train.SequenceExample; found a "
            "frame with another number of values"
        )
        valid = tf.reduce_all(tf.equal(lengths, per_frame))
        with tf.control_dependencies([tf.debugging.Assert(valid, [message, lengths])]):
            flat = tf.identity(frames.flat_values)
        count = tf.shape(lengths, out_type=tf.int64)
        if self.encoding == "raw":
            value = self.frame.decode(flat)  # one bytes value per frame: [frames, *shape]
        else:
            shape = tf.concat([count, tf.constant(self.shape, tf.int64)], 0)
            value = self.frame.decode(tf.reshape(flat, shape))
            value.set_shape(tf.TensorShape([None]).concatenate(self.shape))
        return tf.RaggedTensor.from_row_splits(value, parsed.row_splits, validate=False)

    def _fill_default(self, parsed: Any) -> Any:
        """Dense values from the ragged ``[batch, (values)]`` of an optional feature."""
        per_record = 1 if self.encoding == "raw" else (self.size or 0)
        lengths = parsed.row_lengths()
        empty = tf.equal(lengths, 0)
        valid = tf.reduce_all(tf.logical_or(empty, tf.equal(lengths, per_record)))
        message = (
            # "tf.train.Example" marks it a data error for explain_error / DataErrorHook
            f"Expected feature {self.name!r} to hold 0 or {per_record} value(s) in every "
            f"tf.train.Example ({self.expected_values()}); found a record with another number"
        )
        with tf.control_dependencies([tf.debugging.Assert(valid, [message, lengths])]):
            dense = parsed.to_tensor(shape=[None, per_record])
        if self.encoding == "raw":
            nbytes = self.default_array().astype(np.dtype(self.dtype).newbyteorder("<"))
            fill = tf.constant([nbytes.tobytes()], tf.string)
        else:
            stored = {"bytes": object, "int64": np.int64, "float": np.float32}[self.encoding]
            values = self.default_array().reshape(-1)
            fill = tf.constant(values.astype(stored), dense.dtype)
        value = tf.where(tf.expand_dims(empty, 1), tf.expand_dims(fill, 0), dense)
        if self.encoding == "raw":
            return value[:, 0]
        batch = tf.shape(value, out_type=tf.int64)[:1]
        value = tf.reshape(value, tf.concat([batch, tf.constant(self.shape, tf.int64)], 0))
        value.set_shape(tf.TensorShape([None]).concatenate(self.shape))
        return value

    def check(self, feature: Any) -> str | None:
        """Compare one record's ``tf.train.Feature`` with this spec.

        Args:
            feature: A ``tf.train.Feature`` proto, or for a feature list (``sequence``)
                a ``tf.train.FeatureList``, whose every frame is checked.

        Returns:
            ``None`` if it matches, else what was found, in words.
        """
        if self.sequence:
            frame = self.frame
            for index, value in enumerate(feature.feature):
                found = frame.check(value)
                if found is not None:
                    return f"in frame {index}, {found}"
            return None
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value if kind else []
        if kind is not None and kind != self.kind:
            return f"a {kind} of {len(values)} value(s)"
        if self.optional and not values:
            return None
        if self.encoding == "raw":
            if len(values) != 1:
                return f"{len(values)} bytes values"
            if len(values[0]) != self.raw_nbytes:
                return f"one bytes value of {len(values[0])} bytes"
            return None
        if not self.varying and len(values) != self.size:
            return f"a {kind or self.kind} of {len(values)} value(s)"
        return None

    def suggest_encoding(self, feature: Any) -> str | None:
        """The encoding that would read a record's ``tf.train.Feature``, if another would.

        Args:
            feature: A ``tf.train.Feature`` proto that :meth:`check` refused.

        Returns:
            An encoding of :data:`ENCODINGS` that fits the dtype and shape and under which
            :meth:`check` accepts ``feature``, or ``None``.
        """
        for encoding in ENCODINGS:
            if encoding == self.encoding:
                continue
            try:
                other = dataclasses.replace(self, encoding=encoding)
            except ValueError:
                continue
            if other.check(feature) is None:
                return encoding
        return None

    def to_dict(self) -> dict[str, Any]:
        """The feature as a JSON-ready dict."""
        data: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "encoding": self.encoding,
        }
        if self.optional:
            data["default"] = _json_ready(self.default)
        if self.sequence:  # only then: a schema without feature lists reads as before
            data["sequence"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Feature:
        """Build a feature from :meth:`to_dict`'s output."""
        return cls(
            name=data["name"],
            dtype=data["dtype"],
            shape=tuple(data.get("shape", ())),
            encoding=data.get("encoding", AUTO),
            default=data.get("default"),
            sequence=bool(data.get("sequence", False)),
        )

    @classmethod
    def for_array(cls, name: str, array: np.ndarray) -> Feature:
        """Choose the dtype, shape and encoding to store ``array[i]`` for each example ``i``.

        Args:
            name: The feature name.
            array: All examples' values, stacked along the first axis.

        Returns:
            The feature.

        Raises:
            TypeError: If the dtype cannot be stored.
        """
        shape = tuple(int(d) for d in array.shape[1:])
        if array.dtype.kind == "O" and array.ndim == 1 and _holds_lists(array):
            return cls(name, _list_dtype(name, array), (None,))
        if array.dtype.kind in "USO":
            dtype = "string" if array.dtype.kind in "UO" else "bytes"
            return cls(name, dtype, shape, "bytes")
        dtype = array.dtype.name
        if dtype not in _NUMERIC:
            raise TypeError(
                f"Expected array {name!r} to have a bool, integer, float or string dtype. "
                f"Received: dtype={array.dtype}"
            )
        return cls(name, dtype, shape)  # the encoding chosen by _auto_encoding


def _holds_lists(array: np.ndarray) -> bool:
    """Whether an object array holds one list (or 1-D array) of values per example."""
    return any(isinstance(item, (np.ndarray, list, tuple)) for item in array.tolist()[:64])


def _list_dtype(name: str, array: np.ndarray) -> str:
    """The dtype of the values of an object array of 1-D lists (varying length)."""
    dtypes = set()
    for index, item in enumerate(array.tolist()):
        row = np.asarray(item)
        if row.ndim != 1:
            raise ValueError(
                f"Expected each item of array {name!r} to be a 1-D list of values (a "
                f"feature of varying length). Received: item {index} of shape {row.shape}"
            )
        if len(row):
            dtypes.add("string" if row.dtype.kind in "USO" else row.dtype.name)
    if not dtypes:
        return "float32"
    if len(dtypes) > 1:
        if all(d in _NUMERIC for d in dtypes):
            return np.result_type(*dtypes).name
        raise TypeError(
            f"Expected the lists of array {name!r} to hold values of one kind. "
            f"Received: dtypes {sorted(dtypes)}"
        )
    dtype = dtypes.pop()
    if dtype != "string" and dtype not in _NUMERIC:
        raise TypeError(
            f"Expected the lists of array {name!r} to hold bool, integer, float or string "
            f"values. Received: dtype={dtype}"
        )
    return dtype


def _auto_encoding(dtype: str, shape: Any, listed: bool = False) -> str:
    """The encoding ``write`` gives a value of ``dtype`` and ``shape``.

    With a default, or per frame of a feature list (``listed``), a ``float16``/``float32``
    value of any shape is a ``float_list``: optional values and feature lists come from
    other tools (TFX, ``tf.io.FixedLenFeature`` users, SequenceExample writers), which
    store them as lists, not as raw bytes.
    """
    if dtype in _STRINGS:
        return "bytes"
    if listed and dtype in ("float16", "float32"):
        return "float"
    scalar_or_varying = tuple(shape) in ((), (None,))
    if scalar_or_varying and np.dtype(dtype).kind in "biu" and dtype != "uint64":
        return "int64"
    if scalar_or_varying and dtype in ("float16", "float32"):
        return "float"
    if tuple(shape) == (None,):  # no raw bytes for a varying length: the nearest list
        return "float" if np.dtype(dtype).kind == "f" else "int64"
    return "raw"


def _hashable(value: Any) -> Any:
    """Nested lists as nested tuples (a frozen Feature must stay hashable)."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _json_ready(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


@dataclass(frozen=True)
class Schema:
    """The features of a set of TFRecord files, in order.

    Args:
        features: The features; names must be unique.

    Raises:
        ValueError: If two features share a name.

    Examples:
        >>> schema = Schema([Feature("image", "uint8", (28, 28)), Feature("label", "int64",
        ...                  (), "int64")])
        >>> schema["image"].describe()
        'uint8 of shape (28, 28)'
    """

    features: tuple[Feature, ...] = field(default_factory=tuple)

    def __init__(self, features: Iterable[Feature]) -> None:
        items = tuple(features)
        for i, item in enumerate(items):
            if not isinstance(item, Feature):
                raise TypeError(
                    f"Expected `features[{i}]` to be a tfrecord.Feature. "
                    f"Received: features[{i}]={item!r}"
                )
        names = [f.name for f in items]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Expected unique feature names. Received: duplicates={duplicates}")
        object.__setattr__(self, "features", items)

    def __getitem__(self, name: str) -> Feature:
        for feature in self.features:
            if feature.name == name:
                return feature
        raise KeyError(f"No feature {name!r} in the schema; it has {self.names}")

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.features)

    def __iter__(self) -> Iterator[Feature]:
        return iter(self.features)

    def __len__(self) -> int:
        return len(self.features)

    @property
    def names(self) -> list[str]:
        """The feature names, in order."""
        return [f.name for f in self.features]

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Schema:
        """Choose how to store each named array (see :meth:`Feature.for_array`)."""
        return cls(Feature.for_array(name, np.asarray(a)) for name, a in arrays.items())

    def select(self, names: Iterable[str]) -> Schema:
        """The schema restricted to ``names``, in that order."""
        return Schema(self[name] for name in names)

    def replace(self, **changes: Any) -> Schema:
        """The schema with some features declared anew, the others kept as they are.

        Meant for an inferred schema, which knows the kinds and lengths of value lists but
        not what raw bytes hold or which features are optional.

        Args:
            **changes: For each feature name to change, one of:

                * a ``(dtype, shape)`` or ``(dtype, shape, encoding)`` tuple: the feature
                  declared anew (the encoding chosen as ``write`` does when not given);
                * a dict of :class:`Feature` fields to change, e.g. ``{"default": 0.0}``.
                  A default given to a feature of varying length (one that
                  ``tfr-hooks inspect`` calls optional, with 0 or 1 values) makes it a
                  scalar unless the dict gives a shape;
                * a :class:`Feature` (renamed to the key).

        Returns:
            A new schema, in the same order.

        Raises:
            KeyError: If a name is not a feature of the schema.
            TypeError: If a change is none of the above.
            ValueError: If the changed feature's fields do not fit together.

        Examples:
            >>> schema = tfrecord.infer_schema("mnist.tfrecord")  # doctest: +SKIP
            >>> schema = schema.replace(image_raw=("uint8", (28, 28, 1)))  # doctest: +SKIP
            >>> schema = schema.replace(trip_seconds={"default": 0.0})  # doctest: +SKIP
        """
        unknown = [name for name in changes if name not in self]
        if unknown:
            raise KeyError(
                f"Expected the names given to `replace` to be features of the schema "
                f"{self.names}. Received: "
                + ", ".join(f"{name}={changes[name]!r}" for name in unknown)
            )
        return Schema(
            _replaced(f, changes[f.name]) if f.name in changes else f for f in self.features
        )

    @property
    def context_features(self) -> list[Feature]:
        """The features of an Example, or of a SequenceExample's context, in order."""
        return [f for f in self.features if not f.sequence]

    @property
    def sequence_features(self) -> list[Feature]:
        """The feature lists of a SequenceExample (``sequence=True``), in order."""
        return [f for f in self.features if f.sequence]

    def parse_spec(self) -> dict[str, Any]:
        """The feature spec for ``tf.io.parse_example``.

        With feature lists, :meth:`parse_batch` gives the specs of
        :attr:`sequence_features` to ``tf.io.parse_sequence_example`` as its
        ``sequence_features`` and the others as its ``context_features``.
        """
        return {f.name: f.parse_spec() for f in self.features}

    def parse_batch(self, serialized: Any) -> dict[str, Any]:
        """Parse and decode a 1-D batch of serialized records.

        Without feature lists, with ``tf.io.parse_example`` (the records are
        ``tf.train.Example``s, or SequenceExamples whose context is read). With feature
        lists, with ``tf.io.parse_sequence_example``; a record without a feature list
        (an Example, say) holds 0 frames of it.

        Args:
            serialized: A string tensor of shape ``[batch]``.

        Returns:
            A dict of tensors of shape ``[batch, *feature.shape]`` and the stored dtypes,
            in schema order; each feature list a ``tf.RaggedTensor`` of shape
            ``[batch, (frames), *feature.shape]``.
        """
        sequences = self.sequence_features
        if not sequences:
            parsed = tf.io.parse_example(serialized, self.parse_spec())
            return {f.name: f.decode(parsed[f.name]) for f in self.features}
        context_spec = {f.name: f.parse_spec() for f in self.context_features}
        context, lists, _ = tf.io.parse_sequence_example(
            serialized,
            context_features=context_spec or None,
            sequence_features={f.name: f.parse_spec() for f in sequences},
        )
        return {
            f.name: f.decode(lists[f.name] if f.sequence else context[f.name])
            for f in self.features
        }

    def check_example(
        self,
        example: Any,
        *,
        file: str | None = None,
        record: int | None = None,
        warn: bool = True,
    ) -> None:
        """Raise a clear error if one record does not match the schema.

        A feature of varying length may be absent from any record (it reads as an empty
        row, as ``tf.io.RaggedFeature`` reads it), and so may one with a default (the
        default is read); any other context feature must be in every record. A feature
        list may be absent from any record: it reads as 0 frames (writers often leave
        out the key of an empty list), and :meth:`warn_unread` names it, as a file whose
        first record lacks it may have a misspelled name.

        Args:
            example: The record: its serialized bytes, or a ``tf.train.Example`` or
                ``tf.train.SequenceExample`` proto (an Example parsed from a
                SequenceExample's bytes still holds the feature lists, as an unknown
                field, and they are checked).
            file: The file it came from, for the message.
            record: Its index in that file, for the message.
            warn: Whether to log a warning naming what the record holds that the schema
                leaves out (see :meth:`warn_unread`).

        Raises:
            CorruptRecordError: If the record is neither an Example nor a
                SequenceExample (raw bytes, a serialized tensor).
            MissingFeatureError: If a feature of the schema that has a fixed shape and no
                default is absent.
            SchemaMismatchError: If a feature has the wrong kind or length, or is a
                feature list where the schema has a context feature, or the reverse.
        """
        content = as_record_content(example)
        if content.kind == NEITHER:
            raise not_a_proto_error(content, file=file, record=record)
        for feature in self.features:
            problem = _check_feature(feature, content, where(file, record))
            if problem is not None:
                problem.file, problem.record, problem.feature = file, record, feature.name
                raise problem
        if warn:
            self.warn_unread(content, file=file, record=record)

    def unread(self, example: Any, *, absent: bool = True) -> list[str]:
        """What a record holds that :meth:`parse_batch` will not return, in words.

        Args:
            example: The record, as for :meth:`check_example`.
            absent: Whether to name the feature lists of the schema the record lacks (the
                readers leave that to a scan of the file's later records).

        Returns:
            One sentence per finding (empty when the schema reads everything that
            matters): the record is neither an Example nor a SequenceExample; it holds
            feature lists the schema leaves out; or it lacks feature lists the schema
            names (they read as 0 frames). Context features left out are not listed:
            choosing features is what a schema (or ``as_tuple``) is for.
        """
        content = as_record_content(example)
        if content.kind == NEITHER:
            return [
                "it is neither a tf.train.Example nor a tf.train.SequenceExample (found "
                f"{content.found}), so nothing of it is read"
            ]
        found: list[str] = []
        declared = {f.name for f in self.sequence_features}
        left_out = sorted(set(content.feature_lists) - declared)
        if left_out:
            found.append(
                f"it holds the feature lists {left_out}, which the schema leaves out "
                "and the reader will not return: declare each as Feature(name, dtype, "
                "per-frame shape, sequence=True), or read with the inferred schema"
            )
        lacking = sorted(n for n in declared if n not in content.feature_lists)
        if lacking and absent:
            held = sorted(content.feature_lists) or "no feature lists"
            found.append(
                f"it lacks the feature lists {lacking} of the schema (it holds {held}); "
                "a record without them reads as 0 frames of them (if no record holds "
                "them, check their names with tfr-hooks inspect)"
            )
        return found

    def warn_unread(
        self,
        example: Any,
        *,
        file: str | None = None,
        record: int | None = None,
        absent: bool = True,
    ) -> list[str]:
        """Log a warning naming what a record holds that the reader will not return.

        The readers call it (through :meth:`check_example`) on each file's first record,
        and :func:`~tfr_hooks.tfrecord.inspect` on every record it scans.

        Args:
            example: The record, as for :meth:`check_example`.
            file: The file it came from, for the message.
            record: Its index in that file, for the message.
            absent: As for :meth:`unread`.

        Returns:
            The findings of :meth:`unread` (one warning joins them), empty if none.
        """
        found = self.unread(example, absent=absent)
        if found:
            logger.warning("%s: %s.", where(file, record).capitalize(), "; ".join(found))
        return found

    def with_stored_encodings(self, stored: Schema) -> Schema:
        """The schema with each chosen (``"auto"``) encoding replaced by the stored one.

        A feature declared without an encoding and of the stored dtype and shape reads the
        records as they were written (``Feature("xy", "float32", (2,), default=...)``
        reads the raw bytes :func:`~tfr_hooks.tfrecord.write` stores for a float array);
        declared encodings are kept, for :meth:`check_compatible` to check.

        Args:
            stored: The schema the files were written with.

        Returns:
            A new schema, in the same order.
        """

        def adopted(feature: Feature) -> Feature:
            if not feature._auto_encoded or feature.name not in stored:
                return feature
            other = stored[feature.name]
            if (other.dtype, other.shape) != (feature.dtype, feature.shape):
                return feature
            return dataclasses.replace(feature, encoding=other.encoding)

        return Schema(adopted(f) for f in self.features)

    def check_compatible(self, stored: Schema, *, source: str) -> None:
        """Raise if this (requested) schema disagrees with the ``stored`` one.

        Features of the stored schema that are not requested are fine (they are not read).

        Args:
            stored: The schema the files were written with.
            source: Where ``stored`` comes from, for the message (e.g. the sidecar path).

        Raises:
            MissingFeatureError: If a requested feature is not stored.
            SchemaMismatchError: If a requested feature is stored differently.
        """
        for feature in self.features:
            if feature.name not in stored:
                raise MissingFeatureError(
                    f"Feature {feature.name!r} is not in the records described by {source}: "
                    f"expected {feature.describe()}; the stored features are {stored.names}.",
                    file=source,
                    feature=feature.name,
                )
            other = stored[feature.name]
            if (other.dtype, other.shape, other.encoding) != (
                feature.dtype,
                feature.shape,
                feature.encoding,
            ):
                raise SchemaMismatchError(
                    f"Feature {feature.name!r} does not match {source}: expected "
                    f"{feature.describe()} ({feature.encoding} encoding); found "
                    f"{other.describe()} ({other.encoding} encoding)."
                    + _encoding_hint(feature, other.encoding, stored=other),
                    file=source,
                    feature=feature.name,
                )

    def to_list(self) -> list[dict[str, Any]]:
        """The features as JSON-ready dicts."""
        return [f.to_dict() for f in self.features]

    @classmethod
    def from_list(cls, data: Iterable[Mapping[str, Any]]) -> Schema:
        """Build a schema from :meth:`to_list`'s output."""
        return cls(Feature.from_dict(item) for item in data)


def _replaced(feature: Feature, change: Any) -> Feature:
    """``feature`` changed by one value of :meth:`Schema.replace`."""
    name = feature.name
    if isinstance(change, Feature):
        return change if change.name == name else dataclasses.replace(change, name=name)
    if isinstance(change, tuple) and len(change) in (2, 3):
        encoding = change[2] if len(change) == 3 else AUTO
        return Feature(name, change[0], change[1], encoding, sequence=feature.sequence)
    if isinstance(change, Mapping):
        fields = dict(change)
        if not set(fields) <= {"dtype", "shape", "encoding", "default", "sequence"}:
            raise TypeError(
                f"Expected the changes of feature {name!r} to name only the fields dtype, "
                f"shape, encoding and default (or sequence). Received: {name}={change!r}"
            )
        if fields.get("default") is not None and feature.varying and "shape" not in fields:
            fields["shape"] = ()  # an optional scalar: a record holds 0 or 1 values
        if ("dtype" in fields or "shape" in fields) and "encoding" not in fields:
            fields["encoding"] = AUTO  # chosen anew for the new dtype and shape
        return dataclasses.replace(feature, **fields)
    raise TypeError(
        f"Expected the change of feature {name!r} to be a (dtype, shape) tuple, a "
        f"(dtype, shape, encoding) tuple, a dict of Feature fields or a Feature. "
        f"Received: {name}={change!r}"
    )


def _encoding_hint(feature: Feature, encoding: str | None, stored: Feature | None = None) -> str:
    """Words on the encoding that would have matched, or ``""``."""
    if encoding is None or encoding == feature.encoding:
        return ""
    if stored is not None and (stored.dtype, stored.shape) != (feature.dtype, feature.shape):
        return ""
    shape = feature.shape
    sequence = ", sequence=True" if feature.sequence else ""
    return (
        f" The {encoding!r} encoding would match: Feature({feature.name!r}, "
        f"{feature.dtype!r}, {shape!r}, encoding={encoding!r}{sequence})."
    )


def _check_feature(feature: Feature, content: Any, where: str) -> SchemaMismatchError | None:
    """The error for one feature of a record (:meth:`Schema.check_example`), if any."""
    own, other = content.context, content.feature_lists
    if feature.sequence:
        own, other = other, own
    if feature.name not in own and feature.name in other:
        declared = "a feature list" if feature.sequence else "a context feature"
        held = "a context feature" if feature.sequence else "a feature list"
        fix = "without sequence=True" if feature.sequence else "with sequence=True"
        return SchemaMismatchError(
            f"Feature {feature.name!r} in {where} does not match the schema: expected "
            f"{declared} ({feature.expected_values()}); found {held}. Declare it {fix}."
        )
    if feature.name not in own:
        return _missing(feature, content, where)
    found_text = feature.check(own[feature.name])
    if found_text is None:
        return None
    return SchemaMismatchError(
        f"Feature {feature.name!r} in {where} does not match the schema: "
        f"expected {feature.expected_values()}; found {found_text}."
        + _encoding_hint(feature, feature.suggest_encoding(own[feature.name]))
    )


def _missing(feature: Feature, content: Any, where: str) -> MissingFeatureError | None:
    """The error for a feature absent from a record, if its absence is one."""
    if feature.sequence:  # 0 frames: writers often leave out the key (warn_unread names it)
        return None
    if feature.optional or feature.varying:
        return None  # its default is read, or an empty row (as tf.io.RaggedFeature)
    found = sorted(content.context.keys())
    return MissingFeatureError(
        f"Feature {feature.name!r} is missing from {where}: expected "
        f"{feature.expected_values()}; found only the features {found}. "
        f"If some records hold no value for it, give it a default: "
        f"decode={{{feature.name!r}: {{'default': ...}}}}."
    )
