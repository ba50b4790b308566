"""Scanning records for what they hold, whoever wrote them: the features and their lengths.

The user-facing tools built on this scan (:func:`~tfr_hooks.tfrecord.inspect`,
:func:`~tfr_hooks.tfrecord.infer_schema`) live in :mod:`tfr_hooks.tfrecord.inspection`;
a source infers its schema from here without going through them.

:func:`inspect` reads each file's records (in any compression) and reports the record
count and, per feature, its kind (``bytes``/``float``/``int64``), how many records hold
it and how long its value lists are. Records of ``tf.train.SequenceExample`` are told
from ``tf.train.Example`` ones by their ``feature_lists``: the context is reported as an
Example's features, and each feature list per frame, with its frames per record.
:func:`infer_schema` turns that into a :class:`~tfr_hooks.tfrecord.schema.schema.Schema` the
readers can use, preferring the ``schema.json`` sidecar when the files were written by
this package.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.errors import EmptyFileError, SchemaMismatchError
from tfr_hooks.tfrecord.formats.framing import check_compression
from tfr_hooks.tfrecord.formats.reading import format_of
from tfr_hooks.tfrecord.schema.records import (
    EXAMPLE,
    NEITHER,
    SEQUENCE_EXAMPLE,
    not_a_proto_error,
    parse_record,
)
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import Sidecar

__all__ = [
    "FeatureInfo",
    "FeatureListInfo",
    "FileInfo",
    "infer_from_records",
    "inspect_file",
    "schema_from_infos",
]

logger = logging.getLogger(__name__)

_KIND_NAMES = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}
_KIND_DTYPES = {"bytes": "bytes", "float": "float32", "int64": "int64"}


@dataclass
class FeatureInfo:
    """What the scanned records of a file hold under one feature name.

    Attributes:
        name: The feature name.
        kind: ``"bytes"``, ``"float"`` or ``"int64"``; ``"mixed"`` if records disagree;
            ``"empty"`` if every value list was empty.
        records: Scanned records that hold the feature.
        min_length: Fewest values in one record.
        max_length: Most values in one record.
        min_bytes: For bytes features, fewest bytes in one record (else 0).
        max_bytes: For bytes features, most bytes in one record (else 0).
    """

    name: str
    kind: str = "empty"
    records: int = 0
    min_length: int = 0
    max_length: int = 0
    min_bytes: int = 0
    max_bytes: int = 0

    def add(self, feature: Any) -> None:
        """Account for one record's ``tf.train.Feature``."""
        oneof = feature.WhichOneof("kind")
        values = getattr(feature, oneof).value if oneof else []
        kind = _KIND_NAMES[oneof] if oneof else "empty"
        nbytes = sum(len(v) for v in values) if kind == "bytes" else 0
        if self.records == 0:
            self.min_length = self.max_length = len(values)
            self.min_bytes = self.max_bytes = nbytes
        else:
            self.min_length = min(self.min_length, len(values))
            self.max_length = max(self.max_length, len(values))
            self.min_bytes = min(self.min_bytes, nbytes)
            self.max_bytes = max(self.max_bytes, nbytes)
        if kind != "empty" and self.kind != kind:
            self.kind = kind if self.kind == "empty" else "mixed"
        self.records += 1

    def merge(self, other: FeatureInfo) -> None:
        """Combine with the same feature's info from another file."""
        if other.records == 0:
            return
        if self.records == 0:
            self.kind, self.min_length, self.max_length = (
                other.kind,
                other.min_length,
                other.max_length,
            )
            self.min_bytes, self.max_bytes = other.min_bytes, other.max_bytes
        else:
            self.min_length = min(self.min_length, other.min_length)
            self.max_length = max(self.max_length, other.max_length)
            self.min_bytes = min(self.min_bytes, other.min_bytes)
            self.max_bytes = max(self.max_bytes, other.max_bytes)
            if other.kind != "empty" and other.kind != self.kind:
                self.kind = other.kind if self.kind == "empty" else "mixed"
        self.records += other.records

    @property
    def fixed_length(self) -> bool:
        """Whether every scanned record holds the same number of values."""
        return self.min_length == self.max_length

    def is_optional(self, scanned_records: int) -> bool:
        """Whether the feature holds 0 or 1 values: an optional scalar (as TFX writes them).

        Args:
            scanned_records: The records scanned, to tell whether some lack the feature.

        Returns:
            ``True`` if every record holding a value holds one, and some hold none (an
            empty list, or the feature absent). Read it dense with a default:
            ``schema.replace(name={"default": ...})``.
        """
        some_lack = self.min_length == 0 or self.records < scanned_records
        return self.max_length == 1 and self.records > 0 and some_lack

    def length_text(self) -> str:
        """The length, e.g. ``"784"`` or ``"0..12"``."""
        if self.fixed_length:
            return str(self.min_length)
        return f"{self.min_length}..{self.max_length}"

    def to_dict(self) -> dict[str, Any]:
        """The info as a JSON-ready dict."""
        data: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "records": self.records,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "fixed_length": self.fixed_length,
        }
        if self.kind == "bytes":
            data["min_bytes"], data["max_bytes"] = self.min_bytes, self.max_bytes
        return data


