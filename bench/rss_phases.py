"""Where the in-memory pipeline's anonymous RSS grows: the load, a trim, the passes (finding 18).

One process builds the benchmark's TF2 in-memory pipeline (``input_memory_tf2``'s) over
the digits of record and reads three passes, while a thread samples the process's
anonymous RSS every ``--interval`` seconds. It prints, at each phase, the growth over the
process's baseline now and at its peak so far (MiB): after the build (the load), after
``malloc_trim(0)`` with ``--trim`` (glibc hands the free memory of its arenas back to the
system; the pipeline trims once itself since finding 19, so this one finds little),
after the first batch, after 100 batches and after three passes. Run it with
``MALLOC_ARENA_MAX=1`` or ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment to see the
growth with one malloc arena, or with a fixed mmap threshold.

Run (after any `python bench/run.py` of the default `--examples`, which writes the data):
    python bench/rss_phases.py [--interval 0.001] [--trim]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if (HERE.parent / "tfr_hooks").is_dir():
    sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.001)
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) after the load")
    parser.add_argument("--data-dir", default="/tmp/tfr_hooks_bench/data-60000")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bench_workloads as w

    w.quiet()
    base = w._anon_rss_mb()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], w._anon_rss_mb())
            time.sleep(args.interval)

    threading.Thread(target=sample, daemon=True).start()

    def mark(phase: str) -> None:
        now = w._anon_rss_mb()
        peak[0] = max(peak[0], now)
        print(f"{phase}: +{now - base:.1f} MiB now, +{peak[0] - base:.1f} MiB at the peak")

    spec = w.Spec(config="input_memory_tf2", model="mlp", data_dir=args.data_dir)
    data = w.tf2_dataset(spec, source="memory")
    mark("built (the data loaded)")
    if args.trim:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        mark("malloc_trim(0)")
    batches = iter(data)
    next(batches)
    mark("first batch")
    for count, _ in enumerate(batches, start=2):
        if count == 100:
            mark("100 batches")
        if count == 3 * w.steps_per_epoch(spec):
            break
    mark("three passes")
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
