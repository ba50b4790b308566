"""Smoke test of the benchmark harness (bench/): its in-process pieces on a tiny data set.

It checks that the harness writes the data with the package's writer, runs two rows
(the reference, Keras 3 ``model.fit``, and ``SessionLoop`` over the tf.data pipeline),
and builds a report whose ratios come from the measured medians. It never asserts speed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from _scripted import scripted_timing

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(180)
def test_harness_runs_rows_and_reports_ratios_of_medians(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_data", "bench_report", "bench_workloads"):
        sys.modules.pop(name, None)
    import bench_data
    import bench_report
    import bench_workloads

    info = bench_data.write_dataset(tmp_path / "data", 256)
    assert (info["examples"], info["shards"]) == (256, 4)
    assert info["write_seconds"] > 0 and info["bytes"] > 256 * 784

    configs = ["keras3_fit", "session_loop_dataset"]
    results = {}
    for config in configs:
        spec = bench_workloads.Spec(
            config=config,
            model="mlp",
            data_dir=str(tmp_path / "data"),
            batch_size=64,
            epochs=1,
            workdir=str(tmp_path / "work" / config),
        )
        result = bench_workloads.run_config(spec)
        # one timed epoch after the warm-up: every example once
        assert (result["examples"], result["epochs"]) == (256, 1)
        assert result["seconds"] > 0 and result["rss_mb"] > 0
        assert result["examples_per_sec"] == pytest.approx(256 / result["seconds"])
        # a second, made-up repeat, so the median is not just the one run
        slower = {**result, "examples_per_sec": result["examples_per_sec"] / 2}
        results[(config, "mlp")] = [{"ok": True, **result}, {"ok": True, **slower}]
    results[("model_only", "mlp")] = [{"ok": False, "error": "RuntimeError: boom"}]

    tables = bench_report.summarize(results, ["mlp"], [*configs, "model_only"])
    (table,) = tables
    assert [row.config for row in table.rows] == [*configs, "model_only"]
    keras_row, loop_row, failed = table.rows
    assert keras_row.median == pytest.approx(0.75 * keras_row.runs[0])
    assert table.reference == keras_row.median
    assert keras_row.vs_reference == pytest.approx(1.0)
    assert loop_row.vs_reference == pytest.approx(loop_row.median / keras_row.median)
    assert (loop_row.low, loop_row.high) == (min(loop_row.runs), max(loop_row.runs))
    assert failed.median is None and failed.errors == ["RuntimeError: boom"]
    assert table.ceiling is None and loop_row.vs_ceiling is None  # no ceiling row ran

    meta = {"date": "today", "command": "pytest", "examples": 256, "configs": configs}
    markdown = bench_report.render_markdown(tables, meta)
    assert f"| `session_loop_dataset` | {loop_row.description} |" in markdown
    assert f"| {loop_row.vs_reference:.2f} |" in markdown
    assert "| `model_only` |" in markdown and "failed" in markdown
    assert "`function_loop_32`" in markdown  # listed among the rows not run
    targets = {(t.comparison, t.met) for t in bench_report.check_targets(tables)}
    assert ("session_loop_dataset / feed_dict_parse", None) in targets  # not measured

    chart = tmp_path / "latest.png"
    bench_report.render_png(tables, str(chart))
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
def test_bench_run_prints_no_cuda_start_up_lines(tmp_path: Path) -> None:
    # what `tox -e bench` runs, on tiny data: a fork server and a worker process per run
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH.parent), env.get("PYTHONPATH", "")) if p
    )
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH / "run.py"),
            "--quick",
            "--examples=256",
            "--batch-size=64",
            "--only=model_only",
            "--models=mlp",
            f"--data-dir={tmp_path / 'data'}",
            f"--out={tmp_path / 'out'}",
            "--timeout=240",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    assert "[1/1  1/1] model_only" in result.stdout  # the worker ran
    assert "FAILED" not in result.stdout
    noise = [
        line
        for line in result.stderr.splitlines()
        if any(word in line for word in ("cuInit", "cuda", "CUDA", "absl::InitializeLog"))
    ]
    assert noise == []


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
def test_real_suite_rows_run_on_tiny_images_and_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --suite real on tiny data sets written with a plain tf.io.TFRecordWriter: one row of
    # each kind, in this process, the package's in-memory, packed and bucketed ones too
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_real", "bench_real_data", "bench_report", "bench_tfds"):
        sys.modules.pop(name, None)
    import bench_real_data
    import bench_report
    import bench_workloads

    info = bench_real_data.write_real(tmp_path, images=64, texts=128)
    assert info["images"]["examples"] == 64 and info["text"]["examples"] == 128
    assert not (Path(info["images"]["directory"]) / "schema.json").exists()  # not our writer
    assert bench_real_data.write_real(tmp_path, images=64, texts=128)["text"]["reused"]

    def run(config: str) -> dict:
        spec = bench_workloads.Spec(
            config=config,
            model=config[:3],
            data_dir=str(tmp_path),
            batch_size=16,
            epochs=1,
            workdir=str(tmp_path / "work" / config),
            real={"img": 64, "txt": 128},
        )
        try:
            return {"ok": True, **bench_workloads.run_config(spec)}
        except Exception as exc:  # as a worker reports it
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    configs = [
        "img_fit_hand",
        "img_loop_stream",
        "img_model_only",
        "img_input_hand_cached",
        "txt_input_padded",
        "txt_input_bucketed",
        "txt_loop_stream",
        "txt_loop_stream_bucketed",  # sorted pools, streamed (issue 46)
        "img_loop_memory",  # JPEGs decoded once into memory (in_memory with map_fn)
        "img_input_packed",  # converted to packed shards: the box lists kept
        "img_session_memory",
        "txt_input_memory",  # token lists held as values and row offsets
        "txt_input_memory_bucketed",
        "txt_loop_memory_bucketed",
        "txt_session_memory_bucketed",
        "txt_input_packed",
        "img_input_small_cached",  # the small data sets, a pass a new iterator
        "img_input_small_memory",
        "img_input_small_digits_cached",
        "img_input_small_digits_memory",
        "img_input_tfds_cached",  # the images as a TFDS directory: TFDS's reader, cached
        "img_input_tfds_memory",  # and the package's, in memory
    ]
    results = {(c, c[:3]): [run(c)] for c in configs}
    for (config, _), (result,) in results.items():
        assert result["ok"], (config, result.get("error"))
        assert result["examples_per_sec"] > 0 and result["examples"] > 0
    shares = {
        c: results[(c, "txt")][0]["padded_share"]
        for c in configs
        if c[:3] == "txt" and results[(c, "txt")][0]["ok"]
    }
    assert all(0.0 < share < 1.0 for share in shares.values()), shares
    assert shares["txt_input_bucketed"] < shares["txt_input_padded"]
    assert shares["txt_input_memory_bucketed"] < shares["txt_input_memory"]
    assert shares["txt_loop_stream_bucketed"] < shares["txt_loop_stream"]
    assert "decoded_mb" in results[("img_loop_memory", "img")][0]  # the RSS check's inputs

    tables = bench_report.summarize(results, ["img", "txt"], configs)
    assert [t.model for t in tables] == ["img", "txt"]
    assert tables[0].reference == tables[0].get("img_fit_hand").median
    markdown = bench_report.render_markdown(tables, {"date": "today", "configs": configs})
    assert "| padded positions |" in markdown and "## txt:" in markdown
    targets = bench_report.check_targets(tables)  # the targets, on these rows
    names = {(t.model, t.comparison) for t in targets}
    assert ("img", "img_input_memory / img_input_hand_cached") in names
    assert ("txt", "txt_input_memory_bucketed / txt_input_bucketed") in names
    assert ("txt", "txt_loop_stream_bucketed / txt_loop_stream") in names
    assert ("img", "img_input_small_memory / img_input_small_cached") in names
    assert ("img", "img_input_tfds_memory / img_input_tfds_cached") in names
    assert all(t.model in ("img", "txt") for t in targets)  # not the digits targets


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(240)
def test_resume_cost_bench_measures_both_loops_on_every_pipeline(tmp_path: Path) -> None:
    # bench/skip_cost.py, which docs/failures.md's and docs/distributed.md's resume costs link
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH.parent), env.get("PYTHONPATH", "")) if p
    )
    out = tmp_path / "resume_cost.md"
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH / "skip_cost.py"),
            "--examples=1280",
            "--batch=64",
            "--repeats=1",
            f"--out={out}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if "Loop |" in line]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (loop, pipeline)
        for pipeline in ("stream", "packed", "memory")
        for loop in ("FunctionLoop", "SessionLoop")
    ]
    for row in rows:
        assert float(row[2]) > 0  # seconds per 1,000 skipped batches, measured
    assert all(float(r[5]) > 0 for r in rows if r[0].strip() == "SessionLoop")  # the replay


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(240)
def test_auto_rows_run_above_one_step_a_call_and_report_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 46: the rows' timing hooks work per call, so "auto" is not held at 1 on the
    # MLP, whose steps are short; the row's result and report say the value it ran at.
    # The calls' durations are scripted (cheap steps): on a loaded machine the tuner
    # rightly stays at 1 from wall-clock time, and only a hook can hold it here
    scripted_timing(monkeypatch)
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_data", "bench_report", "bench_workloads"):
        sys.modules.pop(name, None)
    import bench_data
    import bench_report
    import bench_workloads

    bench_data.write_dataset(tmp_path / "data", 2048)
    configs = ["function_loop_auto_cb", "function_loop_32_cb"]
    results = {}
    for config in configs:
        spec = bench_workloads.Spec(
            config=config,
            model="mlp",
            data_dir=str(tmp_path / "data"),
            batch_size=16,  # 128 short steps an epoch
            epochs=1,
            workdir=str(tmp_path / "work" / config),
        )
        results[(config, "mlp")] = [{"ok": True, **bench_workloads.run_config(spec)}]
    (auto,) = results[("function_loop_auto_cb", "mlp")]
    assert auto["auto_steps_per_execution"] > 1
    assert "auto_steps_per_execution" not in results[("function_loop_32_cb", "mlp")][0]

    tables = bench_report.summarize(results, ["mlp"], configs)
    ran_at = tables[0].get("function_loop_auto_cb").ran_at
    assert ran_at == auto["auto_steps_per_execution"]
    markdown = bench_report.render_markdown(tables, {"date": "today", "configs": configs})
    assert f"+ 3 callbacks (ran at {ran_at:g}) |" in markdown
    targets = {t.comparison: t.met for t in bench_report.check_targets(tables)}
    assert targets["function_loop_auto_cb: steps_per_execution it ran at"] is True


def test_real_chart_names_its_data_sets_and_draws_session_loop_rows_as_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 46: the real suite's chart said "0 examples" and drew SessionLoop rows orange
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_report"):
        sys.modules.pop(name, None)
    import bench_report
    from matplotlib.colors import to_hex

    meta = {
        "date": "today",
        "tensorflow": "2.21.0",
        "cpu_count": 2,
        "batch_size": 128,
        "real": {"images": {"examples": 20000}, "text": {"examples": 50000}},
    }
    title = bench_report.chart_title(meta)
    assert "20,000 images, 50,000 texts" in title and "0 examples" not in title
    assert "60,000 examples" in bench_report.chart_title({**meta, "real": {}, "examples": 60000})

    configs = ["img_session_memory", "img_loop_memory", "img_fit_hand", "img_model_only"]
    results = {
        (c, "img"): [{"ok": True, "examples_per_sec": 100.0, "rss_mb": 1.0}] for c in configs
    }
    tables = bench_report.summarize(results, ["img"], configs)
    drawn: dict[str, str] = {}

    def barh(self: object, y: list[int], widths: list[float], **kwargs: object) -> object:
        names = [row.config for row in tables[0].rows]
        drawn.update(zip(names, (to_hex(c) for c in kwargs["color"]), strict=True))  # type: ignore[arg-type]
        return original(self, y, widths, **kwargs)

    from matplotlib.axes import Axes

    original = Axes.barh
    monkeypatch.setattr(Axes, "barh", barh)
    bench_report.render_png(tables, str(tmp_path / "chart.png"), title)
    assert drawn["img_session_memory"] == drawn["img_loop_memory"] == "#1f77b4"  # ours
    assert drawn["img_fit_hand"] == "#ff7f0e"  # an alternative
    assert drawn["img_model_only"] == "#999999"  # a ceiling


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(240)
def test_float_small_image_rows_run_and_have_their_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 46: the small-image pair through a map_fn returning float32, and its target
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_real", "bench_report", "bench_workloads"):
        sys.modules.pop(name, None)
    import bench_real
    import bench_report
    import bench_workloads

    monkeypatch.setattr(bench_real, "SMALL_PASSES", 2)  # a pass each timed epoch is enough
    configs = ["img_input_small_cached_f32", "img_input_small_memory_f32"]
    results = {}
    for config in configs:
        spec = bench_workloads.Spec(
            config=config,
            model="img",
            data_dir=str(tmp_path),
            batch_size=256,
            epochs=1,
            workdir=str(tmp_path / "work" / config),
        )
        result = bench_workloads.run_config(spec)
        assert result["examples"] == 2 * bench_real.SMALL_EXAMPLES  # 2 passes, all of them
        results[(config, "img")] = [{"ok": True, **result}]
    x, _ = next(
        iter(bench_real.small_pipeline(spec, (40, 40, 3), "memory", map_fn=bench_real.to_float))
    )
    assert (
        x.dtype == tf.float32 and 0.0 <= float(tf.reduce_min(x)) <= float(tf.reduce_max(x)) <= 1.0
    )

    tables = bench_report.summarize(results, ["img"], configs)
    targets = {t.comparison: t for t in bench_report.check_targets(tables)}
    pair = targets["img_input_small_memory_f32 / img_input_small_cached_f32"]
    assert pair.ratio == pytest.approx(
        results[(configs[1], "img")][0]["examples_per_sec"]
        / results[(configs[0], "img")][0]["examples_per_sec"]
    )
    assert pair.threshold == 1.0
    assert targets["img_input_small_memory_f32_30k / img_input_small_cached_f32_30k"].met is None


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
def test_positions_suite_reports_resume_checkpoints_and_grain_with_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 45's rows: `python bench/run.py --suite positions`, on tiny data
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH.parent), env.get("PYTHONPATH", "")) if p
    )
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH / "run.py"),
            "--suite=positions",
            "--quick",
            "--records=2560",
            f"--data-dir={tmp_path / 'data'}",
            f"--out={out}",
            "--timeout=240",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    # the records are a plain tf.io.TFRecordWriter's: no schema sidecar
    assert not (tmp_path / "data" / "records-2560" / "schema.json").exists()
    saved = json.loads((out / "positions.json").read_text())
    run = saved["positions"]
    assert run["data"]["records"] == 2560 and run["data"]["classes"] == 20
    assert run["index"]["mb_per_sec"] > 0
    assert set(run["input"]["examples_per_sec"]) == {"global", "buffer"}
    assert all(rate > 0 for rate in run["input"]["examples_per_sec"].values())
    assert set(run["resume"]) == {"global", "none", "buffer"}
    for row in run["resume"].values():
        assert set(row["first_batch"]) == {"0.0", "0.1", "0.9"}
        assert all(seconds > 0 for seconds in row["first_batch"].values())
    assert run["resume"]["buffer"]["how"].startswith("replay")
    # the real resume path: FunctionLoop resumed mid-epoch, the time to its first step
    assert set(run["loop_resume"]) == {"global", "none", "buffer"}
    for row in run["loop_resume"].values():
        assert all(seconds > 0 for seconds in row["first_batch"].values())
    assert run["loop_resume"]["buffer"]["how"] == "the skip (replay)"
    # TensorFlow's checkpoint holds the shuffle buffer; without the shuffle it is far smaller
    ckpt = run["tf_checkpoint"]
    assert ckpt["shuffle"]["bytes"] > 2 * ckpt["no_shuffle"]["bytes"] > 0
    assert ckpt["shuffle"]["restore_seconds"] > 0

    # issue 54: the mixture of 3 sources of the same count of records, and its peers
    mixture = run["mixture"]
    assert "error" not in mixture, mixture
    assert mixture["data"]["records"] == 2560 and len(mixture["data"]["sizes"]) == 3
    assert mixture["examples_per_sec"]["mixture"] > 0
    assert mixture["examples_per_sec"]["single_global"] > 0
    assert 0 < mixture["checkpoint"]["mixture"]["bytes"] < 1024

    markdown = (out / "latest.md").read_text()
    assert "# tfr_hooks benchmark: positions" in markdown
    assert "## Mixtures (issue 54)" in markdown
    assert '| mixture / single-source `shuffle="global"` read' in markdown
    assert "## Resume: seconds to the first batch" in markdown
    assert "## Resume through the loop: seconds from `FunctionLoop.run`" in markdown
    assert "| shuffle=10_000 | replay (dataset.skip on batches) |" in markdown
    assert "`tf.train.Checkpoint(iterator=...)`" in markdown
    targets = markdown.split("## Targets (issue 45)", 1)[1]
    for target in (
        'resume (FunctionLoop resumed), shuffle="global": extra time at 90%',
        "resume (FunctionLoop resumed), no shuffle: extra time at 90%",
        'input alone: shuffle="global" / shuffle=10_000',
        'mixing, shuffle="global"',
    ):
        (line,) = [line for line in targets.splitlines() if line.startswith(f"| {target}")]
        assert line.endswith(("| met |", "| **missed** |")), line

    # in bench/results, latest.md holds the suite's report after the other suites'
    monkeypatch.syspath_prepend(str(BENCH))
    import run as bench_run

    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "latest_positions.json").write_text(json.dumps(saved))
    assert bench_run.records_report(tmp_path / "records") == markdown

    try:
        import grain  # noqa: F401  (the bench extra)
    except ImportError:
        assert "Grain: not measured (ModuleNotFoundError" in markdown
        return
    grain_run = run["grain"]
    assert grain_run["converted"]["records"] == 2560
    assert len(grain_run["variants"]) == 4
    for variant in grain_run["variants"].values():
        assert variant["examples_per_sec"] > 0 and variant["state_bytes"] < 1024
    assert f"| {grain_run['best']} (best) |" in markdown
    assert "Grain's global shuffle (examples/s)" in targets
    assert "Grain's restore + 1 s" in targets


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
def test_group_runs_its_rows_in_one_process_epochs_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 56: the rows a target compares run in one worker, their epochs in turn, and
    # the target reads the rounds' ratios; a standalone row's memory is its worker's own
    monkeypatch.syspath_prepend(str(BENCH))
    for name in ("bench_configs", "bench_data", "bench_report", "bench_workloads", "bench_turns"):
        sys.modules.pop(name, None)
    import bench_data
    import bench_report
    import bench_workloads

    bench_data.write_dataset(tmp_path / "data", 512)
    rows = ["session_loop_memory", "model_only"]
    results: dict[tuple[str, str], list[dict[str, object]]] = {}
    for repeat in (0, 1):
        spec = bench_workloads.Spec(
            config="group_graph_memory",
            model="mlp",
            data_dir=str(tmp_path / "data"),
            batch_size=64,
            epochs=1,
            workdir=str(tmp_path / "work" / str(repeat)),
            repeat=repeat,
            paired_rounds=3,
            group=rows,
        )
        outcome = bench_workloads.run_config(spec)
        for row, result in outcome["group"].items():
            assert result["ok"], result.get("traceback")
            # a group's rows run the paired rounds, not the spec's epochs (6 rounds a
            # run of record crossed most targets)
            assert (result["examples"], result["epochs"], result["repeat"]) == (1536, 3, repeat)
            assert len(result["epoch_rates"]) == 3 and min(result["epoch_rates"]) > 0
            results.setdefault((row, "mlp"), []).append(result)
    alone = bench_workloads.run_config(
        bench_workloads.Spec(
            config="input_memory_tf2",
            model="-",
            data_dir=str(tmp_path / "data"),
            batch_size=64,
            epochs=1,
            workdir=str(tmp_path / "work" / "alone"),
        )
    )
    assert alone["anon_peak_mb"] >= alone["anon_baseline_mb"] > 0 and alone["decoded_mb"] > 0

    tables = bench_report.summarize(results, ["mlp"], rows)
    targets = {t.comparison: t for t in bench_report.check_targets(tables)}
    paired = targets["session_loop_memory / model_only (paired)"]
    loop, model = tables[0].get("session_loop_memory"), tables[0].get("model_only")
    rounds = [
        p / q
        for key in loop.epoch_rates
        for p, q in zip(loop.epoch_rates[key], model.epoch_rates[key], strict=True)
    ]
    assert len(rounds) == 6 and paired.ratio == pytest.approx(statistics.median(rounds))
