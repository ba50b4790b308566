"""A Keras 3 model trained on batches that tf.data service workers read, parse and batch.

One dispatcher and ``--workers`` workers (default 2) start as local processes on
``127.0.0.1`` (``tfr_hooks.service.local.LocalService``, each running ``tfr-hooks
data-service dispatcher|worker``). ``tfrecord.dataset(..., service=ADDRESS)`` hands the
whole pipeline (reading the shards, shuffling, parsing, batching) to the workers, and
``tfr_hooks.FunctionLoop`` trains on the batches they stream back, with validation and
Keras' ``ModelCheckpoint`` and ``TensorBoard`` through ``tfr_hooks.KerasCallbacks``.

The service hands ranges of the shards' records to the workers one at a time
("distributed_epoch"): an epoch gives every example once, split over the workers in an
order that is not fixed. Each epoch's line gives the steps and examples the loop counted:
1,200 examples, in 24 batches of 50 when one worker's share ends on a full batch, else a
partial batch more for each worker whose share does not (each worker batches its own
records). At the end the servers are stopped (SIGTERM; each exits 0).

Writes:
    DATA_DIR/train/, DATA_DIR/validation/  the digits as 4 + 1 TFRecord shards, schema.json
    LOGDIR/checkpoints/best.weights.h5     weights of the epoch with the lowest val_loss
    LOGDIR/tensorboard/{train,validation}/ Keras' epoch curves; input/: the input wait

Run:
    python examples/data_service.py --data-dir /tmp/digits-ds --logdir /tmp/ds
    tensorboard --logdir /tmp/ds/tensorboard

A service of your own (a dispatcher and workers on other hosts, started with ``tfr-hooks
data-service dispatcher`` and ``tfr-hooks data-service worker``): ``--service
grpc://HOST:PORT`` uses it instead of starting local servers. Its workers open the files
at the paths this script gives them, so ``--data-dir`` must be a directory every worker
host reads at the same path (a shared file system), and this host must reach each worker
at the address it registered (``--worker-address``). The service's ports take
unauthenticated gRPC: keep them on a private network.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tfr_hooks.quiet import import_tensorflow

import_tensorflow()  # before anything imports TensorFlow: drops its start-up notices

import keras
from _digits import (
    NUM_CLASSES,
    SPLITS,
    add_directory_flags,
    add_steps_per_execution_flag,
    write_digit_shards,
)

import tfr_hooks
from tfr_hooks import tfrecord
from tfr_hooks.service.address import check_dispatcher
from tfr_hooks.service.local import LocalService

TRAIN_SHARDS = 4
BATCH = 50  # 1,200 training examples: 24 full batches, plus a partial one a worker at most
VAL_BATCH = 99  # the 297 validation examples in 3 batches


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_directory_flags(parser, "logs/data_service")
    parser.set_defaults(data_dir=Path("data/digits-service"))
    parser.add_argument(
        "--epochs", type=int, default=10, help="epochs to train (default: %(default)s)"
    )
    add_steps_per_execution_flag(parser)
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="local tf.data service workers to start (default: %(default)s)",
    )
    parser.add_argument(
        "--service",
        default=None,
        metavar="grpc://HOST:PORT",
        help="the dispatcher of a running tf.data service: use it, start no local servers",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="seconds each local server may take to start, and to stop (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"expected --workers to be 1 or more. Received: --workers={args.workers}")
    return args


def records(path: Path, batch_size: int, service: str, *, shuffle: bool = False) -> Any:
    """``(image, label)`` batches of a split, read and batched by the service's workers."""
    return tfrecord.dataset(
        path,
        batch_size,
        shuffle=600 if shuffle else None,  # within each worker's shards
        seed=0,
        as_tuple=("image", "label"),
        service=service,
    )


class EpochCounts(tfr_hooks.Hook):
    """Prints each epoch's steps and examples as the loop counted them, and its logs."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """One line: the epoch's steps, examples, losses and input wait."""
        state = self.loop
        stats = state.input_stats
        wait = "" if stats is None else f", input wait {stats.wait_share:.0%}"
        print(
            f"epoch {epoch + 1}/{self.epochs}: {state.epoch_steps} steps, "
            f"{state.epoch_examples} examples; loss {logs['loss']:.4f}, "
            f"val_loss {logs['val_loss']:.4f}, val_accuracy {logs['val_accuracy']:.4f}{wait}",
            flush=True,
        )


def train(args: argparse.Namespace, paths: dict[str, Path], service: str) -> dict[str, Any]:
    """Train the digits classifier on batches served by the service at ``service``."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    (args.logdir / "checkpoints").mkdir(parents=True, exist_ok=True)
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            str(args.logdir / "checkpoints" / "best.weights.h5"),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        ),
        keras.callbacks.TensorBoard(str(args.logdir / "tensorboard")),
    ]
    # each dataset is built once; every epoch (and validation pass) is a new iterator
    # over it, which the service serves as a new epoch
    loop = tfr_hooks.FunctionLoop(  # --- tfr_hooks: the loop, as without the service ---
        records(paths["train"], BATCH, service, shuffle=True),
        model=model,
        hooks=[tfr_hooks.KerasCallbacks(callbacks, model), EpochCounts(args.epochs)],
        steps_per_execution=args.steps_per_execution,
    )
    return loop.run(
        epochs=args.epochs, validation_data=records(paths["validation"], VAL_BATCH, service)
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    service = None
    if args.service is not None:  # a wrong address fails here, naming it, before any work
        try:
            service = check_dispatcher(args.service)
        except (ConnectionError, ValueError) as error:
            print(f"data_service.py: error: {error}", file=sys.stderr)
            return 1
    # absolute paths: the workers, other processes, open the files by them
    paths = write_digit_shards(args.data_dir.resolve(), TRAIN_SHARDS)
    start, stop = SPLITS["train"]
    print(f"{stop - start} training examples in {TRAIN_SHARDS} shards under {paths['train']}")
    if service is not None:
        print(f"tf.data service: the dispatcher at {service}")
        train(args, paths, service)
    else:
        with LocalService(workers=args.workers, timeout=args.timeout) as local:
            print(f"tf.data service: a dispatcher at {local.address}, {args.workers} workers")
            train(args, paths, local.address)
        codes = [p.returncode for p in [local.dispatcher, *local.workers] if p is not None]
        print(f"servers stopped; exit codes {codes}")
        if any(codes):
            return 1
    print(f"best weights in {args.logdir / 'checkpoints' / 'best.weights.h5'}")
    print(f"TensorBoard: tensorboard --logdir {args.logdir / 'tensorboard'}")
    print(f"{time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
