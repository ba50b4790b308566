"""Statistics, target checks, the Markdown table and the bar chart (no TensorFlow here)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench_configs import (
    DESCRIPTIONS,
    GROUPS,
    INPUT_CEILINGS,
    LOOPS,
    MODEL_CEILINGS,
    MODEL_FREE,
    REAL_INPUTS,
    REAL_KINDS,
    REAL_MODELS,
    REAL_REFERENCE,
    REAL_ROWS,
    REFERENCE,
    ROWS,
    UNMEASURED,
    kind_of,
)
from bench_targets import check_targets, twin_ratio

__all__ = [
    "Row",
    "ModelTable",
    "summarize",
    "check_targets",  # re-exported from bench_targets
    "render_markdown",
    "render_png",
    "chart_title",
    "render_summary",
    "replace_summary",
    "load_results",
]


@dataclass
class Row:
    """One configuration under one model: its runs and their statistics."""

    config: str
    description: str
    runs: list[float] = field(default_factory=list)  # examples/second of each repeat
    by_round: list[float | None] = field(default_factory=list)  # the same, None if failed
    rss_mb: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)  # CPU microseconds per example
    hook_share: list[float] = field(default_factory=list)  # share of time inside callbacks
    hook_batch_share: list[float] = field(default_factory=list)  # ... in their batch calls
    errors: list[str] = field(default_factory=list)
    # in-memory rows: (peak RSS, RSS before loading, decoded data), MiB, per repeat
    memory_use: list[tuple[float, float, float]] = field(default_factory=list)
    # text rows of the real suite: the share of padded (0) token positions, per repeat
    padded: list[float] = field(default_factory=list)
    # every row run since issue 56: its worker's anonymous RSS, peak - its own baseline
    # after its imports (MiB, per repeat); in-memory rows: the decoded data (MiB)
    anon_growth: list[float] = field(default_factory=list)
    # a row of a group: (group, repeat) -> its timed epochs' examples a second, which
    # alternated with the other rows' epochs in that process (the paired readings)
    epoch_rates: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    # ... and each of those epochs' share inside the bracketed callbacks (callback rows)
    epoch_hook_shares: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    decoded_mb: list[float] = field(default_factory=list)
    # the package's loops: the input wait share they reported themselves, per repeat
    input_wait: list[float] = field(default_factory=list)
    # the _unmeasured rows: their measured twin's examples/second in the same process,
    # its CPU microseconds per example, and the rounds' ratios (measured / unmeasured)
    twin: list[float] = field(default_factory=list)
    twin_cpu_us: list[float] = field(default_factory=list)
    twin_rounds: list[float] = field(default_factory=list)
    # ... and the seconds of an epoch's and run's end: (measured, unmeasured), per repeat
    twin_end: list[tuple[float, float]] = field(default_factory=list)
    # the steps_per_execution="auto" rows: the value each repeat ran at (its last epoch's
    # input/steps_per_execution)
    auto_steps: list[float] = field(default_factory=list)
    median: float | None = None
    low: float | None = None
    high: float | None = None
    vs_reference: float | None = None
    vs_ceiling: float | None = None

    @property
    def peak_rss_mb(self) -> float | None:
        """The largest peak RSS of the repeats."""
        return max(self.rss_mb) if self.rss_mb else None

    @property
    def padded_share(self) -> float | None:
        """The median share of padded token positions (text rows of the real suite)."""
        return statistics.median(self.padded) if self.padded else None

    @property
    def ran_at(self) -> float | None:
        """The median value a ``steps_per_execution="auto"`` row ran at, if it is one."""
        return statistics.median(self.auto_steps) if self.auto_steps else None

    @property
    def input_wait_share(self) -> float | None:
        """The median share of step time the loop reported waiting for input."""
        return statistics.median(self.input_wait) if self.input_wait else None

    @property
    def in_callbacks(self) -> float | None:
        """The median share of the timed epochs spent inside the callbacks (bracketed)."""
        return statistics.median(self.hook_share) if self.hook_share else None

    @property
    def in_batch_callbacks(self) -> float | None:
        """The median share of the timed epochs spent in the callbacks' per-batch calls."""
        return statistics.median(self.hook_batch_share) if self.hook_batch_share else None

    @property
    def cpu_us_per_example(self) -> float | None:
        """The median CPU time (all threads) per example, in microseconds."""
        return statistics.median(self.cpu_us) if self.cpu_us else None


