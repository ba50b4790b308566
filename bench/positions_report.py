"""The report of ``--suite positions`` and its targets (issue 45), from its JSON (no TensorFlow)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PositionTarget", "position_targets", "render_positions"]

MODES = {
    "global": 'shuffle="global"',
    "none": "no shuffle",
    "buffer": "shuffle=10_000",
}


@dataclass
class PositionTarget:
    """One target of issue 45: the figure, what it needs, and whether it is met."""

    target: str
    value: str
    needed: str
    met: bool | None  # None: not measured


def _grain_best(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    grain = result.get("grain") or {}
    if "variants" not in grain:
        return None
    best: Mapping[str, Any] = grain["variants"][grain["best"]]
    return best


def position_targets(result: Mapping[str, Any]) -> list[PositionTarget]:
    """The issue's targets, checked on one run of the suite."""
    targets = []
    loop = "loop_resume" in result  # the real resume path, when the run measured it
    for mode in ("global", "none"):
        row = result["loop_resume" if loop else "resume"][mode]
        limit = 1.5 * max(row["extra_10"], 0.0) + 1.0
        where = "FunctionLoop resumed" if loop else "reader"
        targets.append(
            PositionTarget(
                f"resume ({where}), {MODES[mode]}: extra time at 90% <= 1.5x the 10% one + 1 s",
                f"{row['extra_90']:.3f} s (10%: {row['extra_10']:.3f} s)",
                f"<= {limit:.3f} s",
                row["extra_90"] <= limit,
            )
        )
    ours = result["input"]["examples_per_sec"]
    ratio = ours["global"] / ours["buffer"]
    targets.append(
        PositionTarget(
            'input alone: shuffle="global" / shuffle=10_000 (examples/s)',
            f"{result['input']['ratio']:.2f}x (medians {ratio:.2f}x)",
            ">= 0.9x",
            result["input"]["ratio"] >= 0.9,
        )
    )
    mixing = result["input"]["mixing"]["global"]
    targets.append(
        PositionTarget(
            'mixing, shuffle="global": fewest classes in the first 20 batches; mean TV',
            f"{mixing['fewest_classes']} of 20; {mixing['mean_tv']:.3f}",
            ">= 15; <= 0.25",
            mixing["fewest_classes"] >= 15 and mixing["mean_tv"] <= 0.25,
        )
    )
    best = _grain_best(result)
    if best is None:
        targets.append(PositionTarget("Grain: not measured", "-", "-", None))
        return targets
    vs_grain = ours["global"] / best["examples_per_sec"]
    targets.append(
        PositionTarget(
            'input alone: shuffle="global" / Grain\'s global shuffle (examples/s)',
            f"{vs_grain:.1f}x",
            ">= 10x",
            vs_grain >= 10.0,
        )
    )
    restore = result["resume"]["global"]["first_batch"]["0.9"]
    targets.append(
        PositionTarget(
            'restore: shuffle="global" at 90% (to the first batch) <= Grain\'s restore + 1 s',
            f"{restore:.3f} s (Grain {best['restore_seconds']:.3f} s)",
            f"<= {best['restore_seconds'] + 1:.3f} s",
            restore <= best["restore_seconds"] + 1.0,
        )
    )
    return targets


