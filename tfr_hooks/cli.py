"""The ``tfr-hooks`` command: convert ``.npz`` or any TFRecord files to shards, inspect any file.

Usage::

    tfr-hooks convert INPUT.npz OUTDIR --shards 4 [--compression gzip|zlib]
        [--examples-per-record N]
    tfr-hooks convert FILE_OR_DIR_OR_GLOB... OUTDIR [--decode NAME=DTYPE:SHAPE]...
        [--shards N] [--compression gzip|zlib] [--examples-per-record N]
    tfr-hooks inspect FILE_OR_DIR_OR_GLOB... [--json] [--max-records N]
    tfr-hooks measure FILE_OR_DIR_OR_GLOB... --batch-size N [--json] [--batches N]
        [--memory-budget BYTES]
    tfr-hooks data-service dispatcher --port PORT [--work-dir DIR]
    tfr-hooks data-service worker --dispatcher HOST:PORT [--port PORT]
        [--worker-address HOST] [--wait-timeout SECONDS]

Only the standard library is imported at module level: :func:`main` imports TensorFlow
through :func:`tfr_hooks.quiet.import_tensorflow`, which drops its start-up notices
(``TF_CPP_MIN_LOG_LEVEL=2`` unless already set, and the lines printed before that is
read) and keeps everything else, errors included.
Run it as ``tfr-hooks`` or ``python -m tfr_hooks.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["main", "build_parser"]

_COMPRESSION_CHOICES = ("none", "gzip", "zlib")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tfr-hooks`` command."""
    parser = argparse.ArgumentParser(
        prog="tfr-hooks",
        description="Convert .npz arrays or TFRecord files written by any tool to TFRecord "
        "shards with a stored schema, inspect TFRecord files written by any tool, and "
        "measure how fast this machine reads them through each pipeline, build their "
        "record index ahead of time, and run the servers of the tf.data service "
        "(data-service).",
    )
    from tfr_hooks.service.command import add_data_service  # the standard library only

    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_convert(commands)
    _add_inspect(commands)
    _add_measure(commands)
    _add_index(commands)
    add_data_service(commands)
    return parser


def _add_index(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``tfr-hooks index FILES...``: build the record indexes ahead of time."""
    index = commands.add_parser(
        "index",
        help="build the record index of TFRecord files ahead of time",
        description="Build the record index of each file (one offset a block of records, "
        "for shuffle='global' and resuming by position): beside the file, or in the "
        "cache directory when its directory is read-only ($TFR_HOOKS_INDEX_DIR, else "
        "$XDG_CACHE_HOME/tfr_hooks/index). An index that matches its file is kept.",
    )
    index.add_argument("files", nargs="+", metavar="FILES", help="files, globs or directories")
    index.add_argument("--rebuild", action="store_true", help="build even a matching index")


def _add_convert(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``convert`` sub-command and its flags."""
    convert = commands.add_parser(
        "convert",
        help="turn an .npz file or TFRecord files into shards with a stored schema",
        description="Turn the arrays of an .npz file (sharing their first dimension), or "
        "the tf.train.Example records of TFRecord files written by any tool (compression "
        "detected per file, schema inferred), into tf.train.Example records in OUTDIR, "
        "with the schema in OUTDIR/schema.json. One INPUT ending in .npz is read as "
        "arrays; anything else as TFRecord files, directories or globs.",
    )
    convert.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="one .npz file, or TFRecord files, directories or globs",
    )
    convert.add_argument("outdir", metavar="OUTDIR", help="output directory (created)")
    convert.add_argument("--shards", type=int, default=1, help="number of files (default 1)")
    convert.add_argument(
        "--compression", choices=_COMPRESSION_CHOICES, default="none", help="default: none"
    )
    convert.add_argument("--prefix", default="data", help="shard file name prefix")
    convert.add_argument(
        "--decode",
        action="append",
        default=[],
        metavar="NAME=DTYPE:SHAPE",
        help="read feature NAME as DTYPE of SHAPE (comma-separated, empty for a scalar), "
        "e.g. image_raw=uint8:28,28,1 for raw bytes; repeatable (TFRecord input only)",
    )
    convert.add_argument(
        "--examples-per-record",
        type=int,
        default=1,
        metavar="N",
        help="pack N examples into each record (packed shards, for data larger than "
        "memory; default 1)",
    )
    convert.add_argument(
        "--max-corrupt-records",
        type=int,
        default=0,
        metavar="N",
        help="skip at most N damaged input records (bad checksum, truncated tail, broken "
        "GZIP stream, not an Example), each logged with its file and index; default 0: "
        "the first one is an error (TFRecord input only)",
    )
    convert.add_argument(
        "--overwrite", action="store_true", help="replace a dataset already in OUTDIR"
    )
    _add_split(convert)
    convert.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (shown only when stderr is a terminal)",
    )


