"""The schema of TFRecord examples: each feature's name, dtype, shape and encoding.

A :class:`Schema` says how arrays were stored in ``tf.train.Example`` records and how to
turn a batch of serialized records back into tensors of the stored dtype and shape. The
writer saves it, with the shard list and compression, in a JSON sidecar
(``schema.json``, see :mod:`tfr_hooks.tfrecord.schema.sidecar`) next to the shards, so readers
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

from tfr_hooks.tfrecord.schema import decode, infer, matching
from tfr_hooks.tfrecord.schema.records import where

__all__ = [
    "Feature",
    "Schema",
    "ENCODINGS",
    "AUTO",
]

#: The ways a feature can be stored in a ``tf.train.Example``.
ENCODINGS = ("raw", "int64", "float", "bytes")
#: The encoding of a :class:`Feature` declared without one: chosen as ``write`` does.
AUTO = infer.AUTO

_NUMERIC, _STRINGS = infer.NUMERIC_DTYPES, infer.STRING_DTYPES
_KIND_OF_ENCODING = {"raw": "bytes_list", "bytes": "bytes_list", "int64": "int64_list"}
_KIND_OF_ENCODING["float"] = "float_list"

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
            chosen = infer.auto_encoding(self.dtype, self.shape, listed)
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
        return decode.feature_parse_spec(self)

    def decode(self, parsed: Any) -> Any:
        """Turn the parsed batch of this feature into a tensor of the stored dtype and shape.

        Args:
            parsed: The value ``tf.io.parse_example`` returned for this feature.

        Returns:
            A tensor of shape ``[batch, *shape]`` (ragged when the length varies), or for
            a feature list a ``tf.RaggedTensor`` of shape ``[batch, (frames), *shape]``.
        """
        return decode.decode_feature(self, parsed)

    def check(self, feature: Any) -> str | None:
        """Compare one record's ``tf.train.Feature`` with this spec.

        Args:
            feature: A ``tf.train.Feature`` proto, or for a feature list (``sequence``)
                a ``tf.train.FeatureList``, whose every frame is checked.

        Returns:
            ``None`` if it matches, else what was found, in words.
        """
        return matching.check_value(self, feature)

    def suggest_encoding(self, feature: Any) -> str | None:
        """The encoding that would read a record's ``tf.train.Feature``, if another would.

        Args:
            feature: A ``tf.train.Feature`` proto that :meth:`check` refused.

        Returns:
            An encoding of :data:`ENCODINGS` that fits the dtype and shape and under which
            :meth:`check` accepts ``feature``, or ``None``.
        """
        return matching.suggest_encoding(self, feature, ENCODINGS)

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
        return cls(name, *infer.for_array(name, array))


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
        return decode.parse_batch(self, serialized)

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
        matching.check_example(self, example, file=file, record=record, warn=warn)

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
        return matching.unread(self, example, absent=absent)

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
        return matching.with_stored_encodings(self, stored)

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
        matching.check_compatible(self, stored, source=source)

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
