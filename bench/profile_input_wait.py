"""What measuring the input wait costs a step, timed in one process (issue 21).

The benchmark's ``*_unmeasured`` rows price the measurement across worker processes, as
a ratio of medians; on a shared 2-core machine their spread is far wider than 1%. This
script times the same step with and without it in one process, on one graph and one
model: for each loop, two loops over the same train op (``SessionLoop``) or the same
compiled Keras 3 model (``FunctionLoop``, ``steps_per_execution=32``), one with
``measure_input=True`` and one with ``False``, on the benchmark's in-memory pipeline,
their epochs run in turn (every other round in reverse order). A hook notes the time of
each step's end, so an epoch's step time leaves out the run's start and end. It prints,
per loop, the median step time of each and the median of the rounds' ratios.

``--model tiny`` (one ``Dense(10)`` layer) makes the step short, so that the
measurement's absolute cost (microseconds a step) stands out of the machine's noise; a
real model's step only dilutes it.

Run:
    python bench/profile_input_wait.py [--rounds 15] [--steps 192] [--model mlp]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if (HERE.parent / "tfr_hooks").is_dir():
    sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="epochs of each loop, in turn")
    parser.add_argument("--steps", type=int, default=200, help="steps an epoch")
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn", "tiny"))
    parser.add_argument("--examples", type=int, default=8192, help="examples in the data")
    args = parser.parse_args(argv)

    import bench_workloads as w
    from bench_data import write_dataset

    import tfr_hooks

    w.quiet()
    if args.model == "tiny":  # the benchmark's models' head alone: one Dense(10) layer
        layers = w._layers

        def tiny(keras_module: Any, model: str, inputs: Any) -> Any:
            if model != "tiny":
                return layers(keras_module, model, inputs)
            scaled = keras_module.layers.Rescaling(1.0 / 255)(inputs)
            return keras_module.layers.Dense(10)(scaled)

        w._layers = tiny

    class StepEnds(tfr_hooks.Hook):
        """The mean seconds a step, from the first step's end to the last's."""

        def begin(self) -> None:
            self.ends: list[float] = []

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.ends.append(time.perf_counter())

        def secs_per_step(self, steps_per_call: int) -> float:
            return (self.ends[-1] - self.ends[0]) / ((len(self.ends) - 1) * steps_per_call)

    def rounds(runs: dict[bool, Any]) -> dict[bool, list[float]]:
        """Run the two loops' epochs in turn; each one's seconds a step, per round."""
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.rounds + 1):
            order = (True, False) if i % 2 == 0 else (False, True)
            for measured in order:
                secs = runs[measured]()
                if i:  # round 0: tracing and warm-up
                    times[measured].append(secs)
        return times

    def report(name: str, times: dict[bool, list[float]]) -> None:
        on, off = statistics.median(times[True]), statistics.median(times[False])
        ratios = [b / a for a, b in zip(times[True], times[False], strict=True)]
        print(
            f"{name:32s} measured {on * 1e6:8.1f} us/step  unmeasured {off * 1e6:8.1f} us/step  "
            f"difference {(on - off) * 1e6:+7.1f} us  rounds' ratio (unmeasured/measured) "
            f"median {statistics.median(ratios):.4f} ({min(ratios):.3f}-{max(ratios):.3f})",
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="tfr_hooks_profile_") as tmp:
        write_dataset(tmp, args.examples)
        # the graph pipeline reads epochs + 2 passes per initialization: enough for a run
        passes = args.steps * args.rounds // max(1, args.examples // 128) + 1
        spec = w.Spec(config="profile", model=args.model, data_dir=tmp, workdir=tmp, epochs=passes)

        # SessionLoop: two loops on one train op, one session
        import tensorflow as tf

        with tf.Graph().as_default():
            batches = w.read_batches(spec, "memory")
            x, y = batches.tensors
            _, training, _ = w.graph_training(args.model, x, y)
            hooks = {m: StepEnds() for m in (True, False)}
            loops = {
                m: tfr_hooks.SessionLoop(
                    training,
                    hooks=[hooks[m]],
                    steps_per_epoch=args.steps,
                    data=batches,
                    measure_input=m,
                    handle_signals=False,
                )
                for m in (True, False)
            }
            with tf.compat.v1.Session() as session:

                def session_epoch(measured: bool) -> float:
                    loops[measured].run(epochs=1, session=session)
                    return hooks[measured].secs_per_step(1)

                report(
                    "SessionLoop, in memory",
                    rounds({m: (lambda m=m: session_epoch(m)) for m in (True, False)}),
                )

        # FunctionLoop: two loops on one compiled model, steps_per_execution=32
        from tfr_hooks.tf2.function_loop import FunctionLoop

        net = w.keras3_model(args.model)
        data = w.tf2_dataset(spec, source="memory")
        hooks = {m: StepEnds() for m in (True, False)}
        steps = max(64, args.steps // 32 * 32)
        floops = {
            m: FunctionLoop(
                data,
                model=net,
                hooks=[hooks[m]],
                steps_per_execution=32,
                steps_per_epoch=steps,
                measure_input=m,
                handle_signals=False,
            )
            for m in (True, False)
        }

        def function_epoch(measured: bool) -> float:
            floops[measured].run(epochs=1)
            return hooks[measured].secs_per_step(32)

        report(
            "FunctionLoop(spe=32), in memory",
            rounds({m: (lambda m=m: function_epoch(m)) for m in (True, False)}),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
