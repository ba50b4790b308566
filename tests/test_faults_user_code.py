"""Failures in user code: hooks, Keras callbacks, the train op (issue 7, item 2).

Whatever fails, every other hook's ``end`` runs, the queue threads are joined, and the
first error comes out of ``run`` with its own traceback; later errors are only logged.

Cross-cutting, so named after the fault rather than a module: the engine, the hooks,
``KerasCallbacks`` and ``QueueRunnerHook`` keep these promises together.
"""

from __future__ import annotations

import logging
import threading
import traceback

import pytest
import tensorflow as tf
import tf_keras

import tfr_hooks
from _faults import LinearModel
from conftest import dataset_batches, queue_batches
from helpers import FaultRecorder as Recorder

v1 = tf.compat.v1
pytestmark = pytest.mark.timeout(120)


def _frames(error: BaseException) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(error.__traceback__)]


@pytest.mark.parametrize("where", ["before_run", "after_run", "epoch_end"])
def test_a_hook_error_ends_the_run_and_every_other_hook_ends(graph, records_100, where):
    before = threading.active_count()
    batch = queue_batches(records_100, 10, num_epochs=None)  # endless: threads keep running
    model = LinearModel(batch["x"], batch["y"])
    first, failing, last = Recorder("first"), Recorder("bad", fail_in=where, at_step=3), Recorder()
    loop = tfr_hooks.SessionLoop(
        model.train_op, {"loss": model.loss}, hooks=[first, failing, last], steps_per_epoch=5
    )
    with pytest.raises(RuntimeError, match=f"bad failed in {where}") as info:
        loop.run(epochs=3)
    assert where in _frames(info.value)  # the original traceback, down to the hook
    assert first.events[-1] == "end" and last.events[-1] == "end" and failing.events[-1] == "end"
    assert threading.active_count() == before  # queue threads joined


def test_the_first_error_wins_over_later_errors_in_end(graph, records_100, caplog):
    before = threading.active_count()
    batch = queue_batches(records_100, 10, num_epochs=None)
    model = LinearModel(batch["x"], batch["y"])
    failing = Recorder("step", fail_in="after_run", at_step=2)
    end_fails = [Recorder(f"end{i}", fail_in="end") for i in range(2)]
    survivor = Recorder("survivor")
    loop = tfr_hooks.SessionLoop(
        model.train_op,
        {"loss": model.loss},
        hooks=[*end_fails, failing, survivor],
        steps_per_epoch=5,
    )
    with (
        caplog.at_level(logging.ERROR, logger="tfr_hooks"),
        pytest.raises(RuntimeError, match="step failed in after_run") as info,
    ):
        loop.run(epochs=2)
    assert "after_run" in _frames(info.value)
    assert survivor.events[-1] == "end"
    logged = " ".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    assert "end0 failed in end" in logged and "end1 failed in end" in logged
    assert threading.active_count() == before


def test_an_error_in_end_alone_is_raised_after_every_end_ran(graph, records_100):
    x, init = dataset_batches(records_100, 10)
    model = LinearModel(x["x"], x["y"])
    bad, good = Recorder("bad", fail_in="end"), Recorder("good")
    loop = tfr_hooks.SessionLoop(
        model.train_op, {"loss": model.loss}, hooks=[bad, good], initializers=[init]
    )
    with pytest.raises(RuntimeError, match="bad failed in end") as info:
        loop.run(epochs=2)
    assert "end" in _frames(info.value)
    assert bad.events == ["begin", "epoch_end 0", "epoch_end 1", "end"]
    assert good.events[-1] == "end"


def test_a_failing_train_op_assertion_is_raised_with_threads_joined(graph, records_100):
    before = threading.active_count()
    batch = queue_batches(records_100, 10, num_epochs=None)
    model = LinearModel(batch["x"], batch["y"])
    # the records' index grows: the assertion fails on the 6th batch (indices 50-59)
    check = tf.debugging.assert_less(batch["index"], tf.constant(50, tf.int64), message="bad idx")
    with tf.control_dependencies([check]):
        train_op = tf.group(model.train_op)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(train_op, {"loss": model.loss}, hooks=[rec], steps_per_epoch=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad idx"):
        loop.run(epochs=5)
    assert rec.events == ["begin", "epoch_end 0", "end"]  # epoch 1 failed at its 2nd step
    assert threading.active_count() == before


def test_an_error_in_a_keras_callback_ends_the_run_cleanly(graph, records_100):
    before = threading.active_count()
    batch = queue_batches(records_100, 10, num_epochs=None)
    inputs = tf_keras.layers.Input(tensor=batch["x"])
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2, activation="softmax")(inputs))
    training = tfr_hooks.keras_training_graph(
        model,
        batch["y"],
        loss="sparse_categorical_crossentropy",
        optimizer=tf_keras.optimizers.legacy.SGD(0.1),
    )

    class Broken(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                raise ZeroDivisionError("callback bug")

    ended: list[str] = []

    class Ends(tf_keras.callbacks.Callback):
        def on_train_end(self, logs=None):  # not called after a failure, as in fit
            ended.append("on_train_end")

    rec = Recorder()
    hook = tfr_hooks.KerasCallbacks([Broken(), Ends()], model)
    loop = tfr_hooks.SessionLoop(
        training.train_op, training.fetches, hooks=[hook, rec], steps_per_epoch=5
    )
    with pytest.raises(ZeroDivisionError, match="callback bug") as info:
        loop.run(epochs=2)
    assert "on_train_batch_end" in _frames(info.value)
    assert rec.events == ["begin", "end"]
    assert ended == []
    assert threading.active_count() == before


def test_keyboard_interrupt_in_a_step_still_joins_threads(graph, records_100):
    before = threading.active_count()
    batch = queue_batches(records_100, 10, num_epochs=None)
    model = LinearModel(batch["x"], batch["y"])

    class Interrupt(tfr_hooks.Hook):
        def after_run(self, run_context, run_values):
            if self.loop.global_step == 3:
                raise KeyboardInterrupt

    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        model.train_op, {"loss": model.loss}, hooks=[Interrupt(), rec], steps_per_epoch=10
    )
    with pytest.raises(KeyboardInterrupt):
        loop.run(epochs=2)
    assert rec.events[-1] == "end"
    assert threading.active_count() == before
