"""A small training script that the signal tests start, signal and kill (issue 7).

Scenarios (``--scenario``):

* ``graceful``: a tf_keras model on ``tf.data`` with EpochCheckpoint, ModelCheckpoint and
  TensorBoard; prints ``READY`` in the middle of epoch 1, then steps slowly. Its result
  holds the model's weights at each epoch end.
* ``blocked``: the input queue runs dry (its source never produces), so the step blocks
  inside ``session.run``; prints ``READY`` just before it blocks, and after the graceful
  stop, ``FIRST <json>``; then runs again and prints ``AGAIN`` before it blocks again.
* ``abort``: a queue-runner pipeline from a TFRecord file; a stop request makes the epoch
  end take very long (prints ``CLOSING``), so that a second signal has to abort it.
* ``kill_save``: saves a 32 MB variable at every (one-step) epoch end, and SIGKILLs itself
  as soon as it sees a checkpoint file being written under its temporary name, once
  ``tf.train.latest_checkpoint`` has named three complete checkpoints.

Prints ``RESULT <json>`` at the end. Every scenario also ends on its own, within about
a minute and a half, if nobody signals it (``run_timeout_secs`` bounds a blocked step).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

import numpy as np
import tensorflow as tf
import tf_keras

import tfr_hooks
from tfr_hooks import tfrecord

v1 = tf.compat.v1


def thread_names() -> list[str]:
    return [t.name for t in threading.enumerate()]


def say(*parts: object) -> None:
    print(*parts, flush=True)


class Ready(tfr_hooks.Hook):
    """Prints ``label`` after step ``at`` of epoch ``epoch``; sleeps ``pace`` s after it."""

    def __init__(self, epoch: int, at: int, pace: float = 0.0, label: str = "READY") -> None:
        self.epoch, self.at, self.pace, self.label, self.ready = epoch, at, pace, label, False

    def after_run(self, run_context, run_values) -> None:
        loop = self.loop
        if loop.epoch == self.epoch and loop.epoch_steps == self.at and not self.ready:
            self.ready = True
            say(self.label)
        if self.ready:
            time.sleep(self.pace)


class SlowClose(tfr_hooks.Hook):
    """When a stop was requested, the epoch end takes a minute (a long validation, say)."""

    def epoch_end(self, epoch, logs) -> None:
        if self.loop.stop_requested:
            say("CLOSING")
            time.sleep(60)


def graceful(logdir: str) -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    it = v1.data.make_initializable_iterator(ds)
    bx, by = it.get_next()
    inputs = tf_keras.layers.Input(tensor=bx)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2, activation="softmax")(inputs))
    training = tfr_hooks.keras_training_graph(
        model,
        by,
        loss="sparse_categorical_crossentropy",
        optimizer=tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9),
        metrics=["accuracy"],
    )
    epoch_weights: list[list] = []  # the model's weights at each epoch end
    callbacks = [
        tf_keras.callbacks.ModelCheckpoint(
            os.path.join(logdir, "weights.{epoch:02d}.h5"), save_weights_only=True
        ),
        tf_keras.callbacks.TensorBoard(os.path.join(logdir, "tb")),
        tf_keras.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: epoch_weights.append(
                [w.tolist() for w in model.get_weights()]
            )
        ),
    ]
    loop = tfr_hooks.SessionLoop(
        training,
        None,
        hooks=[
            tfr_hooks.EpochCheckpoint(os.path.join(logdir, "ckpt")),
            tfr_hooks.KerasCallbacks(callbacks, model),
            Ready(epoch=1, at=3, pace=1.0),
        ],
        steps_per_epoch=10,
        initializers=[it.initializer],
        run_timeout_secs=60,
    )
    history = loop.run(epochs=3)  # ~20 s after READY if no signal comes
    return {"history": history, "epoch_weights": epoch_weights}


def blocked(logdir: str) -> dict:
    gate = tf.queue.FIFOQueue(10, [tf.float32], shapes=[[4]])  # a source that never produces
    v1.train.add_queue_runner(v1.train.QueueRunner(gate, [gate.enqueue(gate.dequeue())]))
    queue = tf.queue.FIFOQueue(100, [tf.float32], shapes=[[4]])
    v1.train.add_queue_runner(v1.train.QueueRunner(queue, [queue.enqueue(gate.dequeue())]))
    prefill = queue.enqueue_many([tf.ones([5, 4])])  # five batches, then nothing
    x = queue.dequeue()
    w = tf.Variable(tf.zeros([4]))
    loss = tf.reduce_sum(tf.square(w - x))
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=v1.train.get_or_create_global_step()
    )
    loop = tfr_hooks.SessionLoop(
        train_op,
        {"loss": loss},
        hooks=[tfr_hooks.EpochCheckpoint(os.path.join(logdir, "ckpt")), Ready(epoch=0, at=4)],
        initializers=[prefill],
        run_timeout_secs=90,  # ends a forgotten process; the test waits less than this
    )
    first = loop.run(epochs=3)
    say("FIRST", json.dumps({"history": first, "threads": thread_names()}))
    # again, in a new session (fresh queues): now two signals in a row must abort
    again = tfr_hooks.SessionLoop(
        train_op,
        {"loss": loss},
        hooks=[Ready(epoch=0, at=4, label="AGAIN")],
        initializers=[prefill],
        run_timeout_secs=90,
    )
    try:
        return {"history": again.run(epochs=3)}
    except KeyboardInterrupt:
        say("RESULT", json.dumps({"threads": thread_names()}))
        raise


def abort(logdir: str, data: str) -> dict:
    batches = tfrecord.read_batches(
        data, 10, pipeline="queue", num_epochs=None, shuffle=40, as_tuple=("x", "y")
    )
    x, y = batches.tensors
    w = tf.Variable(tf.zeros([4]))
    loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) - tf.cast(y, tf.float32)))
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    loop = tfr_hooks.SessionLoop(
        train_op,
        {"loss": loss},
        hooks=[SlowClose(), Ready(epoch=0, at=5, pace=0.2)],
        steps_per_epoch=100,
        data=batches,
        run_timeout_secs=60,
    )
    try:
        return {"history": loop.run(epochs=1)}  # ~20 s after READY if no signal comes
    except KeyboardInterrupt:
        say("RESULT", json.dumps({"threads": thread_names()}))
        raise


def kill_save(logdir: str) -> dict:
    big = tf.Variable(tf.zeros([8 * 1024 * 1024]), name="big")  # 32 MB per checkpoint
    train_op = big.assign_add(tf.ones_like(big))
    ckpt = tfr_hooks.EpochCheckpoint(logdir, max_to_keep=2)

    def killer() -> None:  # SIGKILL the process while a checkpoint file is being written
        saved: set[str] = set()  # the checkpoints seen complete (names are never reused)
        while True:
            names = os.listdir(logdir) if os.path.isdir(logdir) else []
            if len(saved) >= 3 and any("tempstate" in n for n in names):
                os.kill(os.getpid(), signal.SIGKILL)
            latest = tf.train.latest_checkpoint(logdir) if "checkpoint" in names else None
            if latest is not None:
                saved.add(latest)
            time.sleep(0.0005)

    threading.Thread(target=killer, daemon=True).start()
    loop = tfr_hooks.SessionLoop(train_op, {}, hooks=[ckpt], steps_per_epoch=1, run_timeout_secs=60)
    return {"history": loop.run(epochs=200)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--data")
    args = parser.parse_args()
    say("STARTED", os.getpid())
    with tf.Graph().as_default():
        if args.scenario == "graceful":
            result = graceful(args.logdir)
        elif args.scenario == "blocked":
            result = blocked(args.logdir)
        elif args.scenario == "abort":
            result = abort(args.logdir, args.data)
        elif args.scenario == "kill_save":
            result = kill_save(args.logdir)
        else:
            sys.exit(f"unknown scenario {args.scenario!r}")
    result["threads"] = thread_names()
    say("RESULT", json.dumps(result))


if __name__ == "__main__":
    main()