def _add_split(parser: argparse.ArgumentParser) -> None:
    """The ``--split`` flag: the split of a TensorFlow Datasets directory."""
    parser.add_argument(
        "--split",
        default=None,
        help="the split of a TensorFlow Datasets directory (default: train)",
    )


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        choices=_COMPRESSION_CHOICES,
        default=None,
        help="default: detected per file",
    )
    _add_split(inspect)


def _add_measure(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``measure`` sub-command and its flags."""
    measure = commands.add_parser(
        "measure",
        help="time the pipelines your files allow on this machine, and recommend one",
        description="Read TFRecord files written by any tool through each pipeline the "
        "data allows (streamed from the files; packed, estimated on a sample of them "
        "converted to packed shards in a temporary directory; held in memory when the "
        "decoded data fits the memory budget), time the batches after the first (the best "
        "of three rounds), compare the decoded size with the memory budget, and recommend "
        "a pipeline (in memory, packed shards or streamed).",
    )
    measure.add_argument("files", nargs="+", metavar="FILE", help="files, directories or globs")
    measure.add_argument(
        "--batch-size", type=int, required=True, metavar="N", help="examples per batch"
    )
    measure.add_argument(
        "--batches",
        type=int,
        default=100,
        metavar="N",
        help="batches to time per pipeline and round, after the first (default 100)",
    )
    measure.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes the decoded data may take in memory (default: half the available memory)",
    )
    measure.add_argument(
        "--map-fn",
        default=None,
        metavar="MODULE:FUNCTION",
        help="your decoding function (the module importable from the current directory or "
        "PYTHONPATH), applied to every pipeline so that the rates include the decode",
    )
    measure.add_argument(
        "--service",
        default=None,
        metavar="grpc://HOST:PORT",
        help="also time the streamed pipeline through this running tf.data service",
    )
    measure.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_split(measure)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tfr-hooks`` command.

    Args:
        argv: The arguments, without the program name; ``None`` for ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 when a file cannot be read or written, 2 for a
        usage error.

    Examples:
        >>> main(["inspect", "data/train.tfrecord"])  # doctest: +SKIP
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "inspect" and args.max_records is not None and args.max_records < 1:
        parser.error(f"--max-records must be a positive integer, not {args.max_records}")
    if args.command == "measure":
        for flag, value in (("--batch-size", args.batch_size), ("--batches", args.batches)):
            if value < 1:
                parser.error(f"{flag} must be a positive integer, not {value}")
        if args.memory_budget is not None and args.memory_budget < 1:
            parser.error(f"--memory-budget must be a positive integer, not {args.memory_budget}")
        _check_measure_flags(parser, args)
    if args.command == "data-service":
        from tfr_hooks.service.command import check_data_service_flags

        check_data_service_flags(parser, args)
    if args.command == "convert" and args.shards < 1:
        parser.error(f"--shards must be a positive integer, not {args.shards}")
    if args.command == "convert" and args.max_corrupt_records < 0:
        parser.error(f"--max-corrupt-records must be 0 or more, got {args.max_corrupt_records}")
    if args.command == "convert" and args.examples_per_record < 1:
        parser.error(
            f"--examples-per-record must be a positive integer, not {args.examples_per_record}"
        )
    if args.command == "convert":
        try:
            args.decode = _parse_decode(args.decode)
        except ValueError as error:
            parser.error(str(error))
        npz = [path for path in args.inputs if path.endswith(".npz")]
        if npz and len(args.inputs) > 1:
            parser.error(
                f"an .npz INPUT is converted on its own, not with other inputs: {args.inputs}"
            )
        if npz and args.decode:
            parser.error("--decode applies to TFRecord input, not to an .npz file")
    if args.command == "data-service":  # a worker waits before TensorFlow starts
        from tfr_hooks.service.command import run_data_service

        return run_data_service(args)
    from tfr_hooks.quiet import import_tensorflow

    import_tensorflow()  # before anything else imports TensorFlow
    from tfr_hooks import tfrecord

    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "convert": _convert,
        "inspect": _inspect,
        "measure": _measure,
        "index": _index,
    }
    try:
        return commands[args.command](args)
    except (tfrecord.TFRecordError, OSError, ValueError, TypeError) as error:
        print(f"tfr-hooks {args.command}: error: {error}", file=sys.stderr)
        return 1


def _index(args: argparse.Namespace) -> int:
    """Index each file; print one line a file."""
    from tfr_hooks.tfrecord.files import detect_compression, resolve_files
    from tfr_hooks.tfrecord.index import index_locations, record_index

    for path in resolve_files(args.files):
        found = record_index(path, detect_compression(path), rebuild=args.rebuild)
        kind = (
            f"{found.blocks} blocks"
            if found.seekable
            else f"{found.compression}: a count only, entered at its start"
        )
        print(f"{path}: {found.count} records, {kind} ({index_locations(path)[1]})")
    return 0


def _parse_decode(items: Sequence[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``--decode NAME=DTYPE:SHAPE`` values as ``decode`` takes them."""
    changes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for item in items:
        name, equals, spec = item.partition("=")
        dtype, _, shape_text = spec.partition(":")
        parts = [p.strip() for p in shape_text.strip().strip("()").split(",") if p.strip()]
        if not equals or not name or not dtype or not all(p.isdigit() for p in parts):
            raise ValueError(
                f"--decode expects NAME=DTYPE:SHAPE, e.g. image_raw=uint8:28,28,1 (an "
                f"empty SHAPE for a scalar), not {item!r}"
            )
        changes[name] = (dtype, tuple(int(p) for p in parts))
    return changes


def _convert(args: argparse.Namespace) -> int:
    if len(args.inputs) == 1 and args.inputs[0].endswith(".npz"):
        return _convert_npz(args, args.inputs[0])
    # the total is unknown before reading: the bar counts up
    progress, close = _progress_bar(None, enabled=not args.no_progress)
    try:
        result = _write(args, list(args.inputs), progress)
    finally:
        close()
    _report(args, result)
    return 0


def _convert_npz(args: argparse.Namespace, path: str) -> int:
    import numpy as np

    args.input = path
    try:
        with np.load(args.input, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"Expected `input` to be an existing .npz file. Received: input={args.input!r}"
        ) from error
    except (ValueError, OSError) as error:
        raise ValueError(
            "Expected `input` to be an .npz file of numeric or string arrays. "
            f"Received: input={args.input!r}, which cannot be read: {error}"
        ) from error
    if not arrays:
        raise ValueError(
            "Expected `input` to hold at least one array. "
            f"Received: input={args.input!r}, which holds none"
        )
    total = len(next(iter(arrays.values())))
    progress, close = _progress_bar(total, enabled=not args.no_progress)
    try:
        result = _write(args, arrays, progress)
    finally:
        close()
    _report(args, result)
    return 0


def _report(args: argparse.Namespace, result: Any) -> None:
    """Print what ``convert`` wrote: the shards, the schema, the packing, the features."""
    print(
        f"Wrote {result.num_records} examples to {len(result.files)} shard(s) in "
        f"{result.directory} (compression: {result.compression or 'none'})"
    )
    print(f"Schema: {result.schema_path}")
    if args.examples_per_record > 1:
        print(f"Packed: {args.examples_per_record} examples per record")
    _print_table(
        ["feature", "dtype", "shape", "encoding"],
        [[f.name, f.dtype, _shape_text(f.shape), f.encoding] for f in result.schema],
        sys.stdout,
    )


def _write(args: argparse.Namespace, data: Any, progress: Any) -> Any:
    """``tfrecord.write`` (arrays) or ``convert`` (a list of paths) with the CLI's options.

    Its errors are given in the CLI's terms.
    """
    from tfr_hooks import tfrecord

    extra: dict[str, Any] = {}
    if isinstance(data, list):
        function: Callable[..., Any] = tfrecord.convert
        extra["decode"] = args.decode or None
        extra["max_corrupt_records"] = args.max_corrupt_records
        extra["split"] = args.split
    else:
        function = tfrecord.write
    try:
        return function(
            data,
            args.outdir,
            **extra,
            shards=args.shards,
            compression=args.compression,
            prefix=args.prefix,
            overwrite=args.overwrite,
            progress=progress,
            examples_per_record=args.examples_per_record,
        )
    except FileExistsError as error:  # the library names its argument, overwrite=True
        held = str(error).partition(", which holds ")[2]
        raise FileExistsError(
            f"Expected OUTDIR to hold no dataset. Received: OUTDIR={args.outdir!r}, which "
            f"holds {held or 'one'}. Pass --overwrite to replace it."
        ) from error


def _progress_bar(total: int | None, *, enabled: bool) -> tuple[Any, Callable[[], None]]:
    """A callback advancing a progress bar on stderr, and a function closing it.

    As tqdm's own command line does: a bar only when stderr is a terminal (a log file
    would keep every redraw), left on screen at the final count when closed.
    """
    if not enabled or not _is_terminal(sys.stderr):
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:  # a plain counter when tqdm is not installed
        done = [0]

        def update(count: int) -> None:
            done[0] += count
            of = "" if total is None else f"/{total}"
            print(f"\rwriting: {done[0]}{of} examples", end="", file=sys.stderr)

        return update, lambda: print(file=sys.stderr) if done[0] else None
    bar = tqdm(total=total, unit="ex", desc="writing", file=sys.stderr, leave=True)
    return bar.update, bar.close


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _inspect(args: argparse.Namespace) -> int:
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.tfds_dir import find_tfds_dir

    found = find_tfds_dir(args.files[0] if len(args.files) == 1 else args.files, args.split)
    if found is not None:  # a TensorFlow Datasets directory: its splits and features
        print(json.dumps(found.to_dict(), indent=2) if args.json else found.describe())
        return 0
    paths = tfrecord.resolve_files(args.files)
    # per file: its FileInfo, or the error that kept it from being read
    results: list[tuple[str, Any, tfrecord.TFRecordError | None]] = []
    for path in paths:
        try:
            infos = tfrecord.inspect(
                path, compression=args.compression, max_records=args.max_records
            )
            results.append((path, infos[0], None))
        except tfrecord.TFRecordError as error:
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


def _shape_text(shape: tuple[int | None, ...]) -> str:
    if shape == (None,):
        return "(varying)"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _spec_shape_text(spec: Any, found: Any, scanned: int) -> str:
    """The shape column: ``optional`` for a 0..1 feature read as varying (give a default)."""
    if spec.varying and found is not None and found.is_optional(scanned):
        return "optional"
    if spec.optional:
        return _shape_text(spec.shape) + " optional"
    return _shape_text(spec.shape)


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
    print(
        f"  records: {info.num_records}{scanned}   compression: {info.compression or 'none'}"
        f"   size: {_size_text(info.size_bytes)}",
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
        _print_table(
            ["feature", "kind", "length", "bytes", "dtype", "shape", "in records"], rows, out
        )
    elif not info.feature_lists:
        print("  (no features)", file=out)
    if info.feature_lists:
        header = ["feature list", "kind", "length", "bytes", "frames", "dtype", "shape"]
        _print_table([*header, "in records"], _feature_list_rows(info, schema), out)


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
                _shape_text(spec.shape) if spec else "not read",
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


def _check_measure_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Load ``--map-fn`` (into ``args.map_fn_loaded``) and check ``--service``'s form."""
    args.map_fn_loaded = None
    if args.map_fn is not None:
        from tfr_hooks.measure import load_function

        try:
            args.map_fn_loaded = load_function(args.map_fn, "--map-fn")
        except (ValueError, TypeError) as error:
            parser.error(str(error))
    if args.service is not None:
        from tfr_hooks.data_service import check_service_address

        try:
            check_service_address(args.service, "--service")
        except (ValueError, TypeError) as error:
            parser.error(str(error))


def _measure(args: argparse.Namespace) -> int:
    from tfr_hooks.measure import measure

    try:
        result = measure(
            args.files,
            args.batch_size,
            max_batches=args.batches,
            memory_budget=args.memory_budget,
            map_fn=getattr(args, "map_fn_loaded", None),
            service=args.service,
            split=args.split,
        )
    except ConnectionError as error:
        print(f"tfr-hooks measure: error: --service: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(
        f"{result.num_examples} examples in {len(result.files)} file(s), "
        f"{result.file_bytes} bytes ({result.record_bytes:.0f} bytes a record, "
        f"{result.examples_per_record} example(s) a record)"
    )
    fits = "fits" if result.fits else "does not fit"
    size_of = {
        "map_fn output": f"Decoded by {result.map_fn}",
        "parsed records": "Parsed records (features still encoded bytes, not decoded)",
    }.get(result.decoded_as, "Decoded")
    print(
        f"{size_of}: {result.decoded_bytes} bytes, which {fits} the memory budget of "
        f"{result.memory_budget} bytes"
    )
    rows = []
    for rate in result.rates:
        speed = "-" if rate.examples_per_sec is None else f"{rate.examples_per_sec:,.0f}"
        rows.append([rate.pipeline, speed, f"{rate.setup_secs:.2f}", rate.note])
    _print_table(["pipeline", "examples/s", "setup s", "note"], rows, sys.stdout)
    print(f"Recommendation: {result.recommendation}")
    return 0


def _print_table(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        line = "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  " + line.rstrip(), file=out)


if __name__ == "__main__":
    sys.exit(main())