@dataclass
class FeatureListInfo:
    """What the scanned records of a file hold under one feature list (SequenceExample).

    Attributes:
        name: The feature list's name.
        records: Scanned records that hold the feature list (the others read as 0 frames).
        min_frames: Fewest frames in one record holding it.
        max_frames: Most frames in one record holding it.
        frame: The frames, each counted as a feature (``frame.records`` is the number
            of frames seen): per-frame kind, length and bytes.
    """

    name: str
    records: int = 0
    min_frames: int = 0
    max_frames: int = 0
    frame: FeatureInfo = field(default_factory=lambda: FeatureInfo(""))

    def __post_init__(self) -> None:
        self.frame.name = self.name

    def add(self, feature_list: Any) -> None:
        """Account for one record's ``tf.train.FeatureList``."""
        frames = len(feature_list.feature)
        if self.records == 0:
            self.min_frames = self.max_frames = frames
        else:
            self.min_frames = min(self.min_frames, frames)
            self.max_frames = max(self.max_frames, frames)
        self.records += 1
        for feature in feature_list.feature:
            self.frame.add(feature)

    def merge(self, other: FeatureListInfo) -> None:
        """Combine with the same feature list's info from another file."""
        if other.records == 0:
            return
        if self.records == 0:
            self.min_frames, self.max_frames = other.min_frames, other.max_frames
        else:
            self.min_frames = min(self.min_frames, other.min_frames)
            self.max_frames = max(self.max_frames, other.max_frames)
        self.records += other.records
        self.frame.merge(other.frame)

    @property
    def kind(self) -> str:
        """The per-frame kind: ``"bytes"``, ``"float"``, ``"int64"``, ``"mixed"``, ``"empty"``."""
        return self.frame.kind

    @property
    def min_length(self) -> int:
        """Fewest values in one frame."""
        return self.frame.min_length

    @property
    def max_length(self) -> int:
        """Most values in one frame."""
        return self.frame.max_length

    @property
    def fixed_length(self) -> bool:
        """Whether every frame seen holds the same number of values."""
        return self.frame.fixed_length

    def length_text(self) -> str:
        """The per-frame length, e.g. ``"4"`` or ``"1..3"``."""
        return self.frame.length_text()

    def frames_text(self) -> str:
        """The frames per record, e.g. ``"5..40"``."""
        if self.min_frames == self.max_frames:
            return str(self.min_frames)
        return f"{self.min_frames}..{self.max_frames}"

    def to_dict(self) -> dict[str, Any]:
        """The info as a JSON-ready dict: per-frame kind and length, frames per record."""
        data: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "records": self.records,
            "min_frames": self.min_frames,
            "max_frames": self.max_frames,
            "frames": self.frame.records,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "fixed_length": self.fixed_length,
        }
        if self.kind == "bytes":
            data["min_bytes"], data["max_bytes"] = self.frame.min_bytes, self.frame.max_bytes
        return data


