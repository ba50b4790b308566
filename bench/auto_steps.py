"""``steps_per_execution="auto"`` against the fixed values, in one process, in paired rounds.

The main benchmark (``bench/run.py``) runs each row in a process of its own, one after
the other: on a shared machine, load that comes and goes lands on some rows and not on
others, and a ratio of two rows a few percent apart tells little. This runs the rows the
issue compares (``FunctionLoop`` on the digits data, streamed, batch 128, with fixed
``steps_per_execution`` 1, 8, 32 and 128 and with ``"auto"``, each without hooks and with
the benchmark's 3 Keras callbacks) side by side in one process: each loop is built and
warmed up once (its traces, and ``"auto"``'s climb: one epoch), then every round runs one
epoch of each loop, in a new random order each round. A row's figure is its median
examples/s over the rounds; the ratios are taken within each round and their median is
reported, so load that lasts a round cancels out::

    python bench/auto_steps.py [--models mlp,cnn] [--rounds 5] [--examples 60000] \
        [--out bench/results/auto_steps.md]

The targets it checks are issue 38's: ``auto`` at least 0.95x the best fixed value, and
at least 1.3x ``steps_per_execution=1`` wherever 32 is at least 1.4x 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FIXED = (1, 8, 32, 128)
VALUES: tuple[int | str, ...] = (*FIXED, "auto")


def _name(value: int | str, with_callbacks: bool) -> str:
    return f"function_loop_{value}" + ("_cb" if with_callbacks else "")


def build_loops(spec: Any) -> dict[str, Any]:
    """Every row's loop on ``spec``'s data and model, warmed up by one epoch."""
    import keras
    from bench_workloads import callbacks, keras3_model, steps_per_epoch, tf2_dataset

    import tfr_hooks

    loops = {}
    for with_callbacks in (False, True):
        for value in VALUES:
            net = keras3_model(spec.model)
            hooks = []
            if with_callbacks:
                workdir = os.path.join(spec.workdir, _name(value, with_callbacks))
                os.makedirs(workdir, exist_ok=True)
                hooks = [tfr_hooks.KerasCallbacks(callbacks(keras, workdir), net)]
            loop = tfr_hooks.FunctionLoop(
                tf2_dataset(spec),
                model=net,
                hooks=hooks,
                steps_per_execution=value,
                steps_per_epoch=steps_per_epoch(spec),
                handle_signals=False,
            )
            loop.run(epochs=1)  # the traces; "auto" climbs
            loops[_name(value, with_callbacks)] = loop
    return loops


def paired_rounds(loops: dict[str, Any], examples: int, rounds: int, seed: int) -> list[dict]:
    """Examples/s of one epoch of each loop, per round, in a new order each round."""
    rng = random.Random(seed)
    results = []
    for _ in range(rounds):
        names = list(loops)
        rng.shuffle(names)
        speeds = {}
        for name in names:
            start = time.perf_counter()
            loops[name].run(epochs=1)
            speeds[name] = examples / (time.perf_counter() - start)
        results.append(speeds)
    return results


def summarize(model: str, rounds: list[dict], loops: dict[str, Any]) -> list[str]:
    """Markdown rows: each loop's median examples/s, and the issue's ratios (median of rounds)."""
    lines = [f"### {model}", "", "| row | ex/s (median) | spread | value at the end |"]
    lines.append("|---|---:|---:|---:|")
    for name, loop in loops.items():
        speeds = [r[name] for r in rounds]
        value = loop.loop.steps_per_execution
        lines.append(
            f"| `{name}` | {statistics.median(speeds):,.0f} | "
            f"{min(speeds):,.0f}-{max(speeds):,.0f} | {value} |"
        )
    lines += ["", "| ratio (median over rounds) | value | target | met |", "|---|---:|---:|---|"]
    for cb in (False, True):
        auto, one, spe32 = _name("auto", cb), _name(1, cb), _name(32, cb)

        def ratio(top: str, bottom: Any) -> float:
            return statistics.median(
                r[top] / (bottom(r) if callable(bottom) else r[bottom]) for r in rounds
            )

        # the best fixed value: the one of the highest median (not each round's best,
        # which the noise of four rows would lift)
        top = max(FIXED, key=lambda v, cb=cb: statistics.median(r[_name(v, cb)] for r in rounds))
        best = ratio(auto, _name(top, cb))
        lines.append(
            f"| `{auto}` / the best fixed, `{_name(top, cb)}` | {best:.2f} | >= 0.95 | "
            f"{'yes' if best >= 0.95 else '**no**'} |"
        )
        big = ratio(spe32, one)
        vs_one = ratio(auto, one)
        need = "yes" if vs_one >= 1.3 else "**no**"
        if big < 1.4:
            need = f"n/a (`{spe32}` / `{one}` = {big:.2f} < 1.4)"
        lines.append(f"| `{auto}` / `{one}` | {vs_one:.2f} | >= 1.30 | {need} |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--examples", type=int, default=60000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the Markdown here (else print it)")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from bench_data import write_dataset
    from bench_workloads import Spec, quiet, steps_per_epoch

    quiet()
    lines = [
        "# steps_per_execution='auto' against the fixed values (paired rounds, one process)",
        "",
        f"- Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}",
        "- Command: `python bench/auto_steps.py " + " ".join(sys.argv[1:]) + "`",
        f"- {args.examples:,} examples, batch 128, streamed; {args.rounds} rounds of one "
        "epoch of every row, after one warm-up epoch each (see the script's docstring)",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        write_dataset(os.path.join(tmp, "data"), args.examples, args.seed)
        for model in args.models.split(","):
            spec = Spec(
                config="auto_steps",
                model=model,
                data_dir=os.path.join(tmp, "data"),
                workdir=os.path.join(tmp, "work", model),
                seed=args.seed,
            )
            loops = build_loops(spec)
            examples = steps_per_epoch(spec) * spec.batch_size
            rounds = paired_rounds(loops, examples, args.rounds, args.seed)
            lines += summarize(model, rounds, loops)
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
