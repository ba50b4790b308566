"""``SessionLoop``'s step: its scalars packed into one fetch, or fetched as a dict (issue 56).

One process, one graph, one session: a one-layer model (``Dense(10)`` on 784 inputs, the
step short enough for the loop's Python to show) trained on in-memory batches of 128 by
a hand-written ``make_callable`` loop (``bare``) and by two ``SessionLoop``s over the same
train op, one fetching the step's scalars as one packed tensor (``packed``, the loop's
default, :mod:`tfr_hooks.graph.packed_fetches`) and one as a dict (``dict``, as before),
their epochs in turn, every other round in reverse. A hook notes each step's end, so an
epoch's step time leaves out the run's start and end.

Prints the median microseconds a step of each and the median of the rounds' ratios
``dict / packed`` (above 1: packing is faster).

Run:
    python bench/session_step_ab.py [--steps 300] [--rounds 16] [--unmeasured]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if (HERE.parent / "tfr_hooks").is_dir():
    sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps an epoch")
    parser.add_argument("--rounds", type=int, default=16, help="epochs of each, in turn")
    parser.add_argument("--unmeasured", action="store_true", help="measure_input=False")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    import tf_keras

    import tfr_hooks

    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(128 * args.steps, 784)).astype(np.uint8)
    y = rng.integers(0, 10, size=(128 * args.steps,)).astype(np.int64)

    class StepEnds(tfr_hooks.Hook):
        needs_every_step = False

        def begin(self) -> None:
            self.ends: list[float] = []

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.ends.append(time.perf_counter())

        def secs(self) -> float:  # the first 10 steps warm up
            return (self.ends[-1] - self.ends[10]) / (len(self.ends) - 11)

    with tf.Graph().as_default():
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(128).prefetch(2)
        iterator = v1.data.make_initializable_iterator(data)
        images, labels = iterator.get_next()
        inputs = tf_keras.Input(tensor=tf.cast(images, tf.float32) / 255.0)
        logits = tf_keras.layers.Dense(10)(inputs)
        tf_keras.Model(inputs, logits)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        )
        train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        marks = {"packed": StepEnds(), "dict": StepEnds()}
        loops = {
            name: tfr_hooks.SessionLoop(
                train_op,
                fetches={"loss": loss},
                batch_size=tf.shape(images)[0],
                initializers=[iterator.initializer],
                measure_input=not args.unmeasured,
                hooks=[mark],
            )
            for name, mark in marks.items()
        }
        loops["dict"]._packed.tensor = None  # the dict of fetches, as before the pack
        session = v1.Session()
        session.run(v1.global_variables_initializer())
        bare_step = session.make_callable([train_op, loss])

        def bare() -> float:
            session.run(iterator.initializer)
            for _ in range(10):
                bare_step()
            began, steps = time.perf_counter(), 0
            try:
                while True:
                    bare_step()
                    steps += 1
            except tf.errors.OutOfRangeError:
                pass
            return (time.perf_counter() - began) / steps

        def epoch_of(name: str) -> Any:
            def run() -> float:
                loops[name].run(epochs=1, session=session)
                return marks[name].secs()

            return run

        runs = {"bare": bare, "packed": epoch_of("packed"), "dict": epoch_of("dict")}
        for run in runs.values():  # warm-up
            run()
        times: dict[str, list[float]] = {name: [] for name in runs}
        ratios = []
        for i in range(args.rounds):
            for name in runs if i % 2 == 0 else list(runs)[::-1]:
                times[name].append(runs[name]() * 1e6)
            ratios.append(times["dict"][-1] / times["packed"][-1])
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(
        "us a step: "
        + ", ".join(f"{name} {value:.0f}" for name, value in medians.items())
        + f"; dict / packed, median of {args.rounds} rounds: {statistics.median(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
