"""Where ``FunctionLoop``'s step time goes against the model alone, in one process (issue 56).

One model (the benchmark's MLP or CNN), several ways of running its Keras 3
``train_step`` 32 steps a ``tf.function`` call, run in turn (every other round in
reverse order), ``--steps`` steps each a round:

* ``model``: ``model_only_tf2``'s loop, one constant batch, no iterator;
* ``read``: the same loop reading each batch with ``get_next`` from a dataset that
  repeats that batch (``from_tensors(batch).repeat()``): what reading any iterator costs;
* ``ahead``: the same, reading one batch ahead with ``get_next_as_optional`` (the
  fetch beside the step, as ``FunctionLoop`` does);
* ``loop_const``: ``FunctionLoop``'s compiled call (``compiled.Executor``) on that
  repeating dataset;
* ``loop_memory`` / ``loop_memory_unmeasured``: the same call on the benchmark's
  in-memory pipeline (``tfrecord.dataset(in_memory=True, shuffle="global")``), with
  and without the input measurement;
* ``loop_memory_prefetch2``: the in-memory call with ``ReadConfig(prefetch=2)`` (the
  per-batch prefetch that data gathered a pass at a time had before issue 56).

Prints, per variant, the median microseconds a step, the median of the rounds' speed
ratios to the first variant (with their quartiles) and the median CPU time a step of
the whole process (every thread).

Run (after any ``python bench/run.py`` of the default ``--examples``, which writes the data):
    python bench/loop_gap.py --model mlp --rounds 16 --steps 224
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf
from bench_data import load_arrays
from bench_workloads import keras3_model, steps_on

from tfr_hooks import tfrecord
from tfr_hooks.tf2.compiled import Executor

VARIANTS = "model,read,ahead,loop_const,loop_memory,loop_memory_unmeasured,loop_memory_prefetch2"


def _loops(net: Any, batch: Any, repeated: Any) -> dict[str, Callable[[Any], Any]]:
    """The hand-written loops: ``n`` steps a call."""
    many = steps_on(net, lambda: batch)
    read = steps_on(net, repeated.get_next)

    def ahead(n: Any) -> Any:
        def body(i: Any, pending: Any) -> Any:
            logs = net.train_step(pending.get_value())
            fetched = repeated.get_next_as_optional()
            with tf.control_dependencies(tf.nest.flatten(logs)):
                return i + 1, fetched

        first = repeated.get_next_as_optional()
        cond = lambda i, p: tf.logical_and(i < n, p.has_value())  # noqa: E731
        return tf.while_loop(cond, body, [tf.constant(0), first])

    return {
        k: tf.function(f, autograph=False)
        for k, f in (("model", many), ("read", read), ("ahead", ahead))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=224, help="steps a round (multiple of 32)")
    parser.add_argument("--variants", default=VARIANTS)
    parser.add_argument(
        "--data-dir", default=os.path.join(tempfile.gettempdir(), "tfr_hooks_bench", "data-60000")
    )
    args = parser.parse_args()
    variants = args.variants.split(",")
    images, labels = load_arrays(args.data_dir)
    net = keras3_model(args.model)
    batch = (tf.constant(images[:128]), tf.constant(labels[:128]))
    repeated = iter(tf.data.Dataset.from_tensors(batch).repeat())
    loops = _loops(net, batch, repeated)
    strategy = tf.distribute.get_strategy()
    calls: dict[str, list[Any]] = {}
    for name in variants:
        if name in loops:
            continue
        extra = {"read_config": tfrecord.ReadConfig(prefetch=2)} if "prefetch2" in name else {}
        data = tf.data.Dataset.from_tensors(batch).repeat()
        if name.startswith("loop_memory"):
            data = tfrecord.dataset(
                os.path.join(args.data_dir, "records"), 128, seed=1, num_epochs=None,
                as_tuple=("image", "label"), in_memory=True, shuffle="global",
                drop_remainder=True, **extra,
            )  # fmt: skip
        executor = Executor(net.train_step, strategy, net, measure_input="unmeasured" not in name)
        iterator = iter(data)
        calls[name] = [executor, iterator, executor.first(iterator)[0]]
    limit, bound = tf.constant(32, tf.int64), tf.constant(2**62, tf.int64)

    def steps(name: str) -> None:
        for _ in range(args.steps // 32):
            if name in loops:
                loops[name](tf.constant(32))
                continue
            executor, iterator, pending = calls[name]
            out = executor.execute(iterator, pending, limit, bound)
            calls[name][2] = out[3]
            int(out[0])

    wall: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.rounds + 1):
        for name in variants if i % 2 == 0 else variants[::-1]:
            c0, t0 = time.process_time(), time.perf_counter()
            steps(name)
            if i:  # round 0: tracing and warm-up
                wall[name].append(1e6 * (time.perf_counter() - t0) / args.steps)
                cpu[name].append(1e6 * (time.process_time() - c0) / args.steps)
    base = np.array(wall[variants[0]])
    for name in variants:
        speed = base / np.array(wall[name])
        q1, q3 = np.percentile(speed, [25, 75])
        print(
            f"{name:24s} {statistics.median(wall[name]):7.0f} us/step  speed vs {variants[0]} "
            f"{np.median(speed):.3f} ({q1:.3f}-{q3:.3f})  CPU {statistics.median(cpu[name]):7.0f} "
            "us/step",
            flush=True,
        )


if __name__ == "__main__":
    main()