@dataclass
class FileInfo:
    """What :func:`inspect` found in one file.

    Attributes:
        path: The file.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        size_bytes: The file size.
        num_records: Records in the file.
        scanned_records: Records whose features were examined (the first ones).
        features: Per feature name (of an Example, or of a SequenceExample's context),
            sorted by name.
        stored: The ``schema.json`` sidecar next to the file, if there is one.
        feature_lists: Per feature list name (of SequenceExample records), sorted by
            name; empty for Example records.
        other_records: Scanned records that are neither an Example nor a SequenceExample
            (a warning names them; the first record may not be one).
        record_format: ``"tfrecord"``, or ``"array_record"`` for an ArrayRecord file.
    """

    path: str
    compression: str
    size_bytes: int
    num_records: int = 0
    scanned_records: int = 0
    features: dict[str, FeatureInfo] = field(default_factory=dict)
    stored: Sidecar | None = None
    feature_lists: dict[str, FeatureListInfo] = field(default_factory=dict)
    other_records: int = 0
    record_format: str = "tfrecord"

    @property
    def record_kind(self) -> str:
        """``"SequenceExample"`` if a scanned record holds feature lists, else ``"Example"``.

        A SequenceExample without feature lists reads as an Example (its context).
        """
        return SEQUENCE_EXAMPLE if self.feature_lists else EXAMPLE

    def schema(self) -> Schema:
        """The schema of the file: the stored one if any, else inferred from the records."""
        if self.stored is not None:
            return self.stored.schema
        records = self.scanned_records - self.other_records
        return schema_from_infos(self.features, records, self.path, self.feature_lists)

    def to_dict(self) -> dict[str, Any]:
        """The info as a JSON-ready dict."""
        read = self.scanned_records - self.other_records
        return {
            "path": self.path,
            "compression": self.compression or "none",
            "size_bytes": self.size_bytes,
            "num_records": self.num_records,
            "scanned_records": self.scanned_records,
            "features": [
                {**info.to_dict(), "optional": info.is_optional(read)}
                for info in self.features.values()
            ],
            "stored_schema": None if self.stored is None else self.stored.schema.to_list(),
            "examples_per_record": 1 if self.stored is None else self.stored.examples_per_record,
            "record_kind": self.record_kind,
            "feature_lists": [info.to_dict() for info in self.feature_lists.values()],
            "other_records": self.other_records,
            "record_format": self.record_format,
        }


def inspect_file(
    path: str,
    compression: str | None,
    max_records: int | None,
    stored: Sidecar | None,
    *,
    count_all: bool = True,
) -> FileInfo:
    """What the records of one file hold: counts, and the features of the first records.

    A TFRecord file's records are read in any compression, an ArrayRecord file's (told by
    its name or its first bytes) with ``array-record``, in batches.

    Args:
        path: The file.
        compression: Its compression, or ``None`` to detect it (none for ArrayRecord).
        max_records: Records whose features are examined (``None`` for all).
        stored: The ``schema.json`` written beside it, if any.
        count_all: Whether to count the records past ``max_records`` too.

    Returns:
        The file's :class:`FileInfo`.
    """
    reading = format_of(path)  # through the record seam
    codec = reading.compression(path) if compression is None else compression
    records, kind = reading.iter_records(path, codec), reading.key or reading.name
    info = FileInfo(path, codec, tf.io.gfile.stat(path).length, stored=stored, record_format=kind)
    first_other: tuple[int, str] | None = None
    for index, record in enumerate(records):
        info.num_records += 1
        if max_records is not None and index >= max_records:
            if not count_all:
                break
            continue
        content = parse_record(record)
        info.scanned_records += 1
        if content.kind == NEITHER:
            if index == 0:  # the file's records are no Examples at all
                raise not_a_proto_error(content, file=path, record=index)
            info.other_records += 1
            first_other = first_other or (index, content.found)
            continue
        for name, feature in content.context.items():
            if name not in info.features:
                info.features[name] = FeatureInfo(name)
            info.features[name].add(feature)
        if content.kind == EXAMPLE:
            continue
        for name, feature_list in content.feature_lists.items():
            if name not in info.feature_lists:
                info.feature_lists[name] = FeatureListInfo(name)
            info.feature_lists[name].add(feature_list)
    if info.num_records == 0:
        raise EmptyFileError(
            f"{reading.name} file {path!r} holds no records; expected at least one.", file=path
        )
    # keep a stable order: the order of first appearance is map order, so sort by name
    info.features = dict(sorted(info.features.items()))
    info.feature_lists = dict(sorted(info.feature_lists.items()))
    _warn_unread(info, first_other)
    return info


