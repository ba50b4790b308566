"""Issue 54's rows and targets in the positions report, from its JSON (no TensorFlow).

The rows are :mod:`mixture_rows`'s (``result["mixture"]``): the mixture input alone
against the single-source ``shuffle="global"`` read of the same records, tf.data's
``sample_from_datasets`` and Grain's ``mix``; the checkpoints of the three mixes; our
resume at 10% and 90% of an epoch; each mix's share error per window of 10,000. The
targets: the mixture at least 0.9x the single-source read (the median of the paired
rounds' ratios), 5x ``sample_from_datasets`` and 10x Grain's ``mix``; a share error of
at most 0.005; a resume at 90% no slower than at 10% plus 1 s; an input state of at
most 1 KB.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from positions_report import PositionTarget

__all__ = ["mixture_lines", "mixture_targets"]

#: (row, what it reads) in the report's order
ROW_NAMES = {
    "mixture": 'tfr_hooks mixture: `tfrecord.source({...}, 256, weights=..., shuffle="global")`, '
    "each source in its global order, parsed",
    "single_global": 'tfr_hooks, one source: `tfrecord.source(every file, 256, shuffle="global")`, '
    "parsed",
    "sample_from_datasets": "tf.data `sample_from_datasets`, each source `shuffle(10_000)`, parsed",
    "grain_mix": "Grain `MapDataset.mix` over ArrayRecord (its best spelling, below), raw",
}
CHECKPOINTS = {
    "sample_from_datasets": "tf.data `sample_from_datasets`: `tf.train.Checkpoint(iterator=...)`",
    "mixture": "tfr_hooks mixture: the position and the mixture's state",
    "grain_mix": "Grain `mix`: `iterator.get_state()` as JSON",
}


def _ratio(block: Mapping[str, Any], peer: str) -> float | None:
    rates = block["examples_per_sec"]
    return rates["mixture"] / rates[peer] if rates.get(peer) else None


def mixture_targets(result: Mapping[str, Any]) -> list[PositionTarget]:
    """Issue 54's targets on one run of the positions suite."""
    block = result.get("mixture") or {}
    if "examples_per_sec" not in block:
        return [PositionTarget("mixtures: not measured", "-", "-", None)]
    ratio = block["ratio_single_global"]
    rounds = ", ".join(f"{r:.2f}" for r in block["ratios"])
    targets = [
        PositionTarget(
            'mixture / single-source `shuffle="global"` read (examples/s, paired rounds)',
            f"{ratio:.2f}x (rounds {rounds})",
            ">= 0.9x",
            ratio >= 0.9,
        )
    ]
    for peer, name, needed in (
        ("sample_from_datasets", "tf.data `sample_from_datasets`", 5.0),
        ("grain_mix", "Grain's `mix`", 10.0),
    ):
        value = _ratio(block, peer)
        targets.append(
            PositionTarget(
                f"mixture / {name} (examples/s)",
                "-" if value is None else f"{value:.1f}x",
                f">= {needed:g}x",
                None if value is None else value >= needed,
            )
        )
    error = block["share_error"]["mixture"]
    targets.append(
        PositionTarget(
            "mixture: largest share error in a window of 10,000",
            f"{error:.4f}",
            "<= 0.005",
            error <= 0.005,
        )
    )
    resume = block["resume_seconds"]
    targets.append(
        PositionTarget(
            "mixture: resume at 90% of an epoch <= at 10% + 1 s (new reader to first batch)",
            f"{resume['0.9']:.3f} s (10%: {resume['0.1']:.3f} s)",
            f"<= {resume['0.1'] + 1:.3f} s",
            resume["0.9"] <= resume["0.1"] + 1.0,
        )
    )
    ours = block["checkpoint"]["mixture"]["bytes"]
    targets.append(
        PositionTarget("mixture: input state", f"{ours:,} B", "<= 1,024 B", ours <= 1024)
    )
    return targets


