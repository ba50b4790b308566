"""The ``tfr-hooks`` command: one module per sub-command.

Usage::

    tfr-hooks convert INPUT.npz OUTDIR --shards 4 [--compression gzip|zlib]
        [--examples-per-record N]
    tfr-hooks convert FILE_OR_DIR_OR_GLOB... OUTDIR [--decode NAME=DTYPE:SHAPE]...
        [--shards N] [--compression gzip|zlib] [--examples-per-record N]
    tfr-hooks inspect FILE_OR_DIR_OR_GLOB... [--json] [--max-records N]
    tfr-hooks measure FILE_OR_DIR_OR_GLOB... --batch-size N [--json] [--batches N]
        [--memory-budget BYTES]
    tfr-hooks index FILE_OR_DIR_OR_GLOB... [--rebuild]
    tfr-hooks data-service dispatcher --port PORT [--work-dir DIR]
    tfr-hooks data-service worker --dispatcher HOST:PORT [--port PORT]
        [--worker-address HOST] [--wait-timeout SECONDS]

Each sub-command is a module of this package named in :data:`COMMANDS`, with ``NAME``
(the word on the command line), ``add_parser(commands)`` (its flags), ``check(parser,
args)`` (flags out of range: ``parser.error``, status 2) and ``run(args)`` (its exit
status). A new sub-command is a new module and one line in :data:`COMMANDS`.

Only the standard library is imported at module level: :func:`main` imports TensorFlow
through :func:`tfr_hooks.quiet.import_tensorflow`, which drops its start-up notices
(``TF_CPP_MIN_LOG_LEVEL=2`` unless already set, and the lines printed before that is
read) and keeps everything else, errors included; a sub-command whose module sets
``NEEDS_TENSORFLOW = False`` (``data-service``: a worker waits for its dispatcher first)
runs before that. Run it as ``tfr-hooks`` or ``python -m tfr_hooks.cli``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["COMMANDS", "build_parser", "main"]

#: The modules of the sub-commands, in the order ``--help`` lists them.
COMMANDS = (
    "tfr_hooks.cli.convert",
    "tfr_hooks.cli.inspect",
    "tfr_hooks.cli.measure",
    "tfr_hooks.cli.index",
    "tfr_hooks.cli.data_service",
)


def _commands() -> dict[str, ModuleType]:
    """Each sub-command's name and module."""
    modules = [importlib.import_module(name) for name in COMMANDS]
    return {module.NAME: module for module in modules}


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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _commands().values():
        module.add_parser(commands)
    return parser


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
    command = _commands()[args.command]
    command.check(parser, args)
    if not getattr(command, "NEEDS_TENSORFLOW", True):
        return int(command.run(args))
    from tfr_hooks.quiet import import_tensorflow

    import_tensorflow()  # before anything else imports TensorFlow
    from tfr_hooks.tfrecord.errors import TFRecordError

    try:
        return int(command.run(args))
    except (TFRecordError, OSError, ValueError, TypeError, ImportError) as error:
        # ImportError: an optional extra missing (its message names it)
        print(f"tfr-hooks {args.command}: error: {error}", file=sys.stderr)
        return 1
