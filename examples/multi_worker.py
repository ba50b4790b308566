"""The Keras 3 TFRecord example on several workers, under MultiWorkerMirroredStrategy.

The same script runs three ways:

* ``--workers N``: starts N worker processes of itself on free ``127.0.0.1`` ports (one
  ``TF_CONFIG`` each), waits for them (with ``--timeout``) and shows the chief's output.
* With ``TF_CONFIG`` set (what cluster launchers such as Kubernetes training operators
  set on each host): this process is one worker of that cluster.
* Neither: one process, no strategy: the reference the workers must match.

The training data is written as 4 TFRecord shards, so 2 to 4 workers each read whole
files of their own (``tfrecord.dataset`` shards by file when there are at least as many
files as workers, by data otherwise); ``--batch-size`` is the global batch. Logs, epoch
and example counts are global (the same on every worker); the chief writes the files
below, the other workers write theirs to a temporary directory that is removed.

Writes (the chief only):
    LOGDIR/checkpoints/best.weights.h5   weights of the epoch with the lowest val_loss
    LOGDIR/backup/                       BackupAndRestore: run again to resume
    LOGDIR/preemption/                   on SIGTERM to any worker, every worker saves
                                         here at one agreed step and exits with code 42:
                                         run again to resume at that step
    LOGDIR/tensorboard/{train,validation}/
    LOGDIR/log.csv                       one row of global logs per epoch

Run:
    python examples/multi_worker.py --workers 2 --data-dir /tmp/digits-mw --logdir /tmp/mw
    # on real hosts, one per host, with TF_CONFIG naming the private addresses of all:
    TF_CONFIG='{"cluster": {"worker": ["host-a.internal:2222", "host-b.internal:2222"]},
                "task": {"type": "worker", "index": 0}}' python examples/multi_worker.py

TensorFlow's cluster ports take unauthenticated gRPC: use private addresses only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tfr_hooks.quiet import import_tensorflow

tf = import_tensorflow()  # before anything imports TensorFlow: drops its start-up notices

TRAIN_SHARDS = 4
PREEMPTED = 42  # the exit code of tfr_hooks.PreemptionCheckpoint


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data/digits-sharded"),
        help="where the sharded digits TFRecords are written, or reused (default: %(default)s)",
    )
    parser.add_argument(
        "--logdir",
        type=Path,
        default=Path("logs/multi_worker"),
        help="where the chief writes checkpoints and logs (default: %(default)s)",
    )
    parser.add_argument(
        "--epochs", type=int, default=10, help="epochs to train (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, help="the global batch size (default: %(default)s)"
    )
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=4,
        help="training steps per tf.function call (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="start this many worker processes on loopback ports; 0: this process "
        "trains alone, or as the TF_CONFIG worker (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds to wait for the workers, with --workers (default: %(default)s)",
    )
    return parser.parse_args(argv)


def write_data(data_dir: Path) -> dict[str, Path]:
    """The digits as TFRecord shards (once): 4 training shards, 1 validation shard."""
    import numpy as np
    from _digits import SPLITS
    from sklearn.datasets import load_digits

    from tfr_hooks import tfrecord

    paths = {"train": data_dir / "train", "validation": data_dir / "validation"}
    if all((p / "schema.json").exists() for p in paths.values()):
        return paths
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    images = (digits.data[order] / 16.0).astype(np.float32)
    labels = digits.target[order].astype(np.int64)
    for name, shards in (("train", TRAIN_SHARDS), ("validation", 1)):
        start, stop = SPLITS[name]
        data = {"image": images[start:stop], "label": labels[start:stop]}
        tfrecord.write(data, paths[name], shards=shards, overwrite=True)
    return paths


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Run this script as ``args.workers`` workers of a loopback cluster; return 0 if all ran."""
    from tfr_hooks.tfrecord.pipelines.sharding import loopback_cluster

    write_data(args.data_dir)  # once, before the workers start reading
    child_argv = [sys.argv[0], *_without_workers(argv)]
    procs = []
    try:
        for config in loopback_cluster(args.workers):
            env = dict(os.environ, TF_CONFIG=config)
            procs.append(
                subprocess.Popen(
                    [sys.executable, *child_argv],
                    env=env,
                    stdout=None if not procs else subprocess.DEVNULL,  # the chief's output
                    stderr=None if not procs else subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + args.timeout
        codes = []
        for index, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"worker {index} timed out after {args.timeout:.0f} s", file=sys.stderr)
                return 1
            codes.append(proc.returncode)
            if proc.returncode not in (0, PREEMPTED):
                print(f"worker {index} failed (exit code {proc.returncode})", file=sys.stderr)
                if err:
                    print(err[-3000:], file=sys.stderr)
        if codes and all(code == PREEMPTED for code in codes):
            print("preempted: every worker saved the same step; run again to resume there")
            return PREEMPTED
        return 0 if all(code == 0 for code in codes) else 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def _without_workers(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--workers":
            skip = True
        elif not item.startswith("--workers="):
            out.append(item)
    return out


def train(args: argparse.Namespace) -> dict[str, list[float]]:
    """Train as one worker of the ``TF_CONFIG`` cluster, or as one process without it."""
    strategy = None
    workers = 1
    if os.environ.get("TF_CONFIG"):
        cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
        workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
        # collectives can hang with fewer inter-op threads than workers + 1
        tf.config.threading.set_inter_op_parallelism_threads(workers + 1)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()

    import keras
    from _digits import NUM_CLASSES

    import tfr_hooks
    from tfr_hooks import tfrecord
    from tfr_hooks.tf2.distribute import current_task

    paths = write_data(args.data_dir)
    task = current_task(strategy)
    train_data = tfrecord.dataset(
        paths["train"], args.batch_size, shuffle=1200, seed=0, as_tuple=("image", "label")
    )
    val_data = tfrecord.dataset(paths["validation"], 100, as_tuple=("image", "label"))
    with strategy.scope() if strategy is not None else _no_scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(NUM_CLASSES, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    logdir = args.logdir
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            str(logdir / "checkpoints" / "best.weights.h5"),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        ),
        keras.callbacks.BackupAndRestore(str(logdir / "backup")),
        keras.callbacks.TensorBoard(str(logdir / "tensorboard")),
        keras.callbacks.CSVLogger(str(logdir / "log.csv")),
    ]
    examples = []

    class CountExamples(tfr_hooks.Hook):
        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            examples.append(self.loop.epoch_examples)

    loop = tfr_hooks.FunctionLoop(  # --- tfr_hooks: the same loop on 1 or N workers ---
        train_data,
        model=model,
        hooks=[
            tfr_hooks.KerasCallbacks(callbacks, model, verbose=2),
            # SIGTERM (a preemption) to any worker: one agreed checkpoint, then exit 42
            tfr_hooks.PreemptionCheckpoint(str(logdir / "preemption"), model=model),
            CountExamples(),
        ],
        steps_per_execution=args.steps_per_execution,
        strategy=strategy,
    )
    started = time.perf_counter()
    history = loop.run(epochs=args.epochs, validation_data=val_data)
    seconds = time.perf_counter() - started
    if task.is_chief and history:
        print(
            f"{len(history['loss'])} epochs on {workers} worker(s); final loss "
            f"{history['loss'][-1]:.4f}, val_accuracy {history['val_accuracy'][-1]:.4f}; "
            f"{sum(examples)} examples in {seconds:.1f} s "
            f"({sum(examples) / seconds:.0f} examples/s, validation included)"
        )
        print(f"files in {logdir}")
    return history


class _no_scope:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.workers < 0:
        raise SystemExit(f"Expected --workers to be 0 or more. Received: --workers={args.workers}")
    if args.workers:
        return launch(args, argv)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