def _rate_lines(block: Mapping[str, Any]) -> list[str]:
    rates, runs, errors = block["examples_per_sec"], block["runs"], block["share_error"]
    lines = [
        "| read | examples/s (median) | runs | mixture / row | share error (10k window) |",
        "|---|---:|---|---:|---:|",
    ]
    for key, text in ROW_NAMES.items():
        if key not in rates:
            continue
        row = block["grain_best"] if key == "grain_mix" else key
        shown = ", ".join(f"{r:,.0f}" for r in runs[row])
        ratio = _ratio(block, key)
        error = f"{errors[key]:.4f}" if key in errors else "-"
        lines.append(
            f"| {text} | {rates[key]:,.0f} | {shown} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} | {error} |"
        )
    grains = [name for name in runs if name.startswith("grain_mix: ")]
    if grains:
        lines += ["", "| Grain's `mix`, spelled | examples read | examples/s (median) |"]
        lines.append("|---|---:|---:|")
        for name in grains:
            best = " (best)" if name == block["grain_best"] else ""
            lines.append(
                f"| {name.split(': ', 1)[1]}{best} | {block['examples_read'][name]:,} | "
                f"{rates[name]:,.0f} |"
            )
    return lines


def mixture_lines(result: Mapping[str, Any]) -> list[str]:
    """The section of the positions report: the rows, checkpoints, resumes, targets."""
    block = result.get("mixture")
    if not block or "examples_per_sec" not in block:
        error = (block or {}).get("error", "no result")
        return ["", "## Mixtures (issue 54)", "", f"Not measured ({error})."]
    data = block["data"]
    weights = ", ".join(f"{name} {w}" for name, w in block["weights"].items())
    sizes = ", ".join(f"{name} {n:,}" for name, n in data["sizes"].items())
    lines = [
        "",
        "## Mixtures (issue 54): 3 named sources at chosen weights, input alone",
        "",
        f"{data['records']:,} records in 3 sources ({sizes}; an int64 source, an int64 id, "
        f"32 bytes; 2 files a source by a plain `tf.io.TFRecordWriter`, "
        f"{data['bytes'] / 1e6:.1f} MB) read at weights {weights}, batch "
        f"{block['batch_size']}, seed 3 (bench/mixture_rows.py). Examples/s after each "
        f"reader's first batch, over at most {block['examples']:,} examples (ours) or "
        f"{block['peer_examples']:,} (the peers), {block['rounds']} rounds, every other "
        "in reverse; the mixture / single-source ratio is the median of the rounds' "
        "ratios. Share errors: ours from the batches read, the peers' from their choice "
        "of source (the same seed and weights).",
        "",
    ]
    lines += _rate_lines(block)
    if block.get("grain_error"):
        lines += ["", f"Grain: not measured ({block['grain_error']})."]
    ckpt = block["checkpoint"]
    lines += [
        "",
        f"Checkpoints after {ckpt['examples']:,} examples: size, and the seconds from a new "
        "reader to its first batch after the restore.",
        "",
        "| checkpoint | size | restore to the first batch (s) |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {text} | {ckpt[key]['bytes']:,} B | {ckpt[key]['restore_seconds']:.3f} |"
        for key, text in CHECKPOINTS.items()
        if key in ckpt
    ]
    resume = block["resume_seconds"]
    lines += [
        "",
        f"Our resume, a new reader seeked (`Source.position.seek`) to its first batch: "
        f"{resume['0.1']:.3f} s at 10% of an epoch, {resume['0.9']:.3f} s at 90% (medians).",
        "",
        "| target | value | needed | met |",
        "|---|---|---|---|",
    ]
    met = {True: "met", False: "**missed**", None: "not measured"}
    lines += [
        f"| {t.target} | {t.value} | {t.needed} | {met[t.met]} |" for t in mixture_targets(result)
    ]
    return lines
