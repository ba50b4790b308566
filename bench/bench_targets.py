"""The benchmark's targets, checked on the tables' medians (no TensorFlow here).

Each target's label, anchor (what it is measured against) and the reason for its
threshold are listed in bench_anchors.py; :class:`Target` refuses a label not there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench_anchors import LABELS
from bench_configs import REAL_KINDS, UNMEASURED

__all__ = [
    "Target",
    "MEMORY_TWINS",
    "INTERVAL_CONFIDENCE",
    "check_targets",
    "median_interval",
    "paired_ratio",
    "paired_rounds",
    "paired_share_difference",
    "paired_share_differences",
    "twin_ratio",
]


#: In-memory rows -> the same row on the streamed pipeline (the RSS check's twin).
MEMORY_TWINS = {
    "input_memory": "input_dataset",
    "input_memory_tf2": "input_tf2",
    "session_loop_memory": "session_loop_dataset",
    "session_loop_memory_cb": "session_loop_dataset_cb",
    "function_loop_32_memory": "function_loop_32",
    "function_loop_32_memory_cb": "function_loop_32_cb",
}


@dataclass
class Target:
    """One target, checked on one model's medians (or on one process's paired rounds).

    ``spread``: for a ratio of two rows' medians, the least and the largest ratio their
    runs allow (``min(a) / max(b)``, ``max(a) / min(b)``); for a paired reading (the
    median of rounds), the :func:`median_interval` of its rounds; ``None`` for a
    reading of whole runs. A spread on both sides of the threshold leaves the verdict
    to noise.
    """

    model: str
    target: str
    comparison: str
    ratio: float | None
    threshold: float
    met: bool | None
    spread: tuple[float, float] | None = None
    #: A paired reading's rounds, in the reading's terms (the ratio's median is theirs).
    rounds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.target not in LABELS:
            raise ValueError(
                f"Expected a target listed in bench_anchors.ANCHORS. Received: "
                f"target={self.target!r}"
            )

    @property
    def crossed(self) -> bool:
        """Whether the runs' spread of the ratio lies on both sides of the threshold."""
        return self.spread is not None and self.spread[0] < self.threshold <= self.spread[1]


def _best(by_name: dict[str, Any], names: Sequence[str]) -> tuple[float | None, str]:
    found = [(by_name[n].median, n) for n in names if n in by_name and by_name[n].median]
    return max(found) if found else (None, "")


def _ratio(table: Any, a: str, b: str) -> float | None:
    x, y = table.median(a), table.median(b)
    return None if x is None or not y else x / y


def _spread(table: Any, a: str, b: str) -> tuple[float, float] | None:
    x, y = table.get(a), table.get(b)
    if x is None or y is None or not x.runs or not y.runs:
        return None
    return min(x.runs) / max(y.runs), max(x.runs) / min(y.runs)


#: The confidence of a paired reading's interval (:func:`median_interval`).
INTERVAL_CONFIDENCE = 0.9


