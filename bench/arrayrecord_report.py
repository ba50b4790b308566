"""Issue 55's rows and targets in the positions report, from its JSON (no TensorFlow).

The rows are :mod:`arrayrecord_rows`'s (``result["arrayrecord"]``), Grain's best read of
the same ArrayRecord files among them, paired with ours over the same examples (older
runs: the positions suite's Grain rows, ``result["grain"]``); the
targets: our global-shuffled ArrayRecord read at least 2x Grain's best, and at least
0.8x ``ArrayRecordDataSource.__getitems__`` of the same shuffled indices (the ceiling).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from positions_report import PositionTarget

__all__ = ["arrayrecord_lines", "arrayrecord_targets"]

#: (row, what it reads) in the report's order
ROW_NAMES = {
    "ours_array_record": 'tfr_hooks, ArrayRecord, `shuffle="global"`: each window\'s '
    "records read in its order by record number, 2,048 a call, calls in flight "
    "(orders/index_reads.py), parsed",
    "grain_best": "Grain's best read of the same files, raw: {variant}",
    "ceiling": "`ArrayRecordDataSource.__getitems__` of the same shuffled indices, batch "
    "256, one call after the other, raw (the ceiling)",
    "ceiling_piece": "the same, 2,048 indices a call, our read's size (not a target)",
    "ours_tfrecord": 'tfr_hooks, TFRecord, `shuffle="global"`, parsed',
}


def _grain_best(result: Mapping[str, Any]) -> tuple[str, float] | None:
    """Grain's best read: paired with ours over the same examples, else the Grain rows'."""
    block = result.get("arrayrecord") or {}
    paired = (block.get("examples_per_sec") or {}).get("grain_best")
    if paired is not None:
        return str(block.get("grain_variant", "?")), float(paired)
    grain = result.get("grain") or {}
    if "variants" not in grain:
        return None
    return grain["best"], float(grain["variants"][grain["best"]]["examples_per_sec"])


def arrayrecord_targets(result: Mapping[str, Any]) -> list[PositionTarget]:
    """Issue 55's targets on one run: >= 2x Grain's best, >= 0.8x the ceiling."""
    rows = (result.get("arrayrecord") or {}).get("examples_per_sec")
    grain = _grain_best(result)
    if not rows:
        return [PositionTarget("ArrayRecord: not measured", "-", "-", None)]
    ours = rows["ours_array_record"]
    targets = []
    if grain is None:
        targets.append(PositionTarget("ArrayRecord / Grain: Grain not measured", "-", "-", None))
    else:
        targets.append(
            PositionTarget(
                "ArrayRecord, global shuffle: ours / Grain's best (examples/s)",
                f"{ours / grain[1]:.2f}x ({ours:,.0f} / {grain[1]:,.0f})",
                ">= 2x",
                ours >= 2.0 * grain[1],
            )
        )
    targets.append(
        PositionTarget(
            "ArrayRecord, global shuffle: ours / `__getitems__` of the same indices (ceiling)",
            f"{ours / rows['ceiling']:.2f}x ({ours:,.0f} / {rows['ceiling']:,.0f})",
            ">= 0.8x",
            ours >= 0.8 * rows["ceiling"],
        )
    )
    return targets


def arrayrecord_lines(result: Mapping[str, Any]) -> list[str]:
    """The section of the positions report: the rows, Grain's best, the targets."""
    block = result.get("arrayrecord")
    if not block or "examples_per_sec" not in block:
        error = (block or {}).get("error", "no result")
        return ["", "## ArrayRecord (issue 55)", "", f"Not measured ({error})."]
    lines = [
        "",
        "## ArrayRecord (issue 55): a global-shuffled read of the same records",
        "",
        f"Examples/s over the same first {block['examples']:,} examples of the epoch (or "
        "the whole epoch, when shorter: the last column) for "
        f"every row, from a new reader's first batch (built before the clock), batch "
        f"{block['batch_size']}, seed 3, median of paired rounds in one process "
        "(bench/arrayrecord_rows.py).",
        "",
        "| read | examples/s (median) | runs | examples read |",
        "|---|---:|---|---:|",
    ]
    read = block.get("examples_read", {})
    for name, text in ROW_NAMES.items():
        if name not in block["examples_per_sec"]:
            continue
        text = text.format(variant=block.get("grain_variant", "?"))
        runs = ", ".join(f"{r:,.0f}" for r in block["runs"][name])
        count = f"{read[name]:,}" if name in read else "-"
        lines.append(f"| {text} | {block['examples_per_sec'][name]:,.0f} | {runs} | {count} |")
    grain = _grain_best(result)
    if grain is not None and "grain_best" not in block["examples_per_sec"]:
        lines.append(f"| Grain's best: {grain[0]}, raw | {grain[1]:,.0f} | (above) | - |")
    lines += ["", "| target | value | needed | met |", "|---|---|---|---|"]
    met = {True: "met", False: "**missed**", None: "not measured"}
    lines += [
        f"| {t.target} | {t.value} | {t.needed} | {met[t.met]} |"
        for t in arrayrecord_targets(result)
    ]
    return lines
