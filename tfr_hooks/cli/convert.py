"""``tfr-hooks convert``: an ``.npz`` file or TFRecord files of any tool to shards.

Usage::

    tfr-hooks convert INPUT.npz OUTDIR --shards 4 [--compression gzip|zlib]
        [--examples-per-record N] [--format tfrecord|array_record]
    tfr-hooks convert FILE_OR_DIR_OR_GLOB... OUTDIR [--decode NAME=DTYPE:SHAPE]...
        [--shards N] [--compression gzip|zlib] [--examples-per-record N] [--split SPLIT]
        [--format tfrecord|array_record]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from tfr_hooks.cli.common import COMPRESSION_CHOICES, add_split, print_table, shape_text

__all__ = ["NAME", "add_parser", "check", "run"]

#: The sub-command's name.
NAME = "convert"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "--compression", choices=COMPRESSION_CHOICES, default="none", help="default: none"
    )
    convert.add_argument("--prefix", default="data", help="shard file name prefix")
    convert.add_argument(
        "--format",
        choices=("tfrecord", "array_record"),
        default="tfrecord",
        help="the shards' record format: TFRecord (default), or ArrayRecord files "
        "(PREFIX-00000-of-0000N.array_record, read by TFDS and Grain; needs the "
        "arrayrecord extra, no --compression, --examples-per-record 1)",
    )
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
    add_split(convert)
    convert.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (shown only when stderr is a terminal)",
    )


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse flags out of range (``parser.error``: status 2); parse ``--decode``."""
    if args.shards < 1:
        parser.error(f"--shards must be a positive integer, not {args.shards}")
    if args.max_corrupt_records < 0:
        parser.error(f"--max-corrupt-records must be 0 or more, got {args.max_corrupt_records}")
    if args.examples_per_record < 1:
        parser.error(
            f"--examples-per-record must be a positive integer, not {args.examples_per_record}"
        )
    try:
        args.decode = _parse_decode(args.decode)
    except ValueError as error:
        parser.error(str(error))
    npz = [path for path in args.inputs if path.endswith(".npz")]
    if npz and len(args.inputs) > 1:
        parser.error(f"an .npz INPUT is converted on its own, not with other inputs: {args.inputs}")
    if npz and args.decode:
        parser.error("--decode applies to TFRecord input, not to an .npz file")


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


def run(args: argparse.Namespace) -> int:
    """Convert the inputs as ``args`` asks; print what was written."""
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
    framing = (
        "format: ArrayRecord"
        if result.format == "array_record"
        else f"compression: {result.compression or 'none'}"
    )
    print(
        f"Wrote {result.num_records} examples to {len(result.files)} shard(s) in "
        f"{result.directory} ({framing})"
    )
    print(f"Schema: {result.schema_path}")
    if args.examples_per_record > 1:
        print(f"Packed: {args.examples_per_record} examples per record")
    print_table(
        ["feature", "dtype", "shape", "encoding"],
        [[f.name, f.dtype, shape_text(f.shape), f.encoding] for f in result.schema],
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
            format=args.format,
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
