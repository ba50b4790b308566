"""What a reader reads: the files, their compression and the schema, checked up front.

:func:`make_plan` resolves the files (paths, directories, globs), their compression and
the schema (given, stored in ``schema.json`` or inferred), and checks the first record of
every file against it before any pipeline is built; the :class:`Plan` it returns is what
both readers (:func:`~tfr_hooks.tfrecord.dataset` and
:func:`~tfr_hooks.tfrecord.read_batches`) build from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from tensorflow.core.example import example_pb2

from tfr_hooks.tfrecord.damage import DamageMap, scan_damage
from tfr_hooks.tfrecord.errors import MissingFeatureError
from tfr_hooks.tfrecord.files import (
    Files,
    check_compression,
    check_framing,
    detect_compression,
    first_record,
    guess_compression,
    iter_records,
    resolve_files,
)
from tfr_hooks.tfrecord.inspection import infer_schema
from tfr_hooks.tfrecord.packed import check_block
from tfr_hooks.tfrecord.records import as_record_content
from tfr_hooks.tfrecord.schema import Schema
from tfr_hooks.tfrecord.sidecar import Sidecar, check_written_size, find_sidecar, load_schema
from tfr_hooks.tfrecord.tfds_dir import TfdsDir, find_tfds_dir, tfds_plan_parts

__all__ = ["Plan", "SchemaLike", "make_plan"]

logger = logging.getLogger(__name__)

SchemaLike = Union[Schema, str, "os.PathLike[str]", None]


@dataclass
class Plan:
    """The files a reader reads, their compression, and the schema they are parsed with."""

    files: list[str]
    compression: str
    schema: Schema  # the features parsed
    names: tuple[str, ...] | None  # as_tuple
    counts: list[int | None] = field(default_factory=list)  # examples per file, if known
    per_record: int = 1  # examples per record (packed shards)
    damage: DamageMap | None = None  # max_corrupt_records > 0: what the scan found

    @property
    def examples(self) -> int | None:
        """Examples in one pass over the files, if every file's count is known."""
        if not self.counts or any(c is None for c in self.counts):
            return None
        return sum(c for c in self.counts if c is not None)


def _check_as_tuple(as_tuple: object) -> tuple[str, ...] | None:
    if as_tuple is None:
        return None
    if (
        isinstance(as_tuple, (str, bytes))
        or not isinstance(as_tuple, Sequence)
        or not as_tuple
        or not all(isinstance(name, str) for name in as_tuple)
    ):
        raise TypeError(
            "Expected `as_tuple` to be None or a sequence of feature names such as "
            f"('x', 'y'). Received: as_tuple={as_tuple!r}"
        )
    return tuple(as_tuple)


def _resolve_compression(
    paths: list[str], compression: str | None, detect: Callable[[str], str] = detect_compression
) -> str:
    codec = check_compression(compression)
    if codec is not None:
        return codec
    found = {path: detect(path) for path in paths}
    kinds = sorted(set(found.values()))
    if len(kinds) > 1:
        examples = {k or "none": next(p for p, c in found.items() if c == k) for k in kinds}
        raise ValueError(
            "Expected all files to use the same compression; pass `compression` to force "
            f"one. Received: compressions={examples}"
        )
    return kinds[0]


