"""The seed scenario: queue runners feed a tf_keras model built on the batch tensor.

digits (bundled with scikit-learn) -> TFRecord -> string_input_producer + TFRecordReader
-> shuffle_batch(num_threads=2) -> tf_keras model on ``Input(tensor=...)`` -> your own
train op, run by ``tfr_hooks.SessionLoop`` with a stock checkpoint hook; then loss and
accuracy on held-out records.

Run:
    python examples/queue_runners_keras.py --data-dir /tmp/digits --logdir /tmp/digits-logs
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


def build_model(image: tf.Tensor) -> tf_keras.Model:
    inputs = tf_keras.layers.Input(tensor=image)
    hidden = tf_keras.layers.Dense(64, activation="relu")(inputs)
    outputs = tf_keras.layers.Dense(NUM_CLASSES, activation="softmax")(hidden)
    return tf_keras.Model(inputs, outputs)


def loss_and_accuracy(probs: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(label, probs))
    hits = tf.equal(tf.argmax(probs, axis=1), label)
    return loss, tf.reduce_mean(tf.cast(hits, tf.float32))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_directory_flags(parser, "logs/queue_runners_keras", "checkpoints")
    parser.add_argument(
        "--epochs",
        type=int,
        default=10,
        help="epochs to train, also the queue's num_epochs (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()

    paths = write_digits(args.data_dir)
    train_records = sum(1 for _ in tf.data.TFRecordDataset(str(paths["train"])))
    steps_per_epoch = train_records // BATCH  # as the seed answer does: samples // batch_size

    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        # the queue pipeline runs num_epochs passes over the file, then closes
        image, label = queue_batch(paths["train"], BATCH, num_epochs=args.epochs)
        model = build_model(image)
        loss, accuracy = loss_and_accuracy(model.output, label)
        train_op = v1.train.AdamOptimizer(0.01).minimize(
            loss, var_list=model.trainable_weights, global_step=v1.train.get_or_create_global_step()
        )
        # held-out records through a tf.data iterator, on the same weights
        test_it = v1.data.make_initializable_iterator(dataset(paths["test"], 100))
        test_image, test_label = test_it.get_next()
        test_loss, test_accuracy = loss_and_accuracy(model(test_image), test_label)

        checkpoints = args.logdir / "checkpoints"
        loop = tfr_hooks.SessionLoop(  # --- tfr_hooks: the whole training loop ---
            train_op,
            fetches={"loss": loss, "accuracy": accuracy},
            hooks=[v1.train.CheckpointSaverHook(str(checkpoints), save_steps=steps_per_epoch)],
            steps_per_epoch=steps_per_epoch,
            batch_size=tf.shape(label)[0],
        )
        with v1.Session(graph=graph) as session:
            history = loop.run(epochs=args.epochs, session=session)
            pairs = zip(history["loss"], history["accuracy"], strict=True)
            for epoch, (epoch_loss, epoch_acc) in enumerate(pairs):
                print(f"epoch {epoch + 1:2d}  loss {epoch_loss:.4f}  accuracy {epoch_acc:.4f}")
            held_out = evaluate(session, test_it.initializer, test_loss, test_accuracy, test_label)

    print(
        f"held-out ({held_out['examples']:.0f} records): loss {held_out['loss']:.4f}  "
        f"accuracy {held_out['accuracy']:.4f}  (chance is 0.10)"
    )
    seconds = time.perf_counter() - started
    print(f"checkpoints in {checkpoints}; {seconds:.0f} s from data to result")
    return held_out


def evaluate(
    session: v1.Session, init: tf.Operation, loss: tf.Tensor, acc: tf.Tensor, label: tf.Tensor
) -> dict[str, float]:
    """Example-weighted loss and accuracy over a re-initializable pipeline."""
    session.run(init)
    totals = {"loss": 0.0, "accuracy": 0.0, "examples": 0.0}
    size = tf.shape(label)[0]
    while True:
        try:
            batch_loss, batch_acc, n = session.run([loss, acc, size])
        except tf.errors.OutOfRangeError:
            break
        totals["loss"] += batch_loss * n
        totals["accuracy"] += batch_acc * n
        totals["examples"] += n
    n = max(totals["examples"], 1.0)
    return {
        "loss": totals["loss"] / n,
        "accuracy": totals["accuracy"] / n,
        "examples": totals["examples"],
    }


if __name__ == "__main__":
    main()