def _met(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def render_positions(result: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The Markdown report of one run of the suite."""
    data = result["data"]
    lines = [
        "# tfr_hooks benchmark: positions (resume, global shuffle, checkpoints, Grain)",
        "",
        f"- Date: {meta.get('date', '?')}",
        f"- Command: `{meta.get('command', 'python bench/run.py --suite positions')}`",
        f"- Machine: {meta.get('cpu_count', '?')} CPUs ({meta.get('cpu_model', '?')}), "
        f"load average at start {meta.get('load', '?')}",
        f"- TensorFlow {result['tensorflow']}, Python {meta.get('python', '?')}",
        f"- Data: {data['records']:,} records (an int64 label, an int64 id, 32 bytes) in "
        f"{data['classes']} classes, class order, 4 files written by a plain "
        f"`tf.io.TFRecordWriter`, {data['bytes'] / 1e6:.1f} MB; batch {result['batch_size']}, "
        f"seed {result['seed']}; one process (bench/positions.py describes each row)",
        f"- Total wall time: {meta.get('wall_minutes', 0):.1f} min",
        "",
        "## Record index",
        "",
        f"Build rate (`build_index`, one sequential pass a file): "
        f"{result['index']['mb_per_sec']:.1f} MB/s wall, "
        f"{result['index']['cpu_mb_per_sec']:.1f} MB/s CPU (median of {result['repeats']}).",
        "",
        "## Input alone, a whole epoch (the package's reader, parsed)",
        "",
        "| read | examples/s (median) | runs | fewest classes, first 20 batches | mean TV |",
        "|---|---:|---|---:|---:|",
    ]
    inp = result["input"]
    for mode in ("global", "buffer"):
        mix = inp["mixing"][mode]
        runs = ", ".join(f"{r:,.0f}" for r in inp["runs"][mode])
        lines.append(
            f"| {MODES[mode]} | {inp['examples_per_sec'][mode]:,.0f} | {runs} | "
            f"{mix['fewest_classes']} of 20 | {mix['mean_tv']:.3f} |"
        )
    lines += [
        "",
        "## Resume: seconds to the first batch of a read from a position in the epoch",
        "",
        f"Medians of {result['repeats']}; extra = the figure at 10% or 90% minus the one at 0%.",
        "",
        "| read | how it reaches the position | 0% | 10% | 90% | extra at 10% | extra at 90% |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += _resume_lines(result["resume"])
    if "loop_resume" in result:
        lines += [
            "",
            "## Resume through the loop: seconds from `FunctionLoop.run` to its first step",
            "",
            "The run resumed at step 0, 10% or 90% of the epoch by a hook setting "
            "`loop.initial_step` where `PreemptionCheckpoint` does after a restore (the "
            "resume targets are checked on these rows); medians, extra as above.",
            "",
            "| read | how the engine reaches the position | 0% | 10% | 90% | extra at 10% "
            "| extra at 90% |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        lines += _resume_lines(result["loop_resume"])
    lines += _checkpoint_lines(result)
    from arrayrecord_report import arrayrecord_lines  # it imports PositionTarget from here

    lines += arrayrecord_lines(result)
    from mixture_report import mixture_lines  # it imports PositionTarget from here

    lines += mixture_lines(result)
    lines += [
        "",
        "## Targets (issue 45)",
        "",
        "| target | value | needed | met |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {t.target} | {t.value} | {t.needed} | {_met(t.met)} |" for t in position_targets(result)
    ]
    return "\n".join(lines) + "\n"


def _resume_lines(rows: Mapping[str, Any]) -> list[str]:
    lines = []
    for mode in ("global", "none", "buffer"):
        row = rows[mode]
        first = row["first_batch"]
        lines.append(
            f"| {MODES[mode]} | {row['how']} | {first['0.0']:.3f} | {first['0.1']:.3f} | "
            f"{first['0.9']:.3f} | {row['extra_10']:.3f} | {row['extra_90']:.3f} |"
        )
    return lines


def _checkpoint_lines(result: Mapping[str, Any]) -> list[str]:
    ckpt = result["tf_checkpoint"]
    ours = result["resume"]["global"]["first_batch"]["0.9"]
    lines = [
        "",
        "## Checkpoints: what resuming saves, and the seconds from a new reader to its first batch",
        "",
        "| reader | saved | size | restore to the first batch (s) |",
        "|---|---|---:|---:|",
        f"| tf.data iterator, `shuffle(10_000)` | `tf.train.Checkpoint(iterator=...)` at 10% | "
        f"{ckpt['shuffle']['bytes']:,} B | {ckpt['shuffle']['restore_seconds']:.3f} |",
        f"| tf.data iterator, no shuffle | the same | {ckpt['no_shuffle']['bytes']:,} B | "
        f"{ckpt['no_shuffle']['restore_seconds']:.3f} |",
        f'| tfr_hooks, shuffle="global" | the epoch and the records read (a position) | '
        f"a few integers | {ours:.3f} (at 90%) |",
    ]
    grain = result.get("grain") or {}
    best = _grain_best(result)
    if best is None:
        lines += ["", f"Grain: not measured ({grain.get('error', 'no result')})."]
        return lines
    lines.append(
        f"| Grain, global shuffle (its best variant, below) | `iterator.get_state()` as JSON "
        f"(`{best['state']}`) | {best['state_bytes']} B | {best['restore_seconds']:.3f} |"
    )
    conv = grain["converted"]
    lines += [
        "",
        f"Grain {grain['version']}, array-record {grain['array_record']}: the same "
        f"{conv['records']:,} records converted to ArrayRecord (`group_size:1`, "
        f"{conv['bytes'] / 1e6:.1f} MB), globally shuffled with seed 3, batch 256, read "
        f"through `to_iter_dataset(ReadOptions(num_threads=k))` from the epoch's start, raw "
        f"records (no parse); {grain['first_batch_classes']} of 20 classes in its first "
        "batch. The best variant is the one in the table above and the targets.",
        "",
        "| Grain variant | examples read | examples/s | restore to the first batch (s) |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {name}{' (best)' if name == grain['best'] else ''} | {v['examples']:,} | "
        f"{v['examples_per_sec']:,.0f} | {v['restore_seconds']:.3f} |"
        for name, v in grain["variants"].items()
    ]
    return lines