def make_plan(
    files: Files,
    schema: SchemaLike,
    compression: str | None,
    as_tuple: object,
    *,
    select: bool,
    decode: Mapping[str, Any] | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
) -> Plan:
    """Resolve files, compression and schema, and check them before any graph is built.

    With ``max_corrupt_records`` above 0, every file is scanned for damaged records first
    (:mod:`tfr_hooks.tfrecord.damage`): the schema is then inferred from whole records
    (:meth:`~tfr_hooks.tfrecord.damage.DamageMap.inference`), the checks below read each file's
    first whole record, and the counts are the whole records found.

    A TensorFlow Datasets directory (:mod:`~tfr_hooks.tfrecord.tfds_dir`) brings its
    split's files, counts and schema; ``split`` goes only with one.
    """
    tfds = find_tfds_dir(files, split)
    if tfds is not None:
        parts = (schema, compression, as_tuple, select, decode)
        return _tfds_plan(tfds, split, *parts, max_corrupt_records=max_corrupt_records)
    names = _check_as_tuple(as_tuple)
    _check_decode(decode)
    paths = resolve_files(files)
    # a damaged first record is no reason to fail before the scan, which skips it
    detect = guess_compression if max_corrupt_records else detect_compression
    codec = _resolve_compression(paths, compression, detect)
    damage = scan_damage(paths, codec, max_corrupt_records) if max_corrupt_records else None
    if schema is None and damage is not None:  # from records that are whole
        among, max_records = damage.inference(paths, 1000)
        chosen = infer_schema(among, compression=codec, max_records=max_records)
    elif schema is None:
        chosen = infer_schema(paths, compression=codec)
    elif isinstance(schema, Schema):
        chosen = schema
    elif isinstance(schema, (str, os.PathLike)):
        chosen = load_schema(schema)
    else:
        raise TypeError(
            "Expected `schema` to be None (stored or inferred), a tfrecord.Schema or the "
            f"path of a schema.json. Received: schema={schema!r}"
        )
    if decode:
        chosen = chosen.replace(**decode)
    if select:  # with a map_fn, as_tuple names its outputs
        chosen = _selected(chosen, names)
    sidecars: dict[str, Sidecar | None] = {}
    lists = _FeatureLists(chosen)
    counts: list[int | None] = []
    packing: dict[str, int] = {}
    for path in paths:
        sidecar = find_sidecar(path, sidecars)
        per_record = 1
        if sidecar is not None:
            if damage is None:
                check_written_size(path, sidecar)
            if schema is not None or decode:
                chosen = chosen.with_stored_encodings(sidecar.schema)
                chosen.check_compatible(sidecar.schema, source=f"the schema stored for {path!r}")
            per_record = sidecar.examples_per_record
            counts.append(sidecar.examples_of(os.path.basename(path)))
        else:  # TensorFlow would stop silently at a record header cut short
            if damage is None:  # the scan found it
                check_framing(path, codec)
            counts.append(None)
        packing[path] = per_record
        if damage is None:
            record = first_record(path, codec)
        else:  # the whole records (a packed file's last block may be partial: unknown)
            scanned = damage.of(path)
            if per_record == 1 or scanned.damaged:
                counts[-1] = scanned.records if per_record == 1 else None
            if scanned.first is None:
                continue
            record = scanned.first
        if per_record > 1:
            check_block(chosen, _as_example(record), per_record, file=path, record=0)
        else:  # the bytes: a record that is no proto is an error saying what it holds
            chosen.check_example(record, file=path, record=0, warn=False)
            chosen.warn_unread(record, file=path, record=0, absent=False)
            lists.scan(path, codec, record)
    lists.check()
    if len(set(packing.values())) > 1:
        found = {n: next(p for p, k in packing.items() if k == n) for n in sorted(packing.values())}
        raise ValueError(
            "Expected all files to store the same number of examples per record (see "
            f"schema.json). Received files with different packings: {found}"
        )
    return Plan(paths, codec, chosen, names, counts, next(iter(packing.values())), damage)


