"""Benchmark tfr_hooks' loops against what users would pick instead, and the ceilings.

Writes a synthetic TFRecord data set with the package's writer, then trains the same
model (an MLP and a small CNN) with every configuration of ``bench_configs.ROWS``,
``--repeats`` times each, round-robin (every other round in reverse order), and writes
``bench/results/latest.md`` (the table) and ``bench/results/latest.png`` (the chart).

Each run happens in its own worker process, so its peak RSS and its graph are its own.
The workers are forked from a fork server that has imported TensorFlow, tf_keras and
Keras once (``multiprocessing`` "forkserver" with preloading), so a run does not pay
TensorFlow's import; only its timed epochs are measured anyway.

Run:
    tox -e bench                        # the full benchmark (about 45 min on 2 cores)
    python bench/run.py --quick         # tiny data, 1 repeat, results in /tmp
    python bench/run.py --only keras3_fit,function_loop_32 --models mlp
    python bench/run.py --worker session_loop_queue --model mlp --profile /tmp/p.txt
    python bench/run.py --suite real --quick  # JPEG images and token sequences (bench_real)

``--suite real`` runs the rows of ``bench_configs.REAL_ROWS`` instead: data shaped as real
TFRecords are (JPEG ``image/encoded`` with variable-length box labels; token-id lists of
long-tailed lengths), written with a plain ``tf.io.TFRecordWriter`` and cached by their
parameters under the data directory (``--images``, ``--texts``).

``--suite positions`` runs issue 45's rows in one worker (bench/positions.py): resume by
position against the replay, TensorFlow's own iterator checkpoint, Grain over ArrayRecord,
the global shuffle's input-alone speed and the record index's build rate, on
``--records`` class-ordered records (2M; cached under the data directory; about 10 min
on 2 cores the first time). ``--suite all`` runs the three suites.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if (ROOT / "tfr_hooks").is_dir():  # a checkout: benchmark the working tree
    sys.path.insert(0, str(ROOT))

from bench_configs import (  # noqa: E402
    DESCRIPTIONS,
    GROUP_OF,
    GROUPS,
    MODEL_FREE,
    MULTI_WORKER,
    REAL_KINDS,
    REAL_ROWS,
    ROWS,
    UNMEASURED,
    kind_of,
)
from bench_report import (  # noqa: E402
    chart_title,
    render_markdown,
    render_png,
    render_summary,
    replace_summary,
    summarize,
)
from positions import DEFAULTS as POSITIONS_DEFAULTS  # noqa: E402
from positions import QUICK as POSITIONS_QUICK  # noqa: E402
from positions_report import render_positions  # noqa: E402

DEFAULTS = {"examples": 60000, "repeats": 3, "epochs": 2, "images": 20000, "texts": 50000}
QUICK = {"examples": 2048, "repeats": 1, "epochs": 1, "images": 2048, "texts": 4096}
SUITE_FILES = ("latest.json", "latest_real.json", "latest_positions.json")
TMP = Path(tempfile.gettempdir()) / "tfr_hooks_bench"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny data, 1 repeat, output in /tmp")
    parser.add_argument("--repeats", type=int, help="runs of each configuration (default 3)")
    parser.add_argument("--examples", type=int, help="examples in the data set (default 60000)")
    parser.add_argument("--epochs", type=int, help="timed epochs per run after 1 warm-up (2)")
    parser.add_argument(
        "--paired-rounds",
        type=int,
        help="timed rounds of each paired row per run (a group's rows, _unmeasured rows), "
        "after 1 warm-up (3 x --epochs)",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp,cnn")
    parser.add_argument(
        "--suite",
        choices=("digits", "real", "positions", "all"),
        default="digits",
        help="digits rows (default), real-world-shaped data (images, text), positions "
        "(resume, checkpoints, Grain: bench/positions.py), or all three",
    )
    parser.add_argument("--records", type=int, help="--suite positions: records (2,000,000)")
    parser.add_argument("--images", type=int, help="--suite real: JPEG images (default 20000)")
    parser.add_argument("--texts", type=int, help="--suite real: token sequences (50000)")
    parser.add_argument("--only", help="comma-separated configurations to run")
    parser.add_argument("--skip", help="comma-separated configurations to leave out")
    parser.add_argument("--data-dir", type=Path, help="where to write the data set")
    parser.add_argument("--out", type=Path, help="where to write latest.md and latest.png")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", metavar="CONFIG", help="run one configuration here, print JSON")
    parser.add_argument("--model", default="mlp", help="with --worker: the model")
    parser.add_argument("--repeat-index", type=int, default=0, help="with --worker")
    parser.add_argument("--profile", help="with --worker: write a pyinstrument profile here")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else DEFAULTS
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.records is None:
        args.records = (POSITIONS_QUICK if args.quick else POSITIONS_DEFAULTS)["records"]
    args.positions_dir = TMP / "positions" if args.data_dir is None else args.data_dir
    # the real suite's data sets sit in one directory, each named by its parameters
    args.real_dir = TMP / "real" if args.data_dir is None else args.data_dir / "real"
    if args.data_dir is None:
        args.data_dir = TMP / f"data-{args.examples}"
    if args.out is None:
        args.out = TMP / "quick" if args.quick else HERE / "results"
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in ("mlp", "cnn")]
    if bad or not models:
        parser.error(f"--models takes mlp and/or cnn; got {args.models!r}")
    digits = [name for name, _ in ROWS]
    real = [name for name, _ in REAL_ROWS]
    configs = {"digits": digits, "real": real, "positions": [], "all": digits + real}[args.suite]
    if args.only:
        wanted = [c.strip() for c in args.only.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in DESCRIPTIONS]
        if unknown:
            parser.error(f"unknown configurations {unknown}; known: {', '.join(DESCRIPTIONS)}")
        configs = [c for c in digits + real if c in wanted]
    if args.skip:
        configs = [c for c in configs if c not in args.skip.split(",")]
    args.configs = configs
    # a table per model for the digits rows, and one per real data set run
    args.model_list = models if any(kind_of(c) is None for c in configs) else []
    args.model_list += [k for k in REAL_KINDS if any(kind_of(c) == k for c in configs)]
    if args.worker is not None and args.worker not in DESCRIPTIONS:
        parser.error(f"unknown configuration {args.worker!r}; known: {', '.join(DESCRIPTIONS)}")
    return args


def spec_for(args: argparse.Namespace, config: str, model: str, repeat: int) -> dict[str, Any]:
    workdir = TMP / "work" / f"{config}-{model}-{repeat}"
    real = kind_of(config) is not None
    return {
        "config": config,
        "model": model,
        "data_dir": str(args.real_dir if real else args.data_dir),
        "real": {"img": args.images, "txt": args.texts} if real else None,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "workdir": str(workdir),
        "seed": args.seed,
        "repeat": repeat,
        "paired_rounds": args.paired_rounds,
        "group": [c for c in GROUPS[config] if c in args.configs] if config in GROUPS else None,
    }


def plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(config, model) pairs of one round; model-free rows once, under model "-".

    The real suite's rows run once each, under their data set's name (``img``, ``txt``).
    A row without the input measurement (``UNMEASURED``) runs right after its partner,
    when both run, so the pair sees the same state of the machine. The rows of a group
    (``GROUPS``) run as one entry, the group, in one worker process, their epochs in turn.
    """
    configs = [c for c in args.configs if c not in UNMEASURED or UNMEASURED[c] not in args.configs]
    for unmeasured, measured in UNMEASURED.items():
        if unmeasured in args.configs and measured in configs:
            configs.insert(configs.index(measured) + 1, unmeasured)
    configs = _grouped(configs)
    pairs = [(c, "-") for c in configs if c in MODEL_FREE]
    for model in args.model_list:
        if model in REAL_KINDS:
            pairs += [(c, model) for c in configs if kind_of(c) == model]
        else:
            pairs += [(c, model) for c in configs if c not in MODEL_FREE and not kind_of(c)]
    return pairs