@dataclass
class ModelTable:
    """The rows of one model, with its reference and ceiling."""

    model: str
    rows: list[Row]
    reference: float | None
    ceiling: float | None
    ceiling_from: str

    def get(self, config: str) -> Row | None:
        """The row of ``config``, if it was run."""
        return next((r for r in self.rows if r.config == config), None)

    def median(self, config: str) -> float | None:
        """The median examples/second of ``config``, if it has one."""
        row = self.get(config)
        return None if row is None else row.median


def _best(table: dict[str, Row], names: Sequence[str]) -> tuple[float | None, str]:
    found = [(table[n].median, n) for n in names if n in table and table[n].median is not None]
    if not found:
        return None, ""
    value, name = max(found)
    return value, name


def summarize(
    results: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    models: Sequence[str],
    configs: Sequence[str],
) -> list[ModelTable]:
    """Turn raw runs into per-model tables of medians, spreads and ratios.

    Args:
        results: ``(config, model)`` -> the result dict of each repeat (``ok``,
            ``examples_per_sec``, ``rss_mb`` or ``error``). Model-free rows are keyed
            with model ``"-"``.
        models: The models, in table order.
        configs: The configurations run (others are left out).

    Returns:
        One :class:`ModelTable` per model. The reference is the median of Keras 3
        ``model.fit``; the ceiling is the smaller of the best model-alone and the best
        input-alone medians. A "model" named ``img`` or ``txt`` is a data set of the
        real suite: its table holds that data set's rows, its reference is the row of
        ``REAL_REFERENCE``, its ceilings its own model-alone and input-alone rows.
    """
    tables = []
    for model in models:
        by_name: dict[str, Row] = {}
        real = model in REAL_KINDS
        rows = [r for r in REAL_ROWS if kind_of(r[0]) == model] if real else ROWS
        for name, description in rows:
            if name not in configs:
                continue
            key = (name, "-" if name in MODEL_FREE else model)
            row = Row(name, description)
            for run in results.get(key, []):
                row.by_round.append(float(run["examples_per_sec"]) if run.get("ok") else None)
                if run.get("ok"):
                    row.runs.append(float(run["examples_per_sec"]))
                    row.rss_mb.append(float(run["rss_mb"]))
                    if "anon_peak_mb" in run:  # the worker's own baseline (issue 56)
                        row.anon_growth.append(run["anon_peak_mb"] - run["anon_baseline_mb"])
                    if "group" in run:
                        row.epoch_rates[(run["group"], run["repeat"])] = run["epoch_rates"]
                        if run.get("hook_batch_seconds", 0.0) + run.get("hook_epoch_seconds", 0.0):
                            shares = run.get("epoch_hook_shares")
                            if shares:
                                row.epoch_hook_shares[(run["group"], run["repeat"])] = shares
                    if "decoded_mb" in run:
                        row.decoded_mb.append(float(run["decoded_mb"]))
                    if "rss_baseline_mb" in run:
                        row.memory_use.append(
                            (float(run["rss_mb"]), run["rss_baseline_mb"], run["decoded_mb"])
                        )
                    if "padded_share" in run:
                        row.padded.append(float(run["padded_share"]))
                    if "auto_steps_per_execution" in run:
                        row.auto_steps.append(float(run["auto_steps_per_execution"]))
                    if "input_wait_share" in run:
                        row.input_wait.append(float(run["input_wait_share"]))
                    if "paired_measured_examples_per_sec" in run:
                        row.twin.append(float(run["paired_measured_examples_per_sec"]))
                        row.twin_cpu_us.append(float(run["paired_measured_cpu_us"]))
                        row.twin_rounds.extend(float(r) for r in run["paired_round_ratios"])
                        on_end, off_end = run["paired_end_seconds"]
                        row.twin_end.append((float(on_end), float(off_end)))
                    if "cpu_seconds" in run:
                        row.cpu_us.append(1e6 * run["cpu_seconds"] / run["examples"])
                    inside = run.get("hook_batch_seconds", 0.0) + run.get("hook_epoch_seconds", 0.0)
                    if inside > 0:
                        row.hook_share.append(inside / run["seconds"])
                        row.hook_batch_share.append(run["hook_batch_seconds"] / run["seconds"])
                else:
                    row.errors.append(str(run.get("error", "failed")))
            if row.runs:
                row.median = statistics.median(row.runs)
                row.low, row.high = min(row.runs), max(row.runs)
            by_name[name] = row
        reference_name = REAL_REFERENCE[model] if real else REFERENCE
        reference = by_name[reference_name].median if reference_name in by_name else None
        model_ceiling, model_from = _best(by_name, REAL_MODELS if real else MODEL_CEILINGS)
        input_ceiling, input_from = _best(by_name, REAL_INPUTS if real else INPUT_CEILINGS)
        candidates = [(v, n) for v, n in ((model_ceiling, model_from), (input_ceiling, input_from))]
        candidates = [(v, n) for v, n in candidates if v is not None]
        ceiling, ceiling_from = min(candidates) if candidates else (None, "")
        for row in by_name.values():
            if row.median is not None and reference:
                row.vs_reference = row.median / reference
            if row.median is not None and ceiling:
                row.vs_ceiling = row.median / ceiling
        tables.append(ModelTable(model, list(by_name.values()), reference, ceiling, ceiling_from))
    return tables