def median_interval(
    values: Sequence[float], confidence: float = INTERVAL_CONFIDENCE
) -> tuple[float, float] | None:
    """A distribution-free interval for the median of the rounds ``values`` came from.

    The order statistics ``x_(k)`` and ``x_(n+1-k)`` of ``n`` rounds hold the true median
    with probability ``1 - 2 P(B <= k - 1)``, ``B`` binomial(n, 1/2), whatever the
    rounds' distribution; ``k`` is the largest whose probability is at least
    ``confidence`` (at least 1: the least and the largest round, which hold it with
    ``1 - 2^(1-n)``; 0.97 for 6 rounds). ``None`` for fewer than 2 rounds.
    """
    xs = sorted(values)
    n = len(xs)
    if n < 2:
        return None

    def coverage(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= n - k and coverage(k + 1) >= confidence:
        k += 1
    return xs[k - 1], xs[n - k]


def paired_rounds(table: Any, a: str, b: str) -> list[float]:
    """The rounds' ratios of ``a`` and ``b``, if they ran as one group (else empty).

    Round ``i`` of a repeat is the two rows' ``i``-th timed epochs, which ran in one
    process within seconds of each other (bench_turns); pooled over the repeats.
    """
    x, y = table.get(a), table.get(b)
    if x is None or y is None:
        return []
    return [
        p / q
        for key in x.epoch_rates.keys() & y.epoch_rates.keys()
        for p, q in zip(x.epoch_rates[key], y.epoch_rates[key], strict=False)
        if q > 0
    ]


def paired_ratio(table: Any, a: str, b: str) -> float | None:
    """The median of :func:`paired_rounds`, if ``a`` and ``b`` ran as one group."""
    ratios = paired_rounds(table, a, b)
    return statistics.median(ratios) if ratios else None


def twin_ratio(row: Any) -> float | None:
    """An ``_unmeasured`` row's cost ratio: the median of its rounds' ratios.

    Each round ran the measured twin and the row's own loop one after the other in one
    process (measured / unmeasured examples a second); pooled over the repeats. A ratio
    of the two loops' medians over the repeats would mix the processes' spread (a few
    percent here) back in.
    """
    if row is None or not row.twin_rounds:
        return None
    return statistics.median(row.twin_rounds)


def check_targets(tables: Sequence[Any]) -> list[Target]:
    """Every target of :data:`ANCHORS` the tables' rows allow, with its verdict."""
    targets: list[Target] = []

    def add(table: Any, target: str, a: str, b: str, threshold: float) -> None:
        rounds = paired_rounds(table, a, b)
        if rounds:  # one process, epochs in turn: the interval of the rounds' median
            ratio, comparison = statistics.median(rounds), f"{a} / {b} (paired)"
            spread = median_interval(rounds)
        else:
            ratio, comparison, spread = _ratio(table, a, b), f"{a} / {b}", _spread(table, a, b)
        met = None if ratio is None else ratio >= threshold
        targets.append(
            Target(table.model, target, comparison, ratio, threshold, met, spread, tuple(rounds))
        )

    for t in tables:
        _auto_targets(t, targets)
        if t.model in REAL_KINDS:
            _real_targets(t, add, targets)
        else:
            _digits_targets(t, add, targets)
    return targets


def _share_targets(t: Any, targets: list[Target]) -> None:
    """The callbacks' share of the run, timed in the same run (the paired reading)."""
    for name in (
        "session_loop_queue_cb",
        "session_loop_dataset_cb",
        "function_loop_32_cb",
        "function_loop_auto_cb",
    ):
        row = t.get(name)
        share = None if row is None else row.in_callbacks
        targets.append(
            Target(
                t.model,
                "time inside the callbacks < 3% (same run)",
                f"{name}: 1 - share in callbacks",
                None if share is None else 1.0 - share,
                0.97,
                None if share is None else share < 0.03,
            )
        )
    ours, fit = t.get("function_loop_1_cb"), t.get("keras3_fit_cb")
    comparison = "function_loop_1_cb: 1 - (share in callbacks - keras3_fit_cb's)"
    rounds = tuple(1.0 - d for d in paired_share_differences(ours, fit))
    spread = None
    if rounds:  # one process, epochs in turn
        value = statistics.median(rounds)
        comparison = f"{comparison}, median over rounds (paired)"
        spread = median_interval(rounds)
    else:
        mine = None if ours is None else ours.in_callbacks
        theirs = None if fit is None else fit.in_callbacks
        value = None if mine is None or theirs is None else 1.0 - (mine - theirs)
    targets.append(
        Target(
            t.model,
            "steps_per_execution=1: time in callbacks <= fit's + 1 point",
            comparison,
            value,
            0.99,
            None if value is None else value >= 0.99,
            spread,
            rounds,
        )
    )


def paired_share_differences(ours: Any, fit: Any) -> list[float]:
    """Each round's time in the callbacks of ``ours`` less ``fit``'s, a share of ``fit``'s epoch.

    Round ``i`` is each row's ``i``-th timed epoch of a repeat, run in one process within
    seconds of each other (bench_turns); pooled over the repeats. Both epochs have the
    same steps and examples, so each side's seconds in the callbacks is its share over
    its rate; the difference is read as a share of ``fit``'s epoch: a loop whose steps
    are faster does not read a larger share for the same seconds in the same callbacks.
    A whole run's share, median over the repeats, let one slow epoch end (a checkpoint
    save the disk made slow, on either side) decide the target.
    """
    if ours is None or fit is None:
        return []
    return [
        share * their_rate / rate - their_share
        for key in ours.epoch_hook_shares.keys() & fit.epoch_hook_shares.keys()
        if key in ours.epoch_rates and key in fit.epoch_rates
        for share, rate, their_share, their_rate in zip(
            ours.epoch_hook_shares[key],
            ours.epoch_rates[key],
            fit.epoch_hook_shares[key],
            fit.epoch_rates[key],
            strict=False,
        )
        if rate > 0
    ]


def paired_share_difference(ours: Any, fit: Any) -> float | None:
    """The median of :func:`paired_share_differences` (``None`` without rounds)."""
    differences = paired_share_differences(ours, fit)
    return statistics.median(differences) if differences else None


def _digits_targets(t: Any, add: Any, targets: list[Target]) -> None:
    """The digits suite's targets (MLP, CNN), each against its anchor."""
    for loop in ("session_loop_queue_cb", "session_loop_dataset_cb", "function_loop_1_cb"):
        add(t, "with callbacks >= Keras 3 fit with callbacks", loop, "keras3_fit_cb", 1.0)
    for suffix in ("", "_cb"):
        add(
            t,
            "steps_per_execution=32 >= 1.1x steps_per_execution=1 (same loop)",
            f"function_loop_32{suffix}",
            f"function_loop_1{suffix}",
            1.1,
        )
    _share_targets(t, targets)
    for base, bare in (
        ("session_loop_queue", "bare_queue"),
        ("session_loop_dataset", "bare_dataset"),
    ):
        add(t, "the loop itself costs < 3% (vs hand-written)", base, bare, 0.97)
    ceiling = "loop within 10% of its own mode's model alone, in-memory data"
    add(t, ceiling, "session_loop_memory", "model_only", 0.9)
    add(t, ceiling, "function_loop_32_memory", "model_only_tf2", 0.9)
    add(t, ceiling, "function_loop_32_cached", "model_only_tf2", 0.9)
    with_callbacks = "loop + 3 callbacks >= 0.90x its own mode's model alone, in-memory data"
    add(t, with_callbacks, "session_loop_memory_cb", "model_only", 0.9)
    add(t, with_callbacks, "function_loop_32_memory_cb", "model_only_tf2", 0.9)
    parse = "tensor-fed >= 1.1x feed_dict parsing in Python (same files, same model)"
    for loop in ("session_loop_queue", "session_loop_dataset"):
        add(t, parse, loop, "feed_dict_parse", 1.1)
    add(
        t,
        "tensor-fed from memory >= feed_dict from memory (same arrays, same model)",
        "session_loop_memory",
        "feed_dict_memory",
        1.0,
    )
    for loop, fit in (
        ("function_loop_32_cb", "keras3_fit_spe32_cb"),
        ("function_loop_32_memory_cb", "keras3_fit_arrays"),
    ):
        add(t, "FunctionLoop(spe=32) + 3 callbacks >= fit at spe=32", loop, fit, 1.0)
    _input_targets(t, add, targets)
    _memory_targets(t, targets)
    for unmeasured, measured in UNMEASURED.items():
        row = t.get(unmeasured)
        ratio = twin_ratio(row)
        targets.append(
            Target(
                t.model,
                "the input measurement costs <= 1% (one process, epochs in turn)",
                f"median over rounds of {measured} / {unmeasured}",
                ratio,
                0.99,
                None if ratio is None else ratio >= 0.99,
                None if row is None else median_interval(row.twin_rounds),
                () if row is None else tuple(row.twin_rounds),
            )
        )


def _input_targets(t: Any, add: Any, targets: list[Target]) -> None:
    """Issue 12's input-alone targets: absolute rates, and against streamed TF2 input."""
    by_name = {r.config: r for r in t.rows}
    for names, needed in (
        (("input_memory", "input_memory_tf2"), 1_000_000.0),
        (("input_packed", "input_packed_tf2"), 750_000.0),
    ):
        value, name = _best(by_name, names)
        ratio = None if value is None else value / needed
        targets.append(
            Target(
                t.model,
                f"input alone >= {needed:,.0f} ex/s",
                f"{name} / {needed:,.0f}",
                ratio,
                1.0,
                None if ratio is None else ratio >= 1.0,
            )
        )
    add(t, "in-memory input alone >= 3x streamed (TF2 both)", "input_memory_tf2", "input_tf2", 3.0)
    add(t, "packed input alone >= 2x streamed (TF2 both)", "input_packed_tf2", "input_tf2", 2.0)


def _memory_targets(t: Any, targets: list[Target]) -> None:
    """The in-memory rows' RSS growth over their own baseline, less their streamed twin's."""
    for memory, streamed in MEMORY_TWINS.items():
        mem, twin = t.get(memory), t.get(streamed)
        if mem is None or twin is None or not mem.anon_growth or not twin.anon_growth:
            continue  # not run, or results from before issue 56 (no worker baseline)
        decoded = max(mem.decoded_mb) if mem.decoded_mb else 0.0
        if decoded <= 0:
            continue
        extra = statistics.median(mem.anon_growth) - statistics.median(twin.anon_growth)
        share = extra / decoded
        targets.append(
            Target(
                t.model,
                "in-memory RSS growth, less the same row streamed, <= 1.5x decoded",
                f"{memory} - {streamed}: 1.5 / (RssAnon growth / decoded)",
                1.5 / share if share > 0 else None,
                1.0,
                share <= 1.5,
            )
        )


#: The models whose steps are short: there ``"auto"`` at 1 would mean a hook held it (on
#: the CNNs a step can be long enough for 1 to be the right value).
SHORT_STEPS = ("mlp", "txt")


def _auto_targets(t: Any, targets: list[Target]) -> None:
    """Each ``_auto`` row of a model of short steps: the value it ran at is above 1."""
    if t.model not in SHORT_STEPS:
        return
    for row in t.rows:
        if row.ran_at is not None:
            targets.append(
                Target(
                    t.model,
                    "steps_per_execution='auto' runs above 1",
                    f"{row.config}: steps_per_execution it ran at",
                    row.ran_at,
                    2.0,
                    row.ran_at > 1,
                )
            )


def _service_targets(t: Any, add: Any, targets: list[Target]) -> None:
    """The targets of issue 27: a trainer on 1 core, with and without a served worker."""
    add(
        t,
        "1 core: input alone through the service >= 1.5x local",
        "img_input_1core_service",
        "img_input_1core",
        1.5,
    )
    add(
        t,
        "1 core: FunctionLoop through the service >= 1.3x local",
        "img_loop_1core_service",
        "img_loop_1core",
        1.3,
    )
    by_name = {r.config: r for r in t.rows}
    served, local = by_name.get("img_loop_1core_service"), by_name.get("img_loop_1core")
    mine = None if served is None else served.input_wait_share
    base = None if local is None else local.input_wait_share
    # a wait share of 0 (the served trainer never waits) counts as 0.1%
    ratio = None if mine is None or base is None else base / max(mine, 0.001)
    targets.append(
        Target(
            t.model,
            "1 core: lower input-wait share through the service",
            "input wait share: img_loop_1core / img_loop_1core_service",
            ratio,
            1.0,
            None if mine is None or base is None else mine < base,
        )
    )


def _stream_bucketed_targets(t: Any, add: Any, targets: list[Target]) -> None:
    """Issue 46: streamed bucketing (sorted pools) near streaming speed, padding and all."""
    add(
        t,
        "streamed bucketed input alone >= 0.5x streamed padded",
        "txt_input_stream_bucketed",
        "txt_input_stream",
        0.5,
    )
    add(
        t,
        "FunctionLoop on streamed bucketing >= on streamed padding",
        "txt_loop_stream_bucketed",
        "txt_loop_stream",
        1.0,
    )
    by_name = {r.config: r for r in t.rows}
    ours, theirs = by_name.get("txt_input_stream_bucketed"), by_name.get("txt_input_bucketed")
    mine = None if ours is None else ours.padded_share
    base = None if theirs is None else theirs.padded_share
    ratio = None if mine is None or not base else 1.25 * base / max(mine, 1e-9)
    targets.append(
        Target(
            t.model,
            "streamed bucketed padded share <= 1.25x bucket_by_sequence_length's",
            "padded share: 1.25 x txt_input_bucketed / txt_input_stream_bucketed",
            ratio,
            1.0,
            None if ratio is None else ratio >= 1.0,
        )
    )


def _real_targets(t: Any, add: Any, targets: list[Target]) -> None:
    """The targets of issue 19 on the real suite's data (images ``img``, text ``txt``)."""
    k = t.model
    cached = "img_input_hand_cached" if k == "img" else "txt_input_padded_cached"
    hand_input = "img_input_hand" if k == "img" else "txt_input_padded"
    fit = "img_fit_hand" if k == "img" else "txt_fit_padded"
    add(
        t,
        "in-memory input alone >= the hand-written .cache() pass",
        f"{k}_input_memory",
        cached,
        1.0,
    )
    add(
        t, "streamed input alone >= the hand-written pipeline", f"{k}_input_stream", hand_input, 1.0
    )
    add(t, "packed input alone >= 2x streamed", f"{k}_input_packed", f"{k}_input_stream", 2.0)
    add(
        t,
        "FunctionLoop + 3 callbacks, fastest pipeline >= 0.90x the model alone",
        f"{k}_loop_memory",
        f"{k}_model_only",
        0.9,
    )
    add(
        t,
        "FunctionLoop + 3 callbacks, fastest pipeline >= fit on the hand-written one",
        f"{k}_loop_memory",
        fit,
        1.0,
    )
    if k == "img":
        add(
            t,
            "TFDS directory in memory, input alone >= builder_from_directory + .cache()",
            "img_input_tfds_memory",
            "img_input_tfds_cached",
            1.0,
        )
        for small in ("small", "small_digits"):
            add(
                t,
                f"in-memory input alone >= .cache(), {small.replace('_', ' ')} (3,072 a pass)",
                f"img_input_{small}_memory",
                f"img_input_{small}_cached",
                1.0,
            )
        for size, count in (("", "3,072"), ("_30k", "30,720")):
            add(
                t,
                f"in-memory input alone >= .cache(), float32 images from map_fn ({count} a pass)",
                f"img_input_small_memory_f32{size}",
                f"img_input_small_cached_f32{size}",
                1.0,
            )
        _service_targets(t, add, targets)
    if k == "txt":
        add(
            t,
            "bucketed input alone >= the hand-written bucketed pipeline",
            "txt_input_memory_bucketed",
            "txt_input_bucketed",
            1.0,
        )
        add(
            t,
            "FunctionLoop bucketed >= fit on the hand-written bucketed pipeline",
            "txt_loop_memory_bucketed",
            "txt_fit_bucketed",
            1.0,
        )
        _stream_bucketed_targets(t, add, targets)
        by_name = {r.config: r for r in t.rows}
        ours, theirs = by_name.get("txt_input_memory_bucketed"), by_name.get("txt_input_padded")
        mine = None if ours is None else ours.padded_share
        base = None if theirs is None else theirs.padded_share
        ratio = None if not mine or base is None else base / mine
        targets.append(
            Target(
                k,
                "bucketed batches waste less padding than padded_batch",
                "padded share: txt_input_padded / txt_input_memory_bucketed",
                ratio,
                1.0,
                None if ratio is None else ratio > 1.0,
            )
        )
    by_name = {r.config: r for r in t.rows}
    for memory, streamed in (
        (f"{k}_loop_memory", f"{k}_loop_stream"),
        (f"{k}_input_memory", f"{k}_input_stream"),
    ):
        # "above a no-data run of the same script": the same row on the streamed pipeline
        mem, other = by_name.get(memory), by_name.get(streamed)
        if mem is None or other is None or not mem.memory_use:
            continue  # text rows: the data held is too small to tell from the noise
        held = max(data for _, _, data in mem.memory_use)
        if mem.peak_rss_mb is None or other.peak_rss_mb is None or held <= 0:
            continue
        share = (mem.peak_rss_mb - other.peak_rss_mb) / held
        targets.append(
            Target(
                k,
                "in-memory peak RSS above the same row streamed <= 1.5x the bytes held",
                f"1.5 / (({memory} - {streamed}) peak RSS / held)",
                1.5 / share if share > 0 else None,
                1.0,
                share <= 1.5,
            )
        )
