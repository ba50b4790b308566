"""Plain TFRecord files as a source: paths, directories and globs, from any writer.

The files' compression is detected (one for all), their schema given, loaded from a
``schema.json`` path or inferred from their records, and every file's first record is
checked against it before a pipeline is built. Their example counts are unknown until
read. A directory stands for every file in it that is not hidden and not JSON, unless
another source owns it (see :func:`~tfr_hooks.tfrecord.sources.base.list_directory`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.tfrecord.errors import MissingFeatureError
from tfr_hooks.tfrecord.formats.framing import check_compression
from tfr_hooks.tfrecord.formats.index import is_index_file
from tfr_hooks.tfrecord.formats.packed import check_block
from tfr_hooks.tfrecord.formats.reading import files_format, format_of
from tfr_hooks.tfrecord.schema.records import as_record_content
from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.schema.sidecar import load_schema
from tfr_hooks.tfrecord.sources.base import Checked, RecordSource, SchemaLike
from tfr_hooks.tfrecord.sources.scan import infer_from_records

__all__ = ["LIST_SCAN_RECORDS", "FeatureLists", "FileSource", "one_compression"]

logger = logging.getLogger(__name__)

#: records of a file read, at most, to find a feature list of the schema its first lacks
LIST_SCAN_RECORDS = 1000
#: records of each file examined to infer a schema from the whole records of damaged files
INFER_RECORDS = 1000


class FileSource(RecordSource):
    """TFRecord files written by any tool: detected compression, given or inferred schema."""

    def __init__(self, paths: list[str]) -> None:
        self.files = list(paths)

    @classmethod
    def open(
        cls, files: Any, split: str | None, paths: Callable[[], list[str]]
    ) -> RecordSource | None:
        """Any files: the last source the dispatcher asks."""
        del files, split
        return cls(paths())

    @classmethod
    def list_directory(cls, directory: str) -> list[str] | None:
        """Every file of ``directory`` that is not hidden, not JSON and no directory.

        Nor a record index kept beside its file (``FILE.tfrindex``) or its lock
        (``FILE.tfrindex.lock``), which another worker may be writing meanwhile.
        """
        names = sorted(
            name
            for name in tf.io.gfile.listdir(directory)
            if not name.startswith((".", "_"))
            and not name.endswith(".json")
            and not is_index_file(name)
            and not tf.io.gfile.isdir(os.path.join(directory, name))
        )
        return [os.path.join(directory, name) for name in names]

    def compression(self, given: str | None, *, tolerant: bool) -> str:
        """The files' one compression; a damaged first record is guessed past if ``tolerant``."""
        return one_compression(
            self.files,
            given,
            lambda path: format_of(path).compression(path, tolerant=tolerant),
        )

    def schema(
        self, given: SchemaLike, decode: Mapping[str, Any] | None, compression: str
    ) -> Schema:
        """``given``, loaded from its path, or inferred (from whole records when damaged)."""
        damage = self.damage
        stored = self.sidecar(self.files[0]) if given is None else None
        if stored is not None:  # written beside the files: exact dtypes and shapes
            chosen = stored.schema
        elif given is None and damage is not None:  # from records that are whole
            among, max_records = damage.inference(self.files, INFER_RECORDS)
            chosen = infer_from_records(among, compression, max_records)
        elif given is None:
            chosen = infer_from_records(self.files, compression)
        elif isinstance(given, Schema):
            chosen = given
        elif isinstance(given, (str, os.PathLike)):
            chosen = load_schema(given)
        else:
            raise TypeError(
                "Expected `schema` to be None (stored or inferred), a tfrecord.Schema or the "
                f"path of a schema.json. Received: schema={given!r}"
            )
        return chosen.replace(**decode) if decode else chosen

    def file_facts(
        self,
        path: str,
        schema: Schema,
        compression: str,
        *,
        given: bool,
    ) -> tuple[Schema, int | None, int]:
        """What is known of ``path`` before its first record: schema, examples, packing.

        A plain file's examples are unknown; TensorFlow would stop silently at a record
        header cut short, so its framing is checked (the scan for damage finds it too).
        """
        del given
        if self.damage is None:
            format_of(path).check(path, compression)
        return schema, None, 1

    def check(self, schema: Schema, compression: str, *, given: bool) -> Checked:
        """Check every file's first whole record (and find the feature lists declared)."""
        damage = self.damage
        lists = FeatureLists(schema)
        counts: list[int | None] = []
        packing: dict[str, int] = {}
        reading = files_format(self.files)
        for path in self.files:
            schema, count, per_record = self.file_facts(path, schema, compression, given=given)
            counts.append(count)
            packing[path] = per_record
            if damage is None:
                record = reading.first_record(path, compression)
            else:  # the whole records (a packed file's last block may be partial: unknown)
                scanned = damage.of(path)
                if per_record == 1 or scanned.damaged:
                    counts[-1] = scanned.records if per_record == 1 else None
                if scanned.first is None:
                    continue
                record = scanned.first
            if per_record > 1:
                example = example_pb2.Example()
                example.ParseFromString(record)
                check_block(schema, example, per_record, file=path, record=0)
            else:  # the bytes: a record that is no proto is an error saying what it holds
                schema.check_example(record, file=path, record=0, warn=False)
                schema.warn_unread(record, file=path, record=0, absent=False)
                lists.scan(path, compression, record)
        lists.check()
        if len(set(packing.values())) > 1:
            found = {
                n: next(p for p, k in packing.items() if k == n) for n in sorted(packing.values())
            }
            raise ValueError(
                "Expected all files to store the same number of examples per record (see "
                f"schema.json). Received files with different packings: {found}"
            )
        return schema, counts, next(iter(packing.values()))


def one_compression(
    paths: list[str], compression: str | None, detect: Callable[[str], str] | None = None
) -> str:
    """``compression`` checked, or the one compression ``detect`` finds in all ``paths``."""
    codec = check_compression(compression)
    if codec is not None:
        return codec
    if detect is None:
        detect = lambda path: format_of(path).compression(path)  # noqa: E731
    found = {path: detect(path) for path in paths}
    kinds = sorted(set(found.values()))
    if len(kinds) > 1:
        examples = {k or "none": next(p for p, c in found.items() if c == k) for k in kinds}
        raise ValueError(
            "Expected all files to use the same compression; pass `compression` to force "
            f"one. Received: compressions={examples}"
        )
    return kinds[0]


class FeatureLists:
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
        for read, record in enumerate(format_of(path).iter_records(path, codec), start=1):
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