def _ratio(table: ModelTable, a: str, b: str) -> float | None:
    x, y = table.median(a), table.median(b)
    return None if x is None or not y else x / y


def _twin_medians(row: Row) -> float | None:
    """The measured twin's median examples a second over the row's own median."""
    if not row.twin or not row.runs:
        return None
    return statistics.median(row.twin) / statistics.median(row.runs)


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def _shares(row: Row) -> str:
    if row.in_callbacks is None:
        return ""
    return f"{_pct(row.in_callbacks)} ({_pct(row.in_batch_callbacks)} in batch calls)"


def _crossing_count(targets: Sequence[Any]) -> str:
    """How many targets are at "no", and how many of those and of the met cross."""
    missed = [t for t in targets if t.met is False]
    met = [t for t in targets if t.met]
    return (
        f"{len(missed)} targets at no, {sum(t.crossed for t in missed)} of them with a"
        f" spread that crosses the threshold; {len(met)} met,"
        f" {sum(t.crossed for t in met)} of them crossing."
    )


def render_markdown(tables: Sequence[ModelTable], meta: Mapping[str, Any]) -> str:
    """The report: environment, one table per model, the targets, missing rows."""
    lines = [
        "# tfr_hooks benchmark",
        "",
        f"- Date: {meta.get('date')}",
        f"- Command: `{meta.get('command')}`",
        f"- Machine: {meta.get('cpu_count')} CPUs ({meta.get('cpu_model')}), "
        f"{meta.get('memory_gb', 'n/a')} GB RAM, load average at start {meta.get('load')}",
        f"- TensorFlow {meta.get('tensorflow')}, tf_keras {meta.get('tf_keras')}, "
        f"Keras {meta.get('keras')}, Python {meta.get('python')}",
        *_data_lines(meta),
        f"- Batch size {meta.get('batch_size')}; each run: 1 warm-up epoch, then "
        f"{meta.get('epochs')} timed epoch(s); {meta.get('repeats')} repeats, round-robin "
        "(every other round in reverse), "
        "each run in a fresh worker process (peak RSS is the worker's, which includes "
        "the TensorFlow/Keras libraries it shares with the fork server, about 0.35 GB); "
        "the rows of a group (bench_configs.GROUPS: "
        + ", ".join(f"`{g}`" for g in GROUPS)
        + ") run in one worker process, their epochs in turn, and their peak RSS is the "
        "group's",
        f"- Total wall time: {meta.get('wall_minutes', 0):.1f} min",
        "",
        "Median examples/second over the repeats, the spread (min-max), and the median as a "
        "ratio to Keras 3 `model.fit` and to the smaller ceiling (the smaller of the best "
        "model-alone and the best input-alone rows). CPU us/ex: CPU time of the worker "
        "(all its threads) per example, median; less sensitive to other load on the "
        "machine than wall time. In callbacks: the share of the timed epochs spent inside "
        "the three callbacks (and, for the loops, `KerasCallbacks` itself), timed in the "
        "same run by a hook or callback on each side of them, median; in parentheses the "
        "part spent in their per-batch calls (the rest is epoch begin/end: the checkpoint "
        "save, the TensorBoard write), which does not shrink with longer epochs. "
        "Input wait: the share of step time the loop itself reported waiting for input "
        "(`input/wait_share` of its history, mean of the timed epochs; median of the "
        "repeats), for the package's loops; over 20% is input-bound, 5-20% moderately, "
        "under 5% not (see docs/input_bound.md). The `_unmeasured` rows run their "
        "partner with `measure_input=False` beside a measured twin in one process, their "
        "epochs in turn, each epoch's steps timed after its run's first call; the median "
        "of the rounds' ratios (measured / unmeasured) is the measurement's cost "
        "(Targets, and its own section below). A `steps_per_execution='auto'` row says "
        "in its description the value it ran at ('ran at K': `input/steps_per_execution` "
        "of the last epoch, median of the repeats).",
    ]
    for table in tables:
        real = table.model in REAL_KINDS
        padded = any(row.padded for row in table.rows)
        title = f"{table.model}: {REAL_KINDS[table.model]}" if real else table.model
        reference = f"`{REAL_REFERENCE[table.model]}`" if real else "Keras 3 fit"
        lines += [
            "",
            f"## {title}",
            "",
            f"{reference}: {_num(table.reference)} ex/s; ceiling: {_num(table.ceiling)} ex/s "
            f"({table.ceiling_from}).",
            "",
            f"| configuration | what | ex/s (median) | input wait | spread (min-max) "
            f"| x {reference} | x ceiling | CPU us/ex | in callbacks | peak RSS MB |"
            + (" padded positions |" if padded else ""),
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if padded else ""),
        ]
        for row in table.rows:
            if row.median is None:
                reason = row.errors[0].splitlines()[0][:80] if row.errors else "not run"
                lines.append(f"| `{row.config}` | {row.description} | failed | | {reason} | | | |")
                continue
            ran_at = "" if row.ran_at is None else f" (ran at {row.ran_at:g})"
            lines.append(
                f"| `{row.config}` | {row.description}{ran_at} | {_num(row.median)} | "
                f"{_pct(row.input_wait_share)} | {_num(row.low)}-{_num(row.high)} | "
                f"{_num(row.vs_reference, '{:.2f}')} | "
                f"{_num(row.vs_ceiling, '{:.2f}')} | {_num(row.cpu_us_per_example)} | "
                f"{_shares(row)} | {_num(row.peak_rss_mb)} |"
                + (f" {_pct(row.padded_share)} |" if padded else "")
            )
    targets = check_targets(tables)
    if targets:
        lines += [
            "",
            "## Targets (ratios of medians)",
            "",
            "Each target's anchor and the reason for its threshold: docs/benchmarks.md"
            " (Targets and their anchors). Spread: the least and the largest ratio the"
            " repeats allow (min / max, max / min), for a ratio of two rows run in"
            " processes of their own; for a paired reading (a median over rounds), an"
            " interval that holds the median the rounds came from with a probability of"
            " at least 90% (order statistics, any distribution: with the 18 rounds"
            " of a run of record the 6th and the 13th); 'crosses' when it lies on both sides of the"
            " threshold, where the verdict is noise's. Same-run shares have none.",
            "",
            _crossing_count(targets),
            "",
            "| model | target | ratio | value | spread | needed | met |",
            "|---|---|---|---:|---:|---:|---|",
        ]
    for t in targets:
        met = "n/a" if t.met is None else ("yes" if t.met else "**no**")
        spread = "" if t.spread is None else f"{t.spread[0]:.2f}-{t.spread[1]:.2f}"
        if t.crossed:
            spread += " crosses"
        lines.append(
            f"| {t.model} | {t.target} | `{t.comparison}` | {_num(t.ratio, '{:.2f}')} | "
            f"{spread} | >= {t.threshold:.2f} | {met} |"
        )
    lines += _multi_worker_lines(tables)
    lines += _input_cost_lines(tables)
    ran = meta.get("configs", DESCRIPTIONS)
    suites = {kind_of(name) is None for name in ran}  # True: digits, False: real
    missing = [n for n in DESCRIPTIONS if n not in ran and (kind_of(n) is None) in suites]
    if missing:
        lines += ["", "Rows not run in this invocation: " + ", ".join(f"`{m}`" for m in missing)]
    return "\n".join(lines) + "\n"