def _grouped(configs: list[str]) -> list[str]:
    """``configs`` with the rows of a group (two or more asked for) replaced by the group.

    The group takes the place of its first row; a lone row of a group runs on its own.
    """
    asked = {group: [c for c in rows if c in configs] for group, rows in GROUPS.items()}
    out: list[str] = []
    for config in configs:
        group = GROUP_OF.get(config)
        if group is None or len(asked[group]) < 2:
            out.append(config)
        elif group not in out:
            out.append(group)
    return out


class Pool:
    """Runs each task in a new process forked from a server that imported TensorFlow."""

    def __init__(self, timeout: float) -> None:
        # the fork server imports its preload with the environment's path (Python 3.11
        # does not pass sys.path to it): put bench/ and the checkout there
        paths = [p for p in sys.path[:2] if p] + [os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["bench_workloads"])
        self.timeout = timeout

    def call_cluster(self, spec: dict[str, Any], workers: int) -> dict[str, Any]:
        """Run ``spec`` as ``workers`` processes of one loopback cluster; the chief's result.

        Each worker gets its own ``TF_CONFIG``; all start before any is waited for, and
        the result is the chief's (its logs and counts are global), with every worker's
        examples/s beside it.
        """
        import bench_entry as entries

        from tfr_hooks.tfrecord.pipelines.sharding import loopback_cluster  # no TensorFlow import

        started = []
        for config in loopback_cluster(workers):
            receive, send = self.ctx.Pipe(duplex=False)
            process = self.ctx.Process(
                target=entries.worker_entry, args=({**spec, "tf_config": config}, send), daemon=True
            )
            process.start()
            send.close()
            started.append((process, receive))
        results = [self._collect(process, receive) for process, receive in started]
        chief = dict(results[0])
        if all(r.get("ok") for r in results):
            chief["worker_examples_per_sec"] = [r["examples_per_sec"] for r in results]
        else:
            failed = next(r for r in results if not r.get("ok"))
            chief = {**failed, "ok": False}
        return chief

    def _collect(self, process: Any, receive: Any) -> dict[str, Any]:
        try:
            if receive.poll(self.timeout):
                result: dict[str, Any] = receive.recv()
            else:
                result = {"ok": False, "error": f"timed out after {self.timeout:.0f} s"}
        except EOFError:
            result = {"ok": False, "error": f"worker died (exit code {process.exitcode})"}
        finally:
            receive.close()
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(10)
        if result.get("ok") is not True and process.exitcode not in (0, None):
            result.setdefault("error", f"exit code {process.exitcode}")
        return result

    def call(self, target_name: str, *args: Any) -> dict[str, Any]:
        """Run ``bench_entry.<target_name>(*args, conn)`` in a new worker; return its dict."""
        import bench_entry as entries

        target = getattr(entries, target_name)
        receive, send = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=target, args=(*args, send), daemon=True)
        process.start()
        send.close()
        return self._collect(process, receive)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "cpu_model": platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        info["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        info["load"] = "n/a"
    return info


def write_report(
    args: argparse.Namespace, results: dict[Any, list[Any]], meta: dict[str, Any]
) -> Path:
    """Write the run's report, chart and raw runs to ``args.out``.

    In ``bench/results`` (the runs of record), the digits suite's runs are kept in
    ``latest.json`` and the real suite's in ``latest_real.json``, and ``latest.md`` holds
    the report of each suite's latest run, one after the other, each with its own date,
    command and machine: ratios are only ever taken within one run.
    """
    tables = summarize(results, args.model_list, args.configs)
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / "latest.md"
    title = chart_title(meta)
    raw = {f"{c}|{m}": runs for (c, m), runs in results.items()}
    digits_run = any(kind_of(c) is None for c in args.configs)
    of_record = args.out.resolve() == (HERE / "results").resolve() and not args.only
    if of_record and not digits_run:  # the real suite alone: beside the digits run
        (args.out / "latest_real.json").write_text(
            json.dumps({"meta": meta, "runs": raw}, indent=1)
        )
        render_png(tables, str(args.out / "latest_real.png"), title)
        md.write_text(records_report(args.out))
        return md
    md.write_text(render_markdown(tables, meta))
    render_png(tables, str(args.out / "latest.png"), title)
    (args.out / "latest.json").write_text(json.dumps({"meta": meta, "runs": raw}, indent=1))
    if of_record and digits_run:
        # the full run of record: docs/benchmarks.md quotes it (the README links that page)
        page = HERE.parent / "docs" / "benchmarks.md"
        summary = render_summary(tables, meta)
        page.write_text(replace_summary(page.read_text(), summary))
        if any((args.out / name).exists() for name in SUITE_FILES[1:]):
            md.write_text(records_report(args.out))
    return md


def run_positions(args: argparse.Namespace, pool: Pool, meta: dict[str, Any]) -> int:
    """``--suite positions``: bench/positions.py in one worker; its report and targets.

    In ``bench/results`` the run is kept in ``latest_positions.json`` and ``latest.md``
    holds it after the other suites' reports; elsewhere (``--out``, ``--quick``)
    ``latest.md`` holds it alone.
    """
    started = time.perf_counter()
    spec = {
        **(POSITIONS_QUICK if args.quick else POSITIONS_DEFAULTS),
        "records": args.records,
        "data_dir": str(args.positions_dir),
        "workdir": str(TMP / "work" / "positions"),
    }
    print(f"positions: {args.records:,} records in {args.positions_dir} ...", flush=True)
    result = pool.call("positions_entry", spec)
    if not result.get("ok"):
        print(result.get("traceback", result.get("error")), file=sys.stderr)
        return 1
    meta = {**meta, "python": result.pop("python", platform.python_version())}
    meta["wall_minutes"] = (time.perf_counter() - started) / 60
    saved = {"meta": meta, "positions": {k: v for k, v in result.items() if k != "ok"}}
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / "latest.md"
    if args.out.resolve() == (HERE / "results").resolve():
        (args.out / "latest_positions.json").write_text(json.dumps(saved, indent=1))
        md.write_text(records_report(args.out))
    else:
        (args.out / "positions.json").write_text(json.dumps(saved, indent=1))
        md.write_text(render_positions(saved["positions"], meta))
    print(f"wrote {md}", flush=True)
    print(render_positions(saved["positions"], meta))
    return 0


def _report_of(path: Path) -> str:
    """The markdown report of one saved run (``latest.json``, ``latest_real.json``, ...)."""
    saved = json.loads(path.read_text())
    if "positions" in saved:
        return render_positions(saved["positions"], saved["meta"])
    results: dict[tuple[str, str], list[Any]] = {}
    for key, runs in saved["runs"].items():
        config, model = key.split("|", 1)
        results[(config, model)] = runs
    meta = saved["meta"]
    configs = list(meta.get("configs") or dict.fromkeys(c for c, _ in results))
    models = list(dict.fromkeys(m for _, m in results if m != "-"))
    return render_markdown(summarize(results, models, configs), meta)


def records_report(out: Path) -> str:
    """``latest.md`` of the runs of record: the digits run, the real suite's, the positions'."""
    parts = [_report_of(out / name) for name in SUITE_FILES if (out / name).exists()]
    return "\n\n---\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.worker is not None:
        return run_worker(args)
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python bench/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "repeats": args.repeats,
        "configs": args.configs,
        **machine(),
    }
    pool = Pool(args.timeout)
    if args.suite == "positions":
        pool.timeout = max(args.timeout, 3600.0)  # one worker runs the whole suite
        return run_positions(args, pool, meta)
    if any(kind_of(c) is None for c in args.configs):
        print(f"writing {args.examples:,} examples to {args.data_dir} ...", flush=True)
        info = pool.call("write_entry", str(args.data_dir), args.examples, args.seed)
        if not info.get("ok"):
            print(info.get("traceback", info.get("error")), file=sys.stderr)
            return 1
        meta.update({k: v for k, v in info.items() if k not in ("ok", "directory")})
        meta["mb"] = info["bytes"] / 2**20
        meta["write_rate"] = info["examples"] / info["write_seconds"]
        print(f"  {info['write_seconds']:.2f} s; TensorFlow {info['tensorflow']}", flush=True)
    if any(kind_of(c) for c in args.configs):
        print(
            f"writing (or reusing) {args.images:,} JPEG images and {args.texts:,} token "
            f"sequences in {args.real_dir} ...",
            flush=True,
        )
        real = pool.call("real_entry", str(args.real_dir), args.images, args.texts, args.seed)
        if not real.get("ok"):
            print(real.get("traceback", real.get("error")), file=sys.stderr)
            return 1
        meta["real"] = {
            k: {f: v for f, v in real[k].items() if f != "files"} for k in ("images", "text")
        }
        for k in ("images", "text"):
            done = "reused" if real[k].get("reused") else f"{real[k]['write_seconds']:.1f} s"
            print(f"  {k}: {real[k]['directory']} ({done})", flush=True)
        meta.update(_versions(pool) if "tensorflow" not in meta else {})
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    pairs = plan(args)
    for repeat in range(args.repeats):
        # every other round in reverse, so that neither row of a pair always runs first
        for i, (config, model) in enumerate(pairs if repeat % 2 == 0 else pairs[::-1]):
            t0 = time.perf_counter()
            spec = spec_for(args, config, model, repeat)
            if config in MULTI_WORKER:
                result = pool.call_cluster(spec, MULTI_WORKER[config])
            else:
                rows = len(spec["group"] or [None])  # a group: its rows' time in one worker
                pool.timeout = args.timeout * rows
                result = pool.call("worker_entry", spec)
                pool.timeout = args.timeout
            if result.get("ok") and "group" in result:
                _report_group(result, model, results, f"[{repeat + 1}/{args.repeats}")
            elif config in GROUPS:  # the whole group failed: each of its rows did
                for row in spec["group"]:
                    results.setdefault((row, model), []).append(result)
            else:
                results.setdefault((config, model), []).append(result)
            if result.get("ok") and "group" in result:
                status = f"{len(result['group'])} rows in turn  RSS {result['rss_mb']:5.0f} MB"
            elif result.get("ok"):
                status = (
                    f"{result['examples_per_sec']:9,.0f} ex/s  {result['seconds']:6.2f} s timed  "
                    f"RSS {result['rss_mb']:5.0f} MB"
                )
            else:
                status = "FAILED: " + str(result.get("error")).splitlines()[0][:200]
                if result.get("traceback"):
                    print(result["traceback"], file=sys.stderr, flush=True)
            print(
                f"[{repeat + 1}/{args.repeats} {i + 1:2d}/{len(pairs)}] {config:24s} {model:3s} "
                f"{status}  ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
        meta["wall_minutes"] = (time.perf_counter() - started) / 60
        write_report(args, results, meta)  # after each round, so a cut-short run leaves one
    md = write_report(args, results, meta)
    print(f"wrote {md} and {md.with_suffix('.png')}", flush=True)
    print(md.read_text())
    if args.suite == "all" and not args.only:
        pool.timeout = max(args.timeout, 3600.0)
        return run_positions(args, pool, {k: v for k, v in meta.items() if k != "configs"})
    return 0


def _report_group(
    result: dict[str, Any],
    model: str,
    results: dict[tuple[str, str], list[dict[str, Any]]],
    prefix: str,
) -> None:
    """File each row of a group's result under its own name, and print it."""
    for row, outcome in result["group"].items():
        results.setdefault((row, model), []).append(outcome)
        if outcome.get("ok"):
            status = f"{outcome['examples_per_sec']:9,.0f} ex/s  {outcome['seconds']:6.2f} s timed"
        else:
            status = "FAILED: " + str(outcome.get("error")).splitlines()[0][:200]
            if outcome.get("traceback"):
                print(outcome["traceback"], file=sys.stderr, flush=True)
        print(f"{prefix}    ] {row:24s} {model:3s} {status}", flush=True)


def _versions(pool: Pool) -> dict[str, Any]:
    """The library versions, from a worker (the parent never imports TensorFlow)."""
    info = pool.call("versions_entry")
    return {k: v for k, v in info.items() if k != "ok"}


def run_worker(args: argparse.Namespace) -> int:
    """``--worker CONFIG``: one run in this process (pays the import; for profiling)."""
    import bench_workloads as workloads

    workloads.quiet()
    kind = kind_of(args.worker)
    if kind is not None:
        from bench_real_data import write_real

        write_real(args.real_dir, args.images, args.texts, args.seed)
    elif not (Path(args.data_dir) / "info.json").exists():
        from bench_data import write_dataset

        write_dataset(args.data_dir, args.examples, args.seed)
    model = "-" if args.worker in MODEL_FREE else (kind or args.model)
    spec = spec_for(args, args.worker, model, args.repeat_index)
    spec["profile"] = args.profile
    result = workloads.run_config(workloads.Spec(**spec))
    print(json.dumps({"config": args.worker, "model": model, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
