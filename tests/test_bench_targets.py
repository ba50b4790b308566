"""The benchmark's targets (bench/): anchors, paired readings of grouped rows, memory.

Fast and without TensorFlow: the targets are checked on made-up results, and the turns
of a group on threads that stand in for rows. No speed is asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    for name in (
        "bench_configs",
        "bench_anchors",
        "bench_targets",
        "bench_report",
        "bench_turns",
        "pooled_rounds",
    ):
        sys.modules.pop(name, None)


def _run(rate: float, **extra: object) -> dict[str, object]:
    return {"ok": True, "examples_per_sec": rate, "rss_mb": 400.0, **extra}


@pytest.mark.usefixtures("bench")
def test_rows_of_a_group_take_turns_one_epoch_at_a_time() -> None:
    import bench_turns

    events: list[tuple[str, str]] = []
    running: set[str] = set()
    overlap: list[set[str]] = []

    def row(name: str) -> dict[str, object]:
        for _ in range(3):  # three epochs, each ended by the clock's mark
            running.add(name)
            if len(running) > 1:
                overlap.append(set(running))
            events.append((name, "epoch"))
            running.discard(name)
            pass_on = bench_turns.current()
            assert pass_on is not None  # inside a group
            pass_on()
        if name == "b":
            raise RuntimeError("boom")  # a failed row is skipped, the others go on
        return {"name": name}

    results = bench_turns.run_group(["a", "b", "c"], row)
    assert [name for name, _ in events] == ["a", "b", "c"] * 3
    assert overlap == []
    assert results["a"] == {"ok": True, "name": "a"} and results["c"]["ok"] is True
    assert results["b"]["ok"] is False and "boom" in str(results["b"]["error"])
    assert bench_turns.current() is None  # outside a group: a clock does not wait


@pytest.mark.usefixtures("bench")
def test_target_between_rows_of_a_group_reads_the_rounds_ratios() -> None:
    import bench_report

    # the medians say 1.2 (60 / 50), the rounds of one process say 0.8: the rounds win
    group = {"group": "group_graph_memory"}
    results = {
        ("session_loop_memory", "mlp"): [
            _run(60.0, repeat=0, epoch_rates=[40.0, 40.0], **group),
            _run(60.0, repeat=1, epoch_rates=[80.0, 80.0], **group),
        ],
        ("model_only", "mlp"): [
            _run(50.0, repeat=0, epoch_rates=[50.0, 50.0], **group),
            _run(50.0, repeat=1, epoch_rates=[100.0, 100.0], **group),
        ],
        # rows of separate processes: a ratio of medians, with the spread of the ratio
        ("session_loop_dataset", "mlp"): [_run(100.0), _run(120.0)],
        ("feed_dict_parse", "mlp"): [_run(80.0), _run(100.0)],
    }
    tables = bench_report.summarize(results, ["mlp"], [c for c, _ in results])
    targets = {t.comparison: t for t in bench_report.check_targets(tables)}
    paired = targets["session_loop_memory / model_only (paired)"]
    assert paired.ratio == pytest.approx(0.8) and paired.met is False
    assert paired.spread == pytest.approx((0.8, 0.8)) and not paired.crossed
    apart = targets["session_loop_dataset / feed_dict_parse"]
    assert apart.ratio == pytest.approx(110.0 / 90.0)
    assert apart.spread == pytest.approx((1.0, 1.5))
    assert apart.crossed  # 1.0 < 1.1 <= 1.5: the verdict is noise's
    markdown = bench_report.render_markdown(tables, {"date": "today", "configs": []})
    assert "| 1.00-1.50 crosses | >= 1.10 |" in markdown


@pytest.mark.usefixtures("bench")
def test_median_interval_is_the_order_statistics_that_hold_the_median_at_90_percent() -> None:
    import bench_targets

    # 6 rounds: the next pair in holds the median with 1 - 2 * 7/64 = 0.78 < 0.9, so
    # the least and the largest (0.97); 18 rounds: the 6th and 13th (0.90)
    assert bench_targets.median_interval([3.0, 1.0, 6.0, 2.0, 5.0, 4.0]) == (1.0, 6.0)
    assert bench_targets.median_interval([float(i) for i in range(18, 0, -1)]) == (6.0, 13.0)
    assert bench_targets.median_interval([1.0]) is None


@pytest.mark.usefixtures("bench")
def test_paired_reading_whose_rounds_straddle_the_threshold_is_marked_as_crossing() -> None:
    import bench_report

    # the median of the rounds' ratios says 0.96 (a "no" at 0.97), but the rounds run
    # from 0.80 to 1.01: the 6 rounds cannot tell the loop from one that costs nothing
    group = {"group": "group_graph_stream"}
    ratios = [0.80, 0.90, 0.95, 0.97, 1.00, 1.01]
    results = {
        ("session_loop_dataset", "cnn"): [
            _run(1.0, repeat=r, epoch_rates=[100.0 * x for x in ratios[2 * r : 2 * r + 2]], **group)
            for r in range(3)
        ],
        ("bare_dataset", "cnn"): [
            _run(1.0, repeat=r, epoch_rates=[100.0, 100.0], **group) for r in range(3)
        ],
    }
    tables = bench_report.summarize(results, ["cnn"], [c for c, _ in results])
    [target] = [
        t
        for t in bench_report.check_targets(tables)
        if t.comparison == "session_loop_dataset / bare_dataset (paired)"
    ]
    assert target.ratio == pytest.approx(0.96) and target.met is False
    assert target.spread == pytest.approx((0.80, 1.01)) and target.crossed
    markdown = bench_report.render_markdown(tables, {"date": "today", "configs": []})
    assert "| 0.80-1.01 crosses | >= 0.97 | **no** |" in markdown
    assert "1 targets at no, 1 of them with a spread that crosses the threshold" in markdown


@pytest.mark.usefixtures("bench")
def test_callbacks_share_against_fit_reads_the_rounds_not_one_slow_epoch() -> None:
    import bench_report

    # one slow epoch end in two of the loop's repeats (a checkpoint save the disk made
    # slow), and a loop 1.25x as fast, whose same seconds in the callbacks are a larger
    # share of its shorter epochs: whole runs' shares say 1 - (0.178 - 0.08) = 0.90; the
    # rounds, each side's seconds as a share of fit's epoch, say 1 - 0.005
    group = {"group": "group_fit_peers"}

    def run(repeat: int, shares: list[float], rate: float = 100.0) -> dict[str, object]:
        inside = sum(shares)  # two epochs of one second each
        return _run(
            rate,
            repeat=repeat,
            epoch_rates=[rate, rate],
            epoch_hook_shares=shares,
            seconds=2.0,
            examples=200,
            hook_batch_seconds=inside,
            hook_epoch_seconds=0.0,
            **group,
        )

    results = {
        ("function_loop_1_cb", "mlp"): [
            run(0, [0.25, 0.10625], 125.0),
            run(1, [0.10625, 0.25], 125.0),
            run(2, [0.10625, 0.10625], 125.0),
        ],
        ("keras3_fit_cb", "mlp"): [run(r, [0.08, 0.08]) for r in range(3)],
    }
    tables = bench_report.summarize(results, ["mlp"], [c for c, _ in results])
    [target] = [
        t
        for t in bench_report.check_targets(tables)
        if t.target == "steps_per_execution=1: time in callbacks <= fit's + 1 point"
    ]
    assert target.comparison.endswith("median over rounds (paired)")
    assert target.ratio == pytest.approx(0.995) and target.met is True


@pytest.mark.usefixtures("bench")
def test_memory_target_reads_growth_over_the_workers_own_baseline_less_the_streamed_row() -> None:
    import bench_report

    def run(peak: float, baseline: float, **extra: object) -> dict[str, object]:
        # the whole RSS before the load (the old baseline) is far below: not read
        return _run(1.0, anon_peak_mb=peak, anon_baseline_mb=baseline, **extra)

    results = {
        ("input_memory_tf2", "-"): [run(380.0, 280.0, decoded_mb=50.0, rss_baseline_mb=10.0)],
        ("input_tf2", "-"): [run(320.0, 280.0)],  # the same row streamed grows 40 MB
    }
    tables = bench_report.summarize(results, ["mlp"], [c for c, _ in results])
    (memory,) = [
        t for t in bench_report.check_targets(tables) if t.target.startswith("in-memory RSS")
    ]
    # (100 - 40) / 50 = 1.2 of the decoded size, within 1.5
    assert memory.ratio == pytest.approx(1.5 / 1.2) and memory.met is True


@pytest.mark.usefixtures("bench")
def test_every_target_has_an_anchor_and_unlike_comparisons_are_gone() -> None:
    import bench_anchors
    import bench_report
    import bench_targets

    with pytest.raises(ValueError, match="Received: target='faster than light'"):
        bench_targets.Target("mlp", "faster than light", "a / b", 1.0, 1.0, True)
    tables, _ = bench_report.load_results(str(BENCH / "results" / "latest.json"))
    targets = bench_report.check_targets(tables)
    assert {t.target for t in targets} <= bench_anchors.LABELS
    pairs = {t.comparison.removesuffix(" (paired)") for t in targets}
    # the TF2 loops against their own ceiling; tensor-fed against feed_dict on one model
    assert "function_loop_32_memory / model_only_tf2" in pairs
    assert not any(p.startswith("function_loop") and p.endswith("/ model_only") for p in pairs)
    assert not any(p.startswith("function_loop") and "feed_dict" in p for p in pairs)
    assert "function_loop_32_cb / keras3_fit_cb" not in pairs  # spe 32 against 1
    assert all(t.threshold <= 1.1 for t in targets if "feed_dict_parse" in t.comparison)
    old = " ".join(r.old for r in bench_anchors.RESTATED)
    for gone in ("3x feed_dict parsing", "smaller ceiling", "decoded data + baseline"):
        assert gone in old  # listed in its old form, not dropped silently


def test_groups_hold_each_row_once_and_only_known_rows() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        sys.modules.pop("bench_configs", None)
        import bench_configs
    finally:
        sys.path.remove(str(BENCH))
    rows = [r for members in bench_configs.GROUPS.values() for r in members]
    assert len(rows) == len(set(rows))
    assert set(rows) <= {name for name, _ in bench_configs.ROWS}
    assert json.dumps(bench_configs.GROUP_OF)  # plain data


def _arrayrecord_result(ours: float, ceiling: float, grain: float | None) -> dict[str, object]:
    rows = {"ours_array_record": ours, "ceiling": ceiling, "ours_tfrecord": 500_000.0}
    result: dict[str, object] = {
        "arrayrecord": {
            "batch_size": 256,
            "examples": 1000,
            "examples_per_sec": rows,
            "runs": {name: [rate, rate] for name, rate in rows.items()},
        }
    }
    if grain is not None:
        variant = {"examples_per_sec": grain, "restore_seconds": 0.1}
        result["grain"] = {"best": "batched", "variants": {"batched": variant}}
    return result


@pytest.mark.usefixtures("bench")
def test_arrayrecord_targets_read_grains_best_and_the_ceiling_of_the_same_run() -> None:
    # issue 55: ours >= 2x Grain's best read, >= 0.8x __getitems__ of the same indices
    sys.modules.pop("arrayrecord_report", None)
    import arrayrecord_report

    met = arrayrecord_report.arrayrecord_targets(_arrayrecord_result(90_000, 100_000, 40_000))
    assert [t.met for t in met] == [True, True]
    assert met[0].value.startswith("2.25x") and met[1].value.startswith("0.90x")
    missed = arrayrecord_report.arrayrecord_targets(_arrayrecord_result(70_000, 100_000, 40_000))
    assert [t.met for t in missed] == [False, False]
    (alone, ceiling) = arrayrecord_report.arrayrecord_targets(
        _arrayrecord_result(90_000, 100_000, None)
    )
    assert alone.met is None and ceiling.met is True
    lines = "\n".join(arrayrecord_report.arrayrecord_lines(_arrayrecord_result(9, 10, 4)))
    assert "## ArrayRecord (issue 55)" in lines and "| Grain's best: batched, raw | 4 |" in lines
    assert "| ArrayRecord, global shuffle: ours / Grain's best (examples/s) | 2.25x" in lines
    not_run = arrayrecord_report.arrayrecord_lines({"arrayrecord": {"error": "ImportError: x"}})
    assert not_run[-1] == "Not measured (ImportError: x)."


@pytest.mark.usefixtures("bench")
def test_arrayrecord_targets_take_grain_read_paired_with_ours_over_the_same_examples() -> None:
    # issue 55: Grain's best read again beside ours (same examples, same rounds) is the
    # figure the target divides by, not the Grain rows' own (other examples, other time)
    sys.modules.pop("arrayrecord_report", None)
    import arrayrecord_report

    result = _arrayrecord_result(90_000, 100_000, 30_000)
    block = result["arrayrecord"]
    assert isinstance(block, dict)
    block["examples_per_sec"]["grain_best"] = 50_000.0
    block["runs"]["grain_best"] = [50_000.0, 50_000.0]
    block["grain_variant"] = "batched"
    vs_grain, _ = arrayrecord_report.arrayrecord_targets(result)
    assert vs_grain.value.startswith("1.80x") and vs_grain.met is False
    lines = "\n".join(arrayrecord_report.arrayrecord_lines(result))
    assert "| Grain's best read of the same files, raw: batched | 50,000 |" in lines
    assert "30,000" not in lines  # the Grain rows' figure is not repeated here


def _mixture_result(
    ours: float, single: float, error: float = 0.001, resume_90: float = 0.5
) -> dict[str, object]:
    runs = {
        "mixture": [ours],
        "single_global": [single],
        "sample_from_datasets": [30_000.0],
        "grain_mix: per record": [1_000.0],
        "grain_mix: batched": [20_000.0],
    }
    rates = {name: values[0] for name, values in runs.items()}
    rates["grain_mix"] = 20_000.0
    checkpoint = {"bytes": 300, "restore_seconds": 0.4}
    return {
        "mixture": {
            "data": {"records": 420, "sizes": {"web": 300, "books": 100, "code": 20}, "bytes": 1e6},
            "weights": {"web": 0.5, "books": 0.3, "code": 0.2},
            "batch_size": 256,
            "examples": 420,
            "peer_examples": 420,
            "rounds": 1,
            "grain_error": None,
            "runs": runs,
            "examples_read": {name: 420 for name in runs},
            "ratios": [ours / single],
            "ratio_single_global": ours / single,
            "grain_best": "grain_mix: batched",
            "examples_per_sec": rates,
            "checkpoint": {
                "examples": 256,
                "sample_from_datasets": {"bytes": 2_700_000, "restore_seconds": 0.3},
                "mixture": checkpoint,
                "grain_mix": {"bytes": 40, "restore_seconds": 0.2},
            },
            "resume_seconds": {"0.1": 0.4, "0.9": resume_90},
            "share_error": {"mixture": error, "sample_from_datasets": 0.011, "grain_mix": 0.0001},
        }
    }


@pytest.mark.usefixtures("bench")
def test_mixture_targets_read_the_paired_ratio_the_peers_shares_and_the_resume() -> None:
    # issue 54: >= 0.9x the single-source global read, 5x sample_from_datasets, 10x
    # Grain's mix, share error <= 0.005 a 10k window, resume at 90% <= 10% + 1 s, <= 1 KB
    sys.modules.pop("mixture_report", None)
    import mixture_report

    met = mixture_report.mixture_targets(_mixture_result(300_000, 320_000))
    assert [t.met for t in met] == [True] * 6
    assert met[0].value.startswith("0.94x") and met[1].value == "10.0x"
    assert met[2].value == "15.0x"
    missed = mixture_report.mixture_targets(
        _mixture_result(150_000, 300_000, error=0.011, resume_90=2.0)
    )
    assert [t.met for t in missed] == [False, True, False, False, False, True]
    lines = "\n".join(mixture_report.mixture_lines(_mixture_result(300_000, 320_000)))
    assert "## Mixtures (issue 54)" in lines
    assert "| batched (best) | 420 | 20,000 |" in lines
    assert '| mixture / single-source `shuffle="global"` read' in lines
    assert lines.count("| met |") == 7  # the table's header and its 6 targets
    not_run = mixture_report.mixture_lines({"mixture": {"error": "ImportError: x"}})
    assert not_run[-1] == "Not measured (ImportError: x)."


@pytest.mark.usefixtures("bench")
def test_pooled_rounds_of_two_runs_decide_what_each_run_alone_leaves_to_noise(
    tmp_path: Path,
) -> None:
    import pooled_rounds

    # each run's 6 rounds straddle 0.97 (0.80-1.01 and 0.90-0.975), so each is left to
    # noise; their 12 rounds' 90% interval (3rd and 10th: 0.90-0.96) lies below it
    group = {"group": "group_graph_stream"}

    def write(name: str, ratios: list[float]) -> str:
        def runs(rates: list[float]) -> list[dict[str, object]]:
            return [
                _run(1.0, repeat=r, epoch_rates=rates[2 * r : 2 * r + 2], **group) for r in range(3)
            ]

        data = {
            "meta": {"configs": ["session_loop_dataset", "bare_dataset"]},
            "runs": {
                "session_loop_dataset|cnn": runs([100.0 * x for x in ratios]),
                "bare_dataset|cnn": runs([100.0] * 6),
            },
        }
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return str(path)

    first = write("a.json", [0.80, 0.90, 0.95, 0.96, 0.96, 1.01])
    second = write("b.json", [0.90, 0.92, 0.94, 0.95, 0.96, 0.975])
    for alone in (first, second):
        [reading] = pooled_rounds.pool([alone])
        assert reading.verdict == "crosses"
    [pooled] = pooled_rounds.pool([first, second])
    assert pooled.comparison == "session_loop_dataset / bare_dataset (paired)"
    assert (pooled.runs, len(pooled.rounds)) == (2, 12)
    assert pooled.median == pytest.approx(0.95) and pooled.verdict == "missed"
