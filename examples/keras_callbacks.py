"""Keras callbacks on a queue-fed tf_keras model: best checkpoint, early stopping, TensorBoard.

The seed scenario (string_input_producer + TFRecordReader + shuffle_batch feeding a
tf_keras model built with ``Input(tensor=...)``) with a validation TFRecord read through
a tf.data iterator on the same weights. ``tfr_hooks.keras_training_graph`` builds the
train op, loss and accuracy; ``tfr_hooks.KerasCallbacks`` drives Keras' own
``ModelCheckpoint(save_best_only=True, monitor="val_loss")`` and
``EarlyStopping(restore_best_weights=True)``; ``tfr_hooks.TensorBoardLogger`` writes the
``train/`` and ``validation/`` runs (in graph mode tf_keras' own TensorBoard callback
writes one run holding both, so it is not used here).

Writes:
    LOGDIR/checkpoints/best.h5   weights of the epoch with the lowest val_loss
    LOGDIR/tensorboard/train/            epoch_loss, epoch_accuracy, epoch_learning_rate
    LOGDIR/tensorboard/validation/       epoch_loss, epoch_accuracy

Run:
    python examples/keras_callbacks.py --data-dir /tmp/digits --logdir /tmp/digits-cb
    tensorboard --logdir /tmp/digits-cb/tensorboard
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tfr_hooks.quiet import import_tensorflow

import_tensorflow()  # before anything imports TensorFlow: drops its start-up notices

import tensorflow as tf
import tf_keras
from _digits import NUM_CLASSES, add_directory_flags, dataset, queue_batch, write_digits

import tfr_hooks

v1 = tf.compat.v1
BATCH = 64
VAL_BATCH = 100


def build_model(image: tf.Tensor | None) -> tf_keras.Model:
    """The classifier on the batch tensor; with ``None``, on a plain ``Input`` (to reload)."""
    if image is None:
        inputs = tf_keras.layers.Input(shape=(64,))
    else:
        inputs = tf_keras.layers.Input(tensor=image)
    hidden = tf_keras.layers.Dense(32, activation="relu")(inputs)
    hidden = tf_keras.layers.Dropout(0.1)(hidden)
    outputs = tf_keras.layers.Dense(NUM_CLASSES, activation="softmax")(hidden)
    return tf_keras.Model(inputs, outputs)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_directory_flags(parser, "logs/keras_callbacks")
    parser.add_argument(
        "--epochs", type=int, default=30, help="at most this many epochs (default: %(default)s)"
    )
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
    train_records = sum(1 for _ in tf.data.TFRecordDataset(str(paths["train"])))
    steps_per_epoch = train_records // BATCH
    checkpoints = args.logdir / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    best_path = checkpoints / "best.h5"

    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        # training batches from queue runners; the queue closes after num_epochs passes
        image, label = queue_batch(paths["train"], BATCH, num_epochs=args.epochs)
        model = build_model(image)
        training = tfr_hooks.keras_training_graph(  # --- what model.compile would build ---
            model,
            label,
            loss="sparse_categorical_crossentropy",
            optimizer=tf_keras.optimizers.legacy.Adam(0.01),
            metrics=["accuracy"],
        )
        # validation records through a re-initializable tf.data iterator, same weights
        val_it = v1.data.make_initializable_iterator(dataset(paths["validation"], VAL_BATCH))
        val_image, val_label = val_it.get_next()
        validation = training.validation(val_image, val_label, initializers=[val_it.initializer])

        callbacks = [
            tf_keras.callbacks.ModelCheckpoint(
                str(best_path), monitor="val_loss", save_best_only=True, save_weights_only=True
            ),
            tf_keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=args.patience, restore_best_weights=True
            ),
        ]
        loop = tfr_hooks.SessionLoop(  # --- tfr_hooks: the whole training loop ---
            training,  # its train op, loss and metrics, batch size and learning-phase feed
            hooks=[
                training.keras_callbacks(callbacks, verbose=2),
                tfr_hooks.TensorBoardLogger(args.logdir / "tensorboard", model=model),
            ],
            steps_per_epoch=steps_per_epoch,
        )
        with v1.Session(graph=graph) as session:
            history = loop.run(epochs=args.epochs, validation_data=validation, session=session)

    best = min(range(len(history["val_loss"])), key=history["val_loss"].__getitem__)
    print(
        f"{len(history['loss'])} epochs; best val_loss {history['val_loss'][best]:.4f} "
        f"(val_accuracy {history['val_accuracy'][best]:.4f}) at epoch {best + 1}"
    )
    print(f"best weights in {best_path}")
    print(f"TensorBoard: tensorboard --logdir {args.logdir / 'tensorboard'}")
    print(f"{time.perf_counter() - started:.0f} s in all")
    return history


if __name__ == "__main__":
    main()
