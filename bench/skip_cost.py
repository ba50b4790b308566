"""What a mid-epoch resume costs: the seconds to skip 1,000 trained batches.

A run resumed mid-epoch (``PreemptionCheckpoint``, or ``BackupAndRestore(save_freq=N)``
through ``KerasCallbacks``) starts the epoch's data again and passes over the batches the
interrupted run trained on, in the compiled function, without a step: it reads and parses
them again. This measures that skip on the benchmark's data (60,000 28x28 images, 4
shards, global batch 128, shuffled with a seed) for the streamed, packed and in-memory
pipelines, one process, no strategy::

    python bench/skip_cost.py [--examples 60000] [--batch 128] [--repeats 3]

It prints one line per pipeline: the median seconds per 1,000 skipped batches (and per
1,000 examples).
"""

from __future__ import annotations

import argparse
import os
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
    from tfr_hooks.tf2.function_loop import _FunctionRunner

    source = os.path.join(directory, "packed" if pipeline == "packed" else "records")
    data = tfrecord.dataset(
        source,
        batch,
        shuffle_buffer=10_000,
        seed=0,
        in_memory=pipeline == "memory",
        as_tuple=("image", "label"),
    )

    def step_fn(batch: object) -> dict[str, object]:
        return {"n": tf.constant(0.0)}

    loop = FunctionLoop(data, step_fn=step_fn, handle_signals=False)
    runner = _FunctionRunner(loop._steps, hooks=[], dataset=data)
    runner.start()
    runner.start_epoch(restart_data=True)  # the pass, and its first batch (the buffer fill)
    runner.skip_batches(1)  # traces the skip function
    start = time.perf_counter()
    skipped, _ = runner.skip_batches(count)
    seconds = time.perf_counter() - start
    if skipped != count:
        raise SystemExit(f"skipped {skipped} batches, not {count}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    count = args.examples // args.batch - 4
    with tempfile.TemporaryDirectory(prefix="tfr_hooks_skip_") as root:
        write_dataset(root, args.examples)
        for pipeline in ("stream", "packed", "memory"):
            runs = [skip_seconds(root, pipeline, args.batch, count) for _ in range(args.repeats)]
            per_1000 = statistics.median(runs) / count * 1000
            print(
                f"{pipeline:7s} skip of {count} batches of {args.batch}: "
                f"{per_1000:.3f} s per 1,000 batches, "
                f"{per_1000 / args.batch * 1000:.1f} ms per 1,000 examples "
                f"(runs: {', '.join(f'{r:.3f}' for r in runs)} s)"
            )


if __name__ == "__main__":
    main()
