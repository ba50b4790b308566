"""``tfr-hooks measure``: time the pipelines the files allow on this machine.

Usage::

    tfr-hooks measure FILE_OR_DIR_OR_GLOB... --batch-size N [--json] [--batches N]
        [--memory-budget BYTES] [--map-fn MODULE:FUNCTION] [--service grpc://HOST:PORT]
        [--split SPLIT]
"""

from __future__ import annotations

import argparse
import json
import sys

from tfr_hooks.cli.common import add_split, print_table

__all__ = ["NAME", "add_parser", "check", "run"]

#: The sub-command's name.
NAME = "measure"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_split(measure)


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse flags out of range (``parser.error``: status 2); load ``--map-fn``."""
    for flag, value in (("--batch-size", args.batch_size), ("--batches", args.batches)):
        if value < 1:
            parser.error(f"{flag} must be a positive integer, not {value}")
    if args.memory_budget is not None and args.memory_budget < 1:
        parser.error(f"--memory-budget must be a positive integer, not {args.memory_budget}")
    _check_measure_flags(parser, args)


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
        from tfr_hooks.service.address import check_service_address

        try:
            check_service_address(args.service, "--service")
        except (ValueError, TypeError) as error:
            parser.error(str(error))


def run(args: argparse.Namespace) -> int:
    """Time the pipelines, print the rates and the recommendation."""
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
    print_table(["pipeline", "examples/s", "setup s", "note"], rows, sys.stdout)
    print(f"Recommendation: {result.recommendation}")
    return 0
