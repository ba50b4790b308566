"""A Keras 3 model trained from TFRecords by tfr_hooks.FunctionLoop, with Keras callbacks.

The TF2 version of the graph-mode examples, on the same data (scikit-learn's digits as
TFRecord files): ``tfr_hooks.tfrecord.dataset`` reads and parses the records in a
``tf.data`` pipeline, and ``tfr_hooks.FunctionLoop`` runs the compiled model's own
``train_step`` in a ``tf.function`` that pulls ``--steps-per-execution`` batches per call
inside the graph (``auto``, the default, lets the loop choose how many from its timed
calls; Keras' own callbacks do not hold it at 1). ``tfr_hooks.KerasCallbacks`` drives
Keras' own ``ModelCheckpoint``, ``EarlyStopping`` and ``TensorBoard`` callbacks, exactly
as ``model.fit`` would.

Writes:
    LOGDIR/checkpoints/best.weights.h5   weights of the epoch with the lowest val_loss
    LOGDIR/tensorboard/train/            epoch_loss, epoch_accuracy, epoch_learning_rate
    LOGDIR/tensorboard/validation/       epoch_loss, epoch_accuracy

Run:
    python examples/keras3_tfrecord.py --data-dir /tmp/digits --logdir /tmp/digits-k3
    tensorboard --logdir /tmp/digits-k3/tensorboard
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tfr_hooks.quiet import import_tensorflow

import_tensorflow()  # before anything imports TensorFlow: drops its start-up notices

import keras
import tensorflow as tf
from _digits import (
    NUM_CLASSES,
    SPLITS,
    add_directory_flags,
    add_steps_per_execution_flag,
    write_digits,
)

import tfr_hooks

BATCH = 64
VAL_BATCH = 100


def build_model() -> keras.Model:
    """The same small classifier as the graph-mode examples, in Keras 3."""
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )


def records(path: Path, batch_size: int, *, shuffle: bool = False) -> tf.data.Dataset:
    """``(image, label)`` batches of a digits TFRecord file."""
    return tfr_hooks.tfrecord.dataset(
        path,
        batch_size,
        shuffle=2048 if shuffle else None,
        seed=0,
        as_tuple=("image", "label"),
    )


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_directory_flags(parser, "logs/keras3_tfrecord")
    parser.add_argument(
        "--epochs", type=int, default=30, help="epochs to train (default: %(default)s)"
    )
    add_steps_per_execution_flag(parser)
    parser.add_argument(
        "--patience",
        type=int,
        default=3,
        help="EarlyStopping patience, in epochs without a better val_loss (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()

    paths = write_digits(args.data_dir)
    checkpoints = args.logdir / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    best_path = checkpoints / "best.weights.h5"

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            str(best_path), monitor="val_loss", save_best_only=True, save_weights_only=True
        ),
        keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=args.patience, restore_best_weights=True
        ),
        keras.callbacks.TensorBoard(str(args.logdir / "tensorboard")),
    ]
    loop = tfr_hooks.FunctionLoop(  # --- tfr_hooks: the whole training loop ---
        records(paths["train"], BATCH, shuffle=True),
        model=model,
        hooks=[tfr_hooks.KerasCallbacks(callbacks, model, verbose=2)],
        steps_per_execution=args.steps_per_execution,
    )
    history = loop.run(epochs=args.epochs, validation_data=records(paths["validation"], VAL_BATCH))

    best = min(range(len(history["val_loss"])), key=history["val_loss"].__getitem__)
    print(
        f"{len(history['loss'])} epochs; best val_loss {history['val_loss'][best]:.4f} "
        f"(val_accuracy {history['val_accuracy'][best]:.4f}) at epoch {best + 1}"
    )
    # the restored best weights, on the test split's known number of batches: reading past
    # its end would make TensorFlow 2.17 and 2.18 log an OUT_OF_RANGE line
    start, stop = SPLITS["test"]
    test = model.evaluate(
        records(paths["test"], VAL_BATCH),
        steps=math.ceil((stop - start) / VAL_BATCH),
        verbose=0,
        return_dict=True,
    )
    print(f"test accuracy {test['accuracy']:.4f} on {stop - start} held-out records")
    print(f"best weights in {best_path}")
    print(f"TensorBoard: tensorboard --logdir {args.logdir / 'tensorboard'}")
    print(f"{time.perf_counter() - started:.0f} s in all")
    return history


if __name__ == "__main__":
    main()