def _warn_unread(info: FileInfo, first_other: tuple[int, str] | None) -> None:
    """Log what the scanned records of ``info`` hold that a reader will not return."""
    if first_other is not None:
        logger.warning(
            "File %r: %d of the %d records scanned are neither a tf.train.Example nor a "
            "tf.train.SequenceExample, so nothing of them is read (the first is record "
            "%d: %s).",
            info.path,
            info.other_records,
            info.scanned_records,
            *first_other,
        )
    if info.stored is not None:
        left_out = [n for n in info.feature_lists if n not in info.stored.schema]
        if left_out:
            logger.warning(
                "File %r holds the feature lists %s, which its schema.json leaves out: "
                "the reader will not return them.",
                info.path,
                left_out,
            )


def schema_from_infos(
    infos: dict[str, FeatureInfo],
    records: int,
    source: str,
    lists: dict[str, FeatureListInfo] | None = None,
) -> Schema:
    """The schema of features seen in ``records`` records of ``source`` (a name for errors)."""
    features = [_inferred(info, source, info.records == records) for info in infos.values()]
    for name, list_info in (lists or {}).items():
        if name in infos:
            raise SchemaMismatchError(
                f"Feature {name!r} in {source} cannot be read: expected a context feature "
                "or a feature list; found both under that name.",
                file=source,
                feature=name,
            )
        features.append(_inferred(list_info.frame, source, True, sequence=True))
    return Schema(features)


def _inferred(info: FeatureInfo, source: str, in_all: bool, *, sequence: bool = False) -> Feature:
    """The feature read from what the records hold (per frame for a feature list)."""
    if info.kind == "mixed":
        what = "feature list" if sequence else "feature"
        raise SchemaMismatchError(
            f"{what.capitalize()} {info.name!r} in {source} cannot be read as one tensor: "
            f"expected one kind of value list; found bytes, float and/or int64 lists in "
            f"different {'frames' if sequence else 'records'}.",
            file=source,
            feature=info.name,
        )
    kind = "bytes" if info.kind == "empty" else info.kind
    if in_all and info.records > 0 and info.fixed_length and info.min_length > 0:
        shape: tuple[int | None, ...] = () if info.min_length == 1 else (info.min_length,)
    else:
        shape = (None,)
    return Feature(info.name, _KIND_DTYPES[kind], shape, kind, sequence=sequence)


def infer_from_records(
    paths: list[str], compression: str | None, max_records: int | None = 1000
) -> Schema:
    """The schema the first ``max_records`` records of each of ``paths`` hold.

    What :func:`~tfr_hooks.tfrecord.inspection.describe.infer_schema` does when no
    ``schema.json`` was written beside the files (see there for the rules).
    """
    codec = check_compression(compression)
    # only the records examined are read: num_records stays a lower bound here
    infos = [inspect_file(path, codec, max_records, None, count_all=False) for path in paths]
    merged: dict[str, FeatureInfo] = {}
    lists: dict[str, FeatureListInfo] = {}
    scanned = 0
    for info in infos:
        scanned += info.scanned_records - info.other_records
        for name, feature in info.features.items():
            merged.setdefault(name, FeatureInfo(name)).merge(feature)
        for name, feature_list in info.feature_lists.items():
            lists.setdefault(name, FeatureListInfo(name)).merge(feature_list)
    source = paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]!r}, ...)"
    return schema_from_infos(
        dict(sorted(merged.items())), scanned, source, dict(sorted(lists.items()))
    )
