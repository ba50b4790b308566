"""Inferring what TFRecord files hold, whoever wrote them.

:func:`inspect` reads each file's records (in any compression) and reports the record
count and, per feature, its kind (``bytes``/``float``/``int64``), how many records hold
it and how long its value lists are. :func:`infer_schema` turns that into a
:class:`~tfr_hooks.tfrecord.schema.Schema` the readers can use, preferring the
``schema.json`` sidecar when the files were written by this package.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.checks import check_optional_positive_int
from tfr_hooks.tfrecord.errors import CorruptRecordError, EmptyFileError, SchemaMismatchError
from tfr_hooks.tfrecord.files import (
    Files,
    check_compression,
    detect_compression,
    iter_records,
    resolve_files,
)
from tfr_hooks.tfrecord.schema import Feature, Schema
from tfr_hooks.tfrecord.sidecar import Sidecar, find_sidecar

__all__ = ["FeatureInfo", "FileInfo", "inspect", "infer_schema"]

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
class FileInfo:
    """What :func:`inspect` found in one file.

    Attributes:
        path: The file.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        size_bytes: The file size.
        num_records: Records in the file.
        scanned_records: Records whose features were examined (the first ones).
        features: Per feature name, in order of first appearance.
        stored: The ``schema.json`` sidecar next to the file, if there is one.
    """

    path: str
    compression: str
    size_bytes: int
    num_records: int = 0
    scanned_records: int = 0
    features: dict[str, FeatureInfo] = field(default_factory=dict)
    stored: Sidecar | None = None

    def schema(self) -> Schema:
        """The schema of the file: the stored one if any, else inferred from the records."""
        if self.stored is not None:
            return self.stored.schema
        return _schema_from_infos(self.features, self.scanned_records, self.path)

    def to_dict(self) -> dict[str, Any]:
        """The info as a JSON-ready dict."""
        return {
            "path": self.path,
            "compression": self.compression or "none",
            "size_bytes": self.size_bytes,
            "num_records": self.num_records,
            "scanned_records": self.scanned_records,
            "features": [
                {**info.to_dict(), "optional": info.is_optional(self.scanned_records)}
                for info in self.features.values()
            ],
            "stored_schema": None if self.stored is None else self.stored.schema.to_list(),
            "examples_per_record": 1 if self.stored is None else self.stored.examples_per_record,
        }


def _inspect_file(
    path: str, compression: str | None, max_records: int | None, *, count_all: bool = True
) -> FileInfo:
    codec = detect_compression(path) if compression is None else compression
    info = FileInfo(path, codec, tf.io.gfile.stat(path).length, stored=find_sidecar(path))
    example = example_pb2.Example()
    for index, record in enumerate(iter_records(path, codec)):
        info.num_records += 1
        if max_records is not None and index >= max_records:
            if not count_all:
                break
            continue
        try:
            example.ParseFromString(record)
        except Exception as error:
            raise CorruptRecordError(
                f"Record {index} of file {path!r} is not a tf.train.Example: expected a "
                f"serialized tf.train.Example; found {len(record)} bytes that do not parse "
                f"({error}).",
                file=path,
                record=index,
            ) from error
        info.scanned_records += 1
        for name, feature in example.features.feature.items():
            if name not in info.features:
                info.features[name] = FeatureInfo(name)
            info.features[name].add(feature)
    if info.num_records == 0:
        raise EmptyFileError(
            f"TFRecord file {path!r} holds no records; expected at least one.", file=path
        )
    # keep a stable order: the order of first appearance is map order, so sort by name
    info.features = dict(sorted(info.features.items()))
    return info


def inspect(
    files: Files, *, compression: str | None = None, max_records: int | None = None
) -> list[FileInfo]:
    """Report what TFRecord files hold: record counts, feature names, kinds and lengths.

    Works on files written by any tool, uncompressed or compressed (detected per file).

    Args:
        files: Paths, directories or glob patterns.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        max_records: Examine the features of at most this many records per file (all
            records are still counted); ``None`` for all.

    Returns:
        One :class:`FileInfo` per file.

    Raises:
        NoFilesError: If nothing matches, or a file is missing.
        EmptyFileError: If a file holds no records.
        NotTFRecordError: If a file is not a TFRecord file.
        CorruptRecordError: If a record is damaged or not a ``tf.train.Example``.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> info = tfrecord.inspect("data/train-*.tfrecord")[0]  # doctest: +SKIP
        >>> info.num_records, info.features["label"].kind  # doctest: +SKIP
        (1000, 'int64')
    """
    codec = check_compression(compression)
    check_optional_positive_int(max_records, "max_records")
    return [_inspect_file(path, codec, max_records) for path in resolve_files(files)]


def _schema_from_infos(infos: dict[str, FeatureInfo], records: int, source: str) -> Schema:
    features = []
    for name, info in infos.items():
        if info.kind == "mixed":
            raise SchemaMismatchError(
                f"Feature {name!r} in {source} cannot be read as one tensor: expected one "
                "kind of value list; found bytes, float and/or int64 lists in different "
                "records.",
                file=source,
                feature=name,
            )
        kind = "bytes" if info.kind == "empty" else info.kind
        if info.records == records and info.fixed_length and info.min_length > 0:
            shape: tuple[int | None, ...] = () if info.min_length == 1 else (info.min_length,)
        else:
            shape = (None,)
        features.append(Feature(name, _KIND_DTYPES[kind], shape, kind))
    return Schema(features)


def infer_schema(
    files: Files, *, compression: str | None = None, max_records: int | None = 1000
) -> Schema:
    """The schema to read ``files`` with: stored in ``schema.json``, or inferred.

    When the files were written by :func:`~tfr_hooks.tfrecord.write`, the sidecar gives
    the exact dtypes and shapes. Otherwise the first ``max_records`` records of each file
    are examined: a feature with the same number of values in all of them gets a fixed
    shape (``()`` for one value), any other a varying length (read as ragged), also one
    that some records lack, whichever records they are (an empty row where it is
    missing; give it a default to read it dense); int64 lists read as ``int64``, float
    lists as ``float32``, bytes lists as ``tf.string``.

    Args:
        files: Paths, directories or glob patterns.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        max_records: Records examined per file when there is no sidecar.

    Returns:
        The schema.

    Raises:
        SchemaMismatchError: If a feature holds different kinds of lists in different
            records, or the files disagree.
        TFRecordError: Any error of :func:`inspect`.
    """
    paths = resolve_files(files)
    sidecar = find_sidecar(paths[0])
    if sidecar is not None:
        return sidecar.schema
    codec = check_compression(compression)
    # only the records examined are read: num_records stays a lower bound here
    infos = [_inspect_file(path, codec, max_records, count_all=False) for path in paths]
    merged: dict[str, FeatureInfo] = {}
    scanned = 0
    for info in infos:
        scanned += info.scanned_records
        for name, feature in info.features.items():
            merged.setdefault(name, FeatureInfo(name)).merge(feature)
    source = paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]!r}, ...)"
    return _schema_from_infos(dict(sorted(merged.items())), scanned, source)