def _data_lines(meta: Mapping[str, Any]) -> list[str]:
    """The data sets of the run: the digits records, the real suite's (when run)."""
    lines = []
    if meta.get("examples") is not None:
        lines.append(
            f"- Data: {meta.get('examples'):,} synthetic digits-like examples (784 uint8 + "
            f"int64 label) in {meta.get('shards')} TFRecord shards, {meta.get('mb', 0):.1f} MB, "
            f"written by `tfr_hooks.tfrecord.write` in {meta.get('write_seconds', 0):.2f} s "
            f"({meta.get('write_rate', 0):,.0f} examples/s)"
        )
    real = meta.get("real") or {}
    if "images" in real:
        i = real["images"]
        lines.append(
            f"- Images (`img`): {i['examples']:,} 64x64 RGB JPEGs (`image/encoded`, "
            f"`image/class/label`, `image/object/bbox/label` of 0-5 values), "
            f"{i['bytes'] / 2**20:.1f} MB, written by `tf.io.TFRecordWriter` in "
            f"{i['write_seconds']:.1f} s" + (" (reused)" if i.get("reused") else "")
        )
    if "text" in real:
        t = real["text"]
        lines.append(
            f"- Text (`txt`): {t['examples']:,} token-id sequences (`tokens`, `label`), "
            f"lengths median {t['median_length']:.0f}, mean {t['mean_length']:.0f}, max "
            f"{t['max_length']}, {t['bytes'] / 2**20:.1f} MB, written by "
            f"`tf.io.TFRecordWriter` in {t['write_seconds']:.1f} s"
            + (" (reused)" if t.get("reused") else "")
        )
    return lines


