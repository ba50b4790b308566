"""What several ``tfr-hooks`` sub-commands share: the ``--split`` flag and the tables."""

from __future__ import annotations

import argparse
from typing import TextIO

__all__ = ["COMPRESSION_CHOICES", "add_split", "print_table", "shape_text"]

#: The ``--compression`` choices.
COMPRESSION_CHOICES = ("none", "gzip", "zlib")


def add_split(parser: argparse.ArgumentParser) -> None:
    """The ``--split`` flag: the split of a TensorFlow Datasets directory."""
    parser.add_argument(
        "--split",
        default=None,
        help="the split of a TensorFlow Datasets directory (default: train)",
    )


def shape_text(shape: tuple[int | None, ...]) -> str:
    """A shape as the tables print it: ``(28, 28, 1)``, ``(3,)``, ``(varying)``."""
    if shape == (None,):
        return "(varying)"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def print_table(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    """``rows`` under ``header``, in columns, indented by two spaces."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        line = "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  " + line.rstrip(), file=out)
