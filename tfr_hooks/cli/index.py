"""``tfr-hooks index``: build the record indexes of TFRecord files ahead of time.

Usage::

    tfr-hooks index FILE_OR_DIR_OR_GLOB... [--rebuild]
"""

from __future__ import annotations

import argparse

__all__ = ["NAME", "add_parser", "check", "run"]

#: The sub-command's name.
NAME = "index"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``index`` sub-command and its flags."""
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


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Nothing to check beyond what argparse does."""


def run(args: argparse.Namespace) -> int:
    """Index each file; print one line a file."""
    from tfr_hooks.tfrecord.formats.framing import detect_compression
    from tfr_hooks.tfrecord.formats.index import index_locations, record_index
    from tfr_hooks.tfrecord.sources.base import resolve_files

    for path in resolve_files(args.files):
        found = record_index(path, detect_compression(path), rebuild=args.rebuild)
        kind = (
            f"{found.blocks} blocks"
            if found.seekable
            else f"{found.compression}: a count only, entered at its start"
        )
        print(f"{path}: {found.count} records, {kind} ({index_locations(path)[1]})")
    return 0