def _tfds_plan(
    tfds: TfdsDir,
    split: str | None,
    schema: SchemaLike,
    compression: str | None,
    as_tuple: object,
    select: bool,
    decode: Mapping[str, Any] | None,
    *,
    max_corrupt_records: int = 0,
) -> Plan:
    """The plan of a split of a TFDS directory: its shards, exact counts and schema.

    With ``max_corrupt_records`` above 0 its shards are scanned as other files are, and
    the counts are the whole records found.
    """
    chosen, codec, tfds_schema, as_tuple = tfds_plan_parts(
        tfds, split, schema, compression, as_tuple, decode
    )
    names = _check_as_tuple(as_tuple)
    read = _selected(tfds_schema, names) if select else tfds_schema
    paths = list(chosen.files)
    counts: list[int | None] = list(chosen.counts)
    damage = None
    if max_corrupt_records:
        damage = scan_damage(paths, codec, max_corrupt_records)
        counts = [damage.of(path).records for path in paths]
    return Plan(paths, codec, read, names, counts, damage=damage)


def _selected(schema: Schema, names: tuple[str, ...] | None) -> Schema:
    """``schema``'s features that ``as_tuple`` names (all of them without names)."""
    if names is None:
        return schema
    missing = [name for name in names if name not in schema]
    if missing:
        raise ValueError(
            f"Expected the names in `as_tuple` to be features of the schema "
            f"{schema.names}. Received: as_tuple={names!r}"
        )
    return schema.select(names)


#: records of a file read, at most, to find a feature list of the schema its first lacks
LIST_SCAN_RECORDS = 1000


class _FeatureLists:
    """Which files hold the feature lists a schema declares, found by reading records.

    Writers often leave out the key of an empty feature list, so a record without one is
    no error, and a file's first record may lack a list that later records hold: a file
    is read on (up to :data:`LIST_SCAN_RECORDS` records) until every declared list is
    found. A list no record of any file holds is an error (a misspelled name, or files of
    another producer); one that some files hold and others do not is a warning naming the
    files without it, whose records read as 0 frames of it.
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.declared = [f.name for f in schema.sequence_features]
        self.held: set[str] = set()
        self.lacking: dict[str, list[tuple[str, int, bool]]] = {}  # name: (file, read, whole)

    def scan(self, path: str, codec: str, first: bytes) -> None:
        """Find the declared lists in ``path``, from its first record on."""
        wanted = set(self.declared) - set(as_record_content(first).feature_lists)
        self.held.update(set(self.declared) - wanted)
        if not wanted:
            return
        read, whole = 0, True
        for read, record in enumerate(iter_records(path, codec), start=1):
            found = wanted & set(as_record_content(record).feature_lists)
            self.held.update(found)
            wanted -= found
            if not wanted:
                return
            if read >= LIST_SCAN_RECORDS:
                whole = False
                break
        for name in sorted(wanted):
            self.lacking.setdefault(name, []).append((path, read, whole))

    def check(self) -> None:
        """Raise for a list no file holds; warn of the files that lack one some hold."""
        for name in self.declared:
            files = self.lacking.get(name, [])
            if not files:
                continue
            path, read, whole = files[0]
            records = f"all {read} records" if whole else f"the first {read} records"
            others = f" (and from {len(files) - 1} other files)" if files[1:] else ""
            if name not in self.held:
                raise MissingFeatureError(
                    f"Feature list {name!r} of the schema is missing from file {path!r}"
                    f"{others}: expected some records to hold it; {records} read lack it. "
                    "Check its name with `tfr-hooks inspect`, or leave it out of the schema.",
                    file=path,
                    feature=name,
                )
            logger.warning(
                "Feature list %r is missing from %s of file %r%s, though other files hold "
                "it: those records read as 0 frames of it.",
                name,
                records,
                path,
                others,
            )


def _as_example(record: bytes) -> example_pb2.Example:
    example = example_pb2.Example()
    example.ParseFromString(record)
    return example


def _check_decode(decode: object) -> None:
    if decode is None:
        return
    if not isinstance(decode, Mapping) or not all(isinstance(k, str) for k in decode):
        raise TypeError(
            "Expected `decode` to be None or a dict of feature name -> change, such as "
            "{'image_raw': ('uint8', (28, 28, 1))} (see Schema.replace). "
            f"Received: decode={decode!r}"
        )
