"""FunctionLoop's per-call dispatch, before and after, against Keras 3 ``fit`` (issue 56).

One process, one data set (the benchmark's streamed digits), four trainers of the same
model kind run in turn, every other round in reverse order, one epoch of ``--steps``
steps each a round:

* ``new``: ``FunctionLoop`` as it is (the call's ``int64`` arguments made once, the
  traced function called directly after its first call, a call of one step without a
  ``tf.while_loop`` in its graph);
* ``while``: the same, but a call of one step runs the function of many steps, whose
  ``tf.while_loop`` makes no iteration (the dispatch before the loop-less call of one
  step, patched in);
* ``old``: the same loop class, each call through the ``tf.function`` of many steps with
  new ``tf.constant`` arguments (the dispatch before the arguments were made once);
* ``fit``: Keras 3 ``fit`` at the same ``steps_per_execution``.

With ``--callbacks`` all three run the benchmark's 3 callbacks (``ModelCheckpoint``,
``EarlyStopping``, ``TensorBoard``; the loops through ``KerasCallbacks``). Each round
reads each trainer's wall time of its epoch (epoch begin to end, by a hook or callback)
and the process's CPU time of its whole ``run``/``fit`` call; the script prints the
medians and the medians of the rounds' ratios. On a shared machine the CPU time is the
steadier reading: other load lengthens wall time, not this process's CPU time.

Run (after any `python bench/run.py` of the default `--examples`, which writes the data):
    python bench/dispatch_ab.py --model mlp --rounds 24 --steps 150 [--callbacks]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if (HERE.parent / "tfr_hooks").is_dir():
    sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument("--callbacks", action="store_true")
    parser.add_argument("--data-dir", default="/tmp/tfr_hooks_bench/data-60000")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import bench_workloads as w

    w.quiet()
    wall, cpu = _rounds(args, w)
    steps = args.steps
    for name in wall:
        print(
            f"{name}: wall {1e3 * statistics.median(wall[name]) / steps:.3f} ms/step, "
            f"CPU {1e3 * statistics.median(cpu[name]) / steps:.3f} ms/step (whole call)"
        )
    for a, b in (("new", "while"), ("new", "old"), ("new", "fit"), ("while", "fit")):
        speed = statistics.median(y / x for x, y in zip(wall[a], wall[b], strict=True))
        thrift = statistics.median(y / x for x, y in zip(cpu[a], cpu[b], strict=True))
        print(f"{a} against {b}: speed {speed:.3f}, CPU {b}/{a} {thrift:.3f} (rounds' medians)")
    return 0


def _rounds(args: argparse.Namespace, w: Any) -> tuple[dict[str, list[float]], ...]:
    import keras
    import tensorflow as tf

    import tfr_hooks
    from tfr_hooks.tf2 import runner
    from tfr_hooks.tf2.function_loop import FunctionLoop

    spec = w.Spec(config="dispatch_ab", model=args.model, data_dir=args.data_dir)
    work = tempfile.mkdtemp()
    spe = args.steps_per_execution
    new_call = runner.FunctionRunner._call_execute
    mode = {"name": "new"}

    def call(self: Any, executor: Any, service: Any, call_args: tuple[Any, ...], limit: int) -> Any:
        if mode["name"] == "new":
            return new_call(self, executor, service, call_args, limit)
        if mode["name"] == "while":  # the function of many steps, even for one
            return new_call(self, executor, service, call_args, max(2, limit))
        iterator, pending, limit_arg, remaining = call_args
        limit_arg, remaining = (tf.constant(int(v), tf.int64) for v in (limit_arg, remaining))
        return self._call(executor.execute, service, iterator, pending, limit_arg, remaining)

    runner.FunctionRunner._call_execute = call  # type: ignore[method-assign]
    span: dict[str, float] = {}

    class Span(tfr_hooks.Hook):  # type: ignore[misc]
        needs_every_step = False

        def epoch_begin(self, epoch: int) -> None:
            span["begin"] = time.perf_counter()

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            span["seconds"] = time.perf_counter() - span["begin"]

    class FitSpan(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            span["begin"] = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            span["seconds"] = time.perf_counter() - span["begin"]

    def cbs(name: str) -> list[Any]:
        return w.callbacks(keras, os.path.join(work, name)) if args.callbacks else []

    def loop(name: str) -> Any:
        net = w.keras3_model(args.model)
        hooks = [tfr_hooks.KerasCallbacks(cbs(name), net)] if args.callbacks else []
        return FunctionLoop(
            w.tf2_dataset(spec),
            model=net,
            hooks=[*hooks, Span()],
            steps_per_execution=spe,
            steps_per_epoch=args.steps,
        )

    loops = {name: loop(name) for name in ("new", "while", "old")}
    net, data, fit_cbs = w.keras3_model(args.model, spe), w.tf2_dataset(spec), cbs("fit")

    def run(name: str) -> Callable[[], None]:
        def go() -> None:
            mode["name"] = name
            if name == "fit":
                net.fit(
                    data,
                    epochs=1,
                    steps_per_epoch=args.steps,
                    verbose=0,
                    callbacks=[*fit_cbs, FitSpan()],
                )
            else:
                loops[name].run(epochs=1)

        return go

    trainers = {name: run(name) for name in ("new", "while", "old", "fit")}
    for go in trainers.values():
        go()  # traces, warm-up
    wall: dict[str, list[float]] = {name: [] for name in trainers}
    cpu: dict[str, list[float]] = {name: [] for name in trainers}
    for r in range(args.rounds):
        for name in list(trainers) if r % 2 == 0 else list(trainers)[::-1]:
            started = time.process_time()
            trainers[name]()
            cpu[name].append(time.process_time() - started)
            wall[name].append(span["seconds"])
    return wall, cpu


if __name__ == "__main__":
    sys.exit(main())
