"""A typical legacy queue-runner training script, with hooks added by a few changed lines.

Before tfr_hooks, this script started the queue runners itself, looped on
``while not coord.should_stop()``, caught ``OutOfRangeError`` and joined the threads in a
``finally`` (forgetting to cancel blocked enqueues). The lines marked ``# CHANGED`` are
all it takes to run TensorFlow's stock hooks (and tfr_hooks' own) around the same loop.

Run:
    python examples/legacy_script.py --data-dir /tmp/digits --logdir /tmp/legacy-logs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tfr_hooks.quiet import import_tensorflow

import_tensorflow()  # before anything imports TensorFlow: drops its start-up notices

import tensorflow as tf
import tf_keras
from _digits import NUM_CLASSES, add_directory_flags, queue_batch, write_digits

import tfr_hooks  # CHANGED: one import

v1 = tf.compat.v1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_directory_flags(parser, "logs/legacy_script", "checkpoints and summaries")
    parser.add_argument(
        "--epochs",
        type=int,
        default=5,
        help="passes of the input queue over the data (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    paths = write_digits(args.data_dir)

    with tf.Graph().as_default():
        image, label = queue_batch(paths["train"], 64, num_epochs=args.epochs)
        inputs = tf_keras.layers.Input(tensor=image)
        hidden = tf_keras.layers.Dense(64, activation="relu")(inputs)
        probs = tf_keras.layers.Dense(NUM_CLASSES, activation="softmax")(hidden)
        loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(label, probs))
        global_step = v1.train.get_or_create_global_step()
        train_op = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)

        hooks = [  # CHANGED: the hooks you want
            v1.train.StepCounterHook(every_n_steps=20, output_dir=str(args.logdir)),
            v1.train.LoggingTensorHook({"step": global_step, "loss": loss}, every_n_iter=20),
            v1.train.CheckpointSaverHook(str(args.logdir / "checkpoints"), save_steps=50),
            v1.train.NanTensorHook(loss),
        ]
        # BEFORE: sess = tf.Session(); sess.run(init ops); coord = tf.train.Coordinator();
        #         threads = tf.train.start_queue_runners(sess, coord); try: ... finally: join
        with tfr_hooks.hooked_session(hooks=hooks) as sess:  # CHANGED: replaces all that
            step = 0
            while not sess.should_stop():  # CHANGED: was `while not coord.should_stop()`
                _, loss_value = sess.run([train_op, loss])
                step += 1
                if step % 50 == 0:
                    print(f"step {step}: loss {loss_value:.4f}")
    print(f"done after {step} steps; the input ran out after {args.epochs} epochs")
    return step


if __name__ == "__main__":
    main()
