"""Float images in memory against ``.cache()``, in one process, in alternating rounds.

The ``img_input_small_{memory,cached}_f32`` rows of ``bench/run.py --suite real`` run in
processes of their own, one after the other; on a shared machine their ratio moves with
the load. This script builds both pipelines of each size in one process (the rows' own
``bench_real.small_pipeline``, ``map_fn`` returning ``tf.cast(image, tf.float32) / 255``)
and times passes of each in turn, every other round in reverse order; it prints the
median examples/s, the median CPU microseconds per example (all threads), and their
ratios (memory / cached; for CPU, cached / memory, so above 1 is the package ahead)::

    python bench/float_images_paired.py --rounds 7
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_real
import bench_workloads as w

__all__ = ["main"]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _one_pass(data: tf.data.Dataset) -> Any:
    @tf.function(autograph=False)
    def run() -> Any:
        def add(seen: Any, batch: Any) -> Any:
            x, y = batch
            touch = tf.cast(tf.reduce_sum(x[:, :1]), tf.int64) * 0
            return seen + tf.shape(y, out_type=tf.int64)[0] + touch

        return data.reduce(tf.constant(0, tf.int64), add)

    return run


def paired(spec: w.Spec, count: int, rounds: int, passes: int) -> dict[str, Any]:
    """Both pipelines of ``count`` examples, timed in turn: medians and ratios."""
    runs = {
        source: _one_pass(
            bench_real.small_pipeline(spec, (40, 40, 3), source, count, bench_real.to_float)
        )
        for source in ("memory", "cached")
    }
    for run in runs.values():  # trace, and a first pass of each
        run()
    rates: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for index in range(rounds):
        for source in list(runs) if index % 2 == 0 else list(runs)[::-1]:
            start, start_cpu = time.perf_counter(), _cpu()
            seen = sum(int(runs[source]()) for _ in range(passes))
            rates[source].append(seen / (time.perf_counter() - start))
            cpu[source].append(1e6 * (_cpu() - start_cpu) / seen)
    rate = {k: statistics.median(v) for k, v in rates.items()}
    us = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "rate": rate,
        "cpu_us": us,
        "ratio": rate["memory"] / rate["cached"],
        "cpu_ratio": us["cached"] / us["memory"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--data-dir", default="/tmp/tfr_hooks_bench/float_images")
    parser.add_argument("--sizes", default=f"{bench_real.SMALL_EXAMPLES},30720")
    args = parser.parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    spec = w.Spec(config="float_images", model="img", data_dir=args.data_dir)
    spec.batch_size = args.batch_size
    for count in (int(n) for n in args.sizes.split(",")):
        passes = max(2, bench_real.SMALL_PASSES * bench_real.SMALL_EXAMPLES // count // 2)
        got = paired(spec, count, args.rounds, passes)
        print(
            f"{count:,} examples, batch {args.batch_size}: in_memory "
            f"{got['rate']['memory']:,.0f} ex/s, .cache() {got['rate']['cached']:,.0f} ex/s, "
            f"ratio {got['ratio']:.2f}; CPU us/ex {got['cpu_us']['memory']:.2f} against "
            f"{got['cpu_us']['cached']:.2f}, ratio {got['cpu_ratio']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
