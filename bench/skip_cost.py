"""What a mid-epoch resume costs: the seconds to skip 1,000 trained batches.

A run resumed mid-epoch (``PreemptionCheckpoint``, or ``BackupAndRestore(save_freq=N)``
through ``KerasCallbacks``) starts the epoch's data again and passes over the batches the
interrupted run trained on, without a step: it reads and parses them again. In
``FunctionLoop`` the skip runs in a compiled function; in ``SessionLoop`` (with
``EpochCheckpoint``) each batch is pulled through the data's batch size tensor, one
``session.run`` each. A graph-mode run resumed at epoch E also starts the data E times
first (the replay), so that a seeded shuffle draws the E-th pass's order. This measures
both on the benchmark's data (60,000 28x28 images, 4 shards, batch 128, shuffled with a
seed) for the streamed, packed and in-memory pipelines, one process, no strategy::

    python bench/skip_cost.py [--examples 60000] [--batch 128] [--repeats 3] \
        [--out bench/results/resume_cost.md]

It writes one row per loop and pipeline: the median seconds per 1,000 skipped batches
(and milliseconds per 1,000 examples), and for graph mode the milliseconds one replayed
pass costs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_data import write_dataset


def skip_seconds(directory: str, pipeline: str, batch: int, count: int) -> float:
    """Seconds ``FunctionLoop``'s skip takes for ``count`` batches of a fresh pass."""
    import tensorflow as tf

    from tfr_hooks import FunctionLoop, tfrecord
    from tfr_hooks.tf2.runner import FunctionRunner

    source = os.path.join(directory, "packed" if pipeline == "packed" else "records")
    data = tfrecord.dataset(
        source,
        batch,
        shuffle="global" if pipeline == "memory" else 10_000,
        seed=0,
        in_memory=pipeline == "memory",
        as_tuple=("image", "label"),
    )

    def step_fn(batch: object) -> dict[str, object]:
        return {"n": tf.constant(0.0)}

    loop = FunctionLoop(data, step_fn=step_fn, handle_signals=False)
    runner = FunctionRunner(loop._steps, hooks=[], dataset=data)
    runner.start()
    runner.start_epoch(restart_data=True)  # the pass, and its first batch (the buffer fill)
    runner.skip_batches(1)  # traces the skip function
    start = time.perf_counter()
    skipped, _ = runner.skip_batches(count)
    seconds = time.perf_counter() - start
    if skipped != count:
        raise SystemExit(f"skipped {skipped} batches, not {count}")
    return seconds


def graph_costs(directory: str, pipeline: str, batch: int, count: int) -> tuple[float, float]:
    """Seconds ``SessionLoop``'s skip takes for ``count`` batches, and one replayed pass's.

    The skip is what the loop does on resume: the batch size tensor of ``read_batches``
    pulled through a callable, one ``session.run`` a batch; the replay is one run of the
    data's initializers.
    """
    import tensorflow as tf

    from tfr_hooks import tfrecord

    source = os.path.join(directory, "packed" if pipeline == "packed" else "records")
    with tf.Graph().as_default():
        data = tfrecord.read_batches(
            source,
            batch,
            shuffle="global" if pipeline == "memory" else 10_000,
            seed=0,
            in_memory=pipeline == "memory",
            as_tuple=("image", "label"),
        )
        with tf.compat.v1.Session() as session:
            session.run(data.initializers)  # the first pass: the data is loaded, traced
            start = time.perf_counter()
            session.run(data.initializers)
            replay = time.perf_counter() - start
            pull = session.make_callable(data.batch_size)
            pull()  # the pass's first batch (the buffer fill)
            start = time.perf_counter()
            for _ in range(count):
                pull()
            return time.perf_counter() - start, replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the table to this Markdown file")
    args = parser.parse_args()
    count = args.examples // args.batch - 4
    rows = []
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="tfr_hooks_skip_") as root:
        write_dataset(root, args.examples)
        for pipeline in ("stream", "packed", "memory"):
            runs = [skip_seconds(root, pipeline, args.batch, count) for _ in range(args.repeats)]
            rows.append(("FunctionLoop", pipeline, statistics.median(runs), runs, None))
            graph = [graph_costs(root, pipeline, args.batch, count) for _ in range(args.repeats)]
            skips = [g[0] for g in graph]
            replay = statistics.median(g[1] for g in graph)
            rows.append(("SessionLoop", pipeline, statistics.median(skips), skips, replay))
    lines = [
        "# What a mid-epoch resume costs",
        "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Command: `python bench/skip_cost.py --examples {args.examples} --batch "
        f"{args.batch} --repeats {args.repeats}" + (f" --out {args.out}`" if args.out else "`"),
        f"- Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load average at "
        f"start {load}",
        f"- {args.examples:,} 28x28 images in 4 shards, batch {args.batch}, shuffled with a "
        f"seed; {count} batches skipped; median of {args.repeats} runs",
        "",
        "| loop | pipeline | s per 1,000 skipped batches | ms per 1,000 examples "
        "| runs (s) | one replayed pass (ms) |",
        "|---|---|---:|---:|---|---:|",
    ]
    for loop, pipeline, median, runs, replay in rows:
        per_1000 = median / count * 1000
        lines.append(
            f"| {loop} | {pipeline} | {per_1000:.3f} | {per_1000 / args.batch * 1000:.1f} "
            f"| {', '.join(f'{r:.3f}' for r in runs)} "
            f"| {'' if replay is None else f'{replay * 1000:.0f}'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