def _multi_worker_lines(tables: Sequence[ModelTable]) -> list[str]:
    """1 vs 2 workers: the cost of the collectives on loopback (2 cores show no speed-up)."""
    rows = []
    for t in tables:
        one, two, alone = (
            t.median(n) for n in ("multi_worker_1", "multi_worker_2", "function_loop_32_cb")
        )
        if one is None and two is None:
            continue
        rows.append(
            f"| {t.model} | {_num(alone)} | {_num(one)} | {_num(two)} | "
            f"{_num(_ratio(t, 'multi_worker_2', 'multi_worker_1'), '{:.2f}')} | "
            f"{_num(_ratio(t, 'multi_worker_1', 'function_loop_32_cb'), '{:.2f}')} |"
        )
    if not rows:
        return []
    return [
        "",
        "## Multi-worker: the cost of the collectives on loopback",
        "",
        "`function_loop_32_cb` under `MultiWorkerMirroredStrategy` (same global batch, data "
        "and callbacks): 1 worker, then 2 worker processes on this machine's 2 cores, which "
        "share the cores, so this is the price of the all-reduce and the strategy, not a "
        "speed-up.",
        "",
        "| model | no strategy ex/s | 1 worker ex/s | 2 workers ex/s | 2 / 1 workers "
        "| 1 worker / no strategy |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ]


def _input_cost_lines(tables: Sequence[ModelTable]) -> list[str]:
    """Each measured/unmeasured pair of one process: ratios of medians, rounds, CPU time."""
    rows = []
    for t in tables:
        for unmeasured, measured in UNMEASURED.items():
            row = t.get(unmeasured)
            paired = twin_ratio(row)
            if row is None or paired is None:
                continue
            ratio = _twin_medians(row)
            rounds = row.twin_rounds
            spread = f"{min(rounds):.2f}-{max(rounds):.2f}" if rounds else "n/a"
            cpu_off = row.cpu_us_per_example
            cpu_on = statistics.median(row.twin_cpu_us) if row.twin_cpu_us else None
            cpu = None if cpu_on is None or not cpu_off else cpu_off / cpu_on
            end_on = statistics.median(e[0] for e in row.twin_end) if row.twin_end else None
            end_off = statistics.median(e[1] for e in row.twin_end) if row.twin_end else None
            rows.append(
                f"| {t.model} | `{measured}` | {_num(ratio, '{:.3f}')} | "
                f"{_num(paired, '{:.3f}')} ({spread}, {len(rounds)} rounds) | "
                f"{_num(cpu, '{:.3f}')} | "
                f"{_num(None if end_on is None else 1e3 * end_on, '{:.1f}')} / "
                f"{_num(None if end_off is None else 1e3 * end_off, '{:.1f}')} |"
            )
    if not rows:
        return []
    return [
        "",
        "## The input measurement's cost",
        "",
        "Each `_unmeasured` row runs its loop twice in one worker process, over one model "
        "(in graph mode one train op in one session), the in-memory data and the 3 "
        "callbacks: once with the measurement (`measure_input=True`, the default) and once "
        "without; their epochs run in turn, every other round in reverse order, the steps "
        "of each timed from the end of its first call to the end of its last, and its end "
        "(the epoch's and the run's end work) on its own (bench_workloads.paired_cost). The "
        "loop built first in a process runs about 1% slower than its twin even when both "
        "measure (an A/A run), so which one is built first alternates with the repeat: an "
        "even number of repeats cancels it. Across "
        "worker processes the same rows differ by a few percent from run to run, more "
        "than the 1% to be told apart. Columns: the ratio of the two loops' medians over "
        "the repeats, the median of the rounds' ratios (measured / unmeasured, their "
        "min-max; the target: >= 0.99 is a cost of at most 1%), and the ratio of CPU time "
        "per example (unmeasured / measured). Above 1: the measured loop was faster, "
        "which is noise. Last, the median milliseconds of an epoch's end with and without "
        "the measurement (it writes the input scalars then): a run has it once an epoch, "
        "against an epoch of steps of about a second here.",
        "",
        "| model | row | ex/s: ratio of medians | ex/s: median of the rounds' ratios "
        "| CPU us/ex: unmeasured / measured | epoch end ms: measured / unmeasured |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
    ]


def render_png(tables: Sequence[ModelTable], path: str, title: str = "") -> None:
    """A horizontal bar chart per model: median examples/s, whiskers min-max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max((len(t.rows) for t in tables), default=1)
    fig, axes = plt.subplots(
        1, len(tables), figsize=(7 * len(tables), 0.38 * n + 1.8), squeeze=False
    )
    for ax, table in zip(axes[0], tables, strict=True):
        names = [r.config for r in table.rows]
        medians = [r.median or 0.0 for r in table.rows]
        low = [max(0.0, (r.median or 0) - (r.low or 0)) for r in table.rows]
        high = [max(0.0, (r.high or 0) - (r.median or 0)) for r in table.rows]
        colors = []
        for r in table.rows:
            if r.config.startswith(("input_", "model_only")) or (
                kind_of(r.config) and ("_input_" in r.config or r.config.endswith("_model_only"))
            ):
                colors.append("#999999")
            elif r.config in LOOPS or (kind_of(r.config) and _ours(r.config)):
                colors.append("#1f77b4")
            else:
                colors.append("#ff7f0e")
        y = list(range(len(names)))
        ax.barh(y, medians, xerr=[low, high], color=colors, capsize=2)
        # the input-alone ceilings are far off the scale of the loops: clip, and label them
        scale = [r.high or 0.0 for r in table.rows if "input_" not in r.config]
        limit = 1.2 * max([*scale, table.ceiling or 0.0, 1.0])
        ax.set_xlim(0, limit)
        for yi, value in zip(y, medians, strict=True):
            if value > limit:
                ax.text(limit * 0.98, yi, f"{value:,.0f} ->", va="center", ha="right", fontsize=8)
        if table.reference:
            ax.axvline(
                table.reference, color="black", linestyle="--", linewidth=1, label="Keras 3 fit"
            )
        if table.ceiling:
            ax.axvline(
                table.ceiling, color="red", linestyle=":", linewidth=1.5, label="smaller ceiling"
            )
        ax.set_yticks(y)
        ax.set_yticklabels(names)
        ax.invert_yaxis()  # table order, top to bottom
        ax.set_xlabel("examples / second (median, whiskers min-max)")
        ax.set_title(
            f"{table.model}  (orange: alternatives, blue: tfr_hooks, grey: ceilings)", fontsize=10
        )
        ax.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ours(config: str) -> bool:
    """Whether a real-suite row runs one of the package's loops (drawn blue)."""
    return "_loop_" in config or "_session_" in config


def chart_title(meta: Mapping[str, Any]) -> str:
    """The chart's title: the run, and the data sets it ran on (digits, or the real ones)."""
    data = []
    if meta.get("examples") is not None:
        data.append(f"{meta['examples']:,} examples")
    real = meta.get("real") or {}
    if "images" in real:
        data.append(f"{real['images']['examples']:,} images")
    if "text" in real:
        data.append(f"{real['text']['examples']:,} texts")
    return (
        f"tfr_hooks benchmark {meta.get('date')} - TF {meta.get('tensorflow')}, "
        f"{meta.get('cpu_count')} CPUs, {', '.join(data) or 'no data'}, "
        f"batch {meta.get('batch_size')}"
    )


#: The rows the summary in docs/benchmarks.md quotes, in its order: (label, config). Both
#: models' medians are shown.
SUMMARY_ROWS = [
    ("Keras 3 `fit`, tf.data, `steps_per_execution=32` + the 3 callbacks", "keras3_fit_spe32_cb"),
    (
        "Keras 3 `fit` on numpy arrays in memory, `steps_per_execution=32` + the 3 callbacks",
        "keras3_fit_arrays",
    ),
    ("`feed_dict` from in-memory arrays", "feed_dict_memory"),
    ("`SessionLoop`, in-memory pipeline + the 3 callbacks", "session_loop_memory_cb"),
    ("`SessionLoop`, packed shards + the 3 callbacks", "session_loop_packed_cb"),
    (
        "`FunctionLoop(steps_per_execution=32)`, in memory + the 3 callbacks",
        "function_loop_32_memory_cb",
    ),
    (
        "`FunctionLoop(steps_per_execution=32)`, packed + the 3 callbacks",
        "function_loop_32_packed_cb",
    ),
    (
        "`FunctionLoop(steps_per_execution=32)`, streamed tf.data + the 3 callbacks",
        "function_loop_32_cb",
    ),
    ("ceiling: the model alone", "model_only_tf2"),
    ("input alone, TF2: in memory", "input_memory_tf2"),
    ("input alone, TF2: packed", "input_packed_tf2"),
    ("input alone, TF2: streamed tf.data", "input_tf2"),
]

#: The generated part of docs/benchmarks.md sits between these two lines (``bench/run.py``
#: rewrites it).
SUMMARY_BEGIN = (
    "<!-- benchmark summary: generated by bench/run.py from bench/results/latest.json -->"
)
SUMMARY_END = "<!-- end of benchmark summary -->"


def render_summary(tables: Sequence[ModelTable], meta: Mapping[str, Any]) -> str:
    """The benchmark summary of docs/benchmarks.md: the run, the quoted rows, the targets' ratios.

    Every figure in it comes from the results file, so the page cannot drift from it.
    """
    by_model = {t.model: t for t in tables}
    models = [m for m in ("mlp", "cnn") if m in by_model]
    lines = [
        SUMMARY_BEGIN,
        f"Latest run: {meta.get('date')}, {meta.get('cpu_count')} CPUs ({meta.get('cpu_model')}), "
        f"TensorFlow {meta.get('tensorflow')} / tf_keras {meta.get('tf_keras')} / Keras "
        f"{meta.get('keras')}, Python {meta.get('python')}; {meta.get('wall_minutes', 0):.0f} "
        f"minutes; `tfrecord.write` wrote the data at {meta.get('write_rate', 0):,.0f} "
        "examples/s. Median examples/s:",
        "",
        "| configuration | " + " | ".join(f"{m.upper()} ex/s" for m in models) + " |",
        "|---|" + "---:|" * len(models),
    ]
    for label, config in SUMMARY_ROWS:
        values = [_num(by_model[m].median(config)) for m in models]
        if config in MODEL_FREE:  # one row for every model
            values = values[:1] + ["(same row)"] * (len(values) - 1)
        lines.append(f"| {label} (`{config}`) | " + " | ".join(values) + " |")
    lines += ["", "Targets, as ratios of medians in that run (all of them in latest.md):", ""]
    wanted = (
        "loop + 3 callbacks >= 0.90x its own mode's model alone, in-memory data",
        "tensor-fed from memory >= feed_dict from memory (same arrays, same model)",
        "FunctionLoop(spe=32) + 3 callbacks >= fit at spe=32",
    )
    for t in check_targets(tables):
        if t.target in wanted and t.model in models:
            met = "n/a" if t.met is None else ("met" if t.met else "**missed**")
            lines.append(
                f"- {t.model.upper()}, {t.target}: {_num(t.ratio, '{:.2f}')}x "
                f"(`{t.comparison}`, needed {t.threshold:.2f}): {met}"
            )
    lines.append(SUMMARY_END)
    return "\n".join(lines) + "\n"


def replace_summary(page: str, summary: str) -> str:
    """``page`` with its generated benchmark summary replaced by ``summary``."""
    start = page.index(SUMMARY_BEGIN)
    end = page.index(SUMMARY_END, start) + len(SUMMARY_END) + 1
    return page[:start] + summary + page[end:]


def load_results(path: str) -> tuple[list[ModelTable], dict[str, Any]]:
    """The tables and the run's facts from a ``latest.json`` written by ``bench/run.py``."""
    import json

    with open(path) as f:
        data = json.load(f)
    results: dict[tuple[str, str], list[Any]] = {}
    for key, runs in data["runs"].items():
        config, model = key.split("|")
        results[(config, model)] = runs
    meta = data["meta"]
    models = sorted({m for _, m in results if m != "-"}, key=("mlp", "cnn").index)
    return summarize(results, models, meta["configs"]), meta
