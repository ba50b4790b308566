"""Whether records and stored schemas match a declared :class:`~.schema.Schema`.

What :meth:`Feature.check <tfr_hooks.tfrecord.schema.schema.Feature.check>`,
:meth:`Schema.check_example <tfr_hooks.tfrecord.schema.schema.Schema.check_example>`,
:meth:`Schema.unread <tfr_hooks.tfrecord.schema.schema.Schema.unread>`,
:meth:`Schema.with_stored_encodings
<tfr_hooks.tfrecord.schema.schema.Schema.with_stored_encodings>` and
:meth:`Schema.check_compatible <tfr_hooks.tfrecord.schema.schema.Schema.check_compatible>` do:
one record's features compared with their declaration (a clear error naming the file,
record and feature, and the encoding that would have matched), what a record holds that
the reader will not return, and a declared schema compared with the stored one.

A ``spec`` here is a :class:`~.schema.Feature`, a ``schema`` a :class:`~.schema.Schema`
(typed ``Any``: ``schema`` imports this module, which imports nothing of it).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from tfr_hooks.tfrecord.errors import MissingFeatureError, SchemaMismatchError
from tfr_hooks.tfrecord.schema.records import NEITHER, as_record_content, not_a_proto_error, where

__all__ = [
    "check_compatible",
    "check_example",
    "check_value",
    "suggest_encoding",
    "unread",
    "with_stored_encodings",
]

logger = logging.getLogger(__name__)


def check_value(spec: Any, feature: Any) -> str | None:
    """``feature`` (a record's) compared with ``spec``: ``Feature.check``."""
    if spec.sequence:
        frame = spec.frame
        for index, value in enumerate(feature.feature):
            found = frame.check(value)
            if found is not None:
                return f"in frame {index}, {found}"
        return None
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    if kind is not None and kind != spec.kind:
        return f"a {kind} of {len(values)} value(s)"
    if spec.optional and not values:
        return None
    if spec.encoding == "raw":
        if len(values) != 1:
            return f"{len(values)} bytes values"
        if len(values[0]) != spec.raw_nbytes:
            return f"one bytes value of {len(values[0])} bytes"
        return None
    if not spec.varying and len(values) != spec.size:
        return f"a {kind or spec.kind} of {len(values)} value(s)"
    return None


def suggest_encoding(spec: Any, feature: Any, encodings: tuple[str, ...]) -> str | None:
    """The encoding that reads ``feature``: ``Feature.suggest_encoding``."""
    for encoding in encodings:
        if encoding == spec.encoding:
            continue
        try:
            other = dataclasses.replace(spec, encoding=encoding)
        except ValueError:
            continue
        if other.check(feature) is None:
            return encoding
    return None


def check_example(
    schema: Any,
    example: Any,
    *,
    file: str | None = None,
    record: int | None = None,
    warn: bool = True,
) -> None:
    """Raise if ``example`` does not match: ``Schema.check_example``."""
    content = as_record_content(example)
    if content.kind == NEITHER:
        raise not_a_proto_error(content, file=file, record=record)
    for feature in schema.features:
        problem = _check_feature(feature, content, where(file, record))
        if problem is not None:
            problem.file, problem.record, problem.feature = file, record, feature.name
            raise problem
    if warn:
        schema.warn_unread(content, file=file, record=record)


def unread(schema: Any, example: Any, *, absent: bool = True) -> list[str]:
    """What ``example`` holds unread: ``Schema.unread``."""
    content = as_record_content(example)
    if content.kind == NEITHER:
        return [
            "it is neither a tf.train.Example nor a tf.train.SequenceExample (found "
            f"{content.found}), so nothing of it is read"
        ]
    found: list[str] = []
    declared = {f.name for f in schema.sequence_features}
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


def with_stored_encodings(schema: Any, stored: Any) -> Any:
    """Stored encodings adopted: ``Schema.with_stored_encodings``."""

    def adopted(feature: Any) -> Any:
        if not feature._auto_encoded or feature.name not in stored:
            return feature
        other = stored[feature.name]
        if (other.dtype, other.shape) != (feature.dtype, feature.shape):
            return feature
        return dataclasses.replace(feature, encoding=other.encoding)

    return type(schema)(adopted(f) for f in schema.features)


def check_compatible(schema: Any, stored: Any, *, source: str) -> None:
    """Raise if ``stored`` disagrees: ``Schema.check_compatible``."""
    for feature in schema.features:
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


def _encoding_hint(feature: Any, encoding: str | None, stored: Any | None = None) -> str:
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


def _check_feature(feature: Any, content: Any, where: str) -> SchemaMismatchError | None:
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


def _missing(feature: Any, content: Any, where: str) -> MissingFeatureError | None:
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
