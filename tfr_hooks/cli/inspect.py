"""``tfr-hooks inspect``: the records, compression and features of TFRecord (or ArrayRecord) files.

Usage::

    tfr-hooks inspect FILE_OR_DIR_OR_GLOB... [--json] [--max-records N] [--split SPLIT]

It asks the source of the files (:mod:`tfr_hooks.tfrecord.sources`): one that gives an
overview of itself (a TensorFlow Datasets directory: splits, counts, features, label
names) is printed as such; other files get a table each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from tfr_hooks.cli.common import COMPRESSION_CHOICES, add_split, print_table, shape_text

__all__ = ["NAME", "add_parser", "check", "run"]

#: The sub-command's name.
NAME = "inspect"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``inspect`` sub-command and its flags."""
    inspect = commands.add_parser(
        "inspect",
        help="show the record count and features of TFRecord files",
        description="Show the record count, compression and features (kind, length, "
        "dtype, shape) of TFRecord files written by any tool.",
    )
    inspect.add_argument("files", nargs="+", metavar="FILE", help="files, directories or globs")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inspect.add_argument(
        "--max-records",
        type=int,
        default=None,
        metavar="N",
        help="examine the features of the first N records of each file (all are counted)",
    )
    inspect.add_argument(
        "--compression",
        choices=COMPRESSION_CHOICES,
        default=None,
        help="default: detected per file",
    )
    add_split(inspect)


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse flags out of range (``parser.error``: status 2)."""
    if args.max_records is not None and args.max_records < 1:
        parser.error(f"--max-records must be a positive integer, not {args.max_records}")


def run(args: argparse.Namespace) -> int:
    """Print what the files hold: the source's own overview, or each file's table."""
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.sources.base import open_source

    source = open_source(args.files[0] if len(args.files) == 1 else args.files, args.split)
    overview = source.to_dict() if args.json else source.describe()
    if overview is not None:  # e.g. a TensorFlow Datasets directory: splits and features
        print(json.dumps(overview, indent=2) if args.json else overview)
        return 0
    paths = source.files
    # per file: its FileInfo, or the error that kept it from being read
    results: list[tuple[str, Any, Exception | None]] = []
    for path in paths:
        try:
            infos = tfrecord.inspect(
                path, compression=args.compression, max_records=args.max_records
            )
            results.append((path, infos[0], None))
        except (tfrecord.TFRecordError, ImportError) as error:  # ImportError: an extra
            results.append((path, None, error))
    if args.json:
        items = [
            info.to_dict() if failure is None else {"path": path, "error": str(failure)}
            for path, info, failure in results
        ]
        print(json.dumps(items, indent=2))
    else:
        # the files that could not be read are reported once, on stderr, below
        readable = [info for _, info, failure in results if failure is None]
        for number, info in enumerate(readable):
            if number:
                print()
            _print_file(info, sys.stdout)
        if len(results) > 1:
            total = sum(info.num_records for info in readable)
            print(f"\nTotal: {total} records in {len(readable)} readable file(s) of {len(results)}")
    failures = [failure for _, _, failure in results if failure is not None]
    for failure in failures:
        print(f"tfr-hooks inspect: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _spec_shape_text(spec: Any, found: Any, scanned: int) -> str:
    """The shape column: ``optional`` for a 0..1 feature read as varying (give a default)."""
    if spec.varying and found is not None and found.is_optional(scanned):
        return "optional"
    if spec.optional:
        return shape_text(spec.shape) + " optional"
    return shape_text(spec.shape)


def _size_text(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # unreachable


def _print_file(info: Any, out: TextIO) -> None:
    from tfr_hooks import tfrecord

    scanned = (
        ""
        if info.scanned_records == info.num_records
        else f" (features from the first {info.scanned_records})"
    )
    print(info.path, file=out)
    framing = (
        "format: ArrayRecord"
        if info.record_format == "array_record"
        else f"compression: {info.compression or 'none'}"
    )
    print(
        f"  records: {info.num_records}{scanned}   {framing}   size: {_size_text(info.size_bytes)}",
        file=out,
    )
    try:
        schema = info.schema()
        origin = "stored in schema.json" if info.stored is not None else "inferred"
    except tfrecord.TFRecordError as error:
        schema, origin = None, f"none: {error}"
    print(f"  schema: {origin}", file=out)
    packing = info.stored.examples_per_record if info.stored is not None else 1
    if packing > 1:
        examples = info.stored.examples_of(os.path.basename(info.path))
        print(
            f"  packed: {packing} examples per record ({examples} examples); each feature "
            f"holds a block of up to {packing} examples' values",
            file=out,
        )
    if info.feature_lists:
        print(
            f"  record kind: tf.train.SequenceExample ({len(info.features)} context feature(s), "
            f"{len(info.feature_lists)} feature list(s))",
            file=out,
        )
    if info.other_records:
        print(
            f"  not read: {info.other_records} record(s) are neither a tf.train.Example nor "
            "a tf.train.SequenceExample",
            file=out,
        )
    rows = _feature_rows(info, schema)
    if rows:
        print_table(
            ["feature", "kind", "length", "bytes", "dtype", "shape", "in records"], rows, out
        )
    elif not info.feature_lists:
        print("  (no features)", file=out)
    if info.feature_lists:
        header = ["feature list", "kind", "length", "bytes", "frames", "dtype", "shape"]
        print_table([*header, "in records"], _feature_list_rows(info, schema), out)


def _feature_rows(info: Any, schema: Any) -> list[list[str]]:
    """The rows of the context features (an Example's features) of ``_print_file``."""
    rows = []
    names = list(info.features)
    if schema is not None:
        names += [f.name for f in schema.context_features if f.name not in info.features]
    for name in names:
        found = info.features.get(name)
        spec = schema[name] if schema is not None and name in schema else None
        rows.append(
            [
                name,
                found.kind if found else "absent",
                found.length_text() if found else "-",
                _bytes_text(found) if found else "",
                spec.dtype if spec else "?",
                _spec_shape_text(spec, found, info.scanned_records) if spec else "?",
                f"{found.records}/{info.scanned_records}" if found else "0",
            ]
        )
    return rows


def _feature_list_rows(info: Any, schema: Any) -> list[list[str]]:
    """The rows of the feature lists: per-frame kind, length and bytes, frames per record."""
    rows = []
    for name, found in info.feature_lists.items():
        spec = schema[name] if schema is not None and name in schema else None
        if spec is not None and not spec.sequence:
            spec = None  # read as a context feature: it fails the reader's check
        rows.append(
            [
                name,
                found.kind,
                found.length_text(),
                _bytes_text(found.frame),
                found.frames_text(),
                spec.dtype if spec else "?",
                shape_text(spec.shape) if spec else "not read",
                f"{found.records}/{info.scanned_records}",
            ]
        )
    return rows


def _bytes_text(found: Any) -> str:
    if found.kind != "bytes":
        return ""
    if found.min_bytes == found.max_bytes:
        return str(found.min_bytes)
    return f"{found.min_bytes}..{found.max_bytes}"
