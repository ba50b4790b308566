"""Wrong types and values for the public API fail at once, with one clear message each.

Issue 7, item 7. Each case builds the call in a fresh graph and pins the message: what
was expected, and the value received. The public API checks its arguments with
:mod:`tfr_hooks.checks`, so its wording is tested here for every entry point.
"""

from __future__ import annotations

import signal

import pytest
import tensorflow as tf
import tf_keras

import tfr_hooks
from tfr_hooks import tfrecord

v1 = tf.compat.v1
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def parts(graph, records_100):
    x = tf.ones([8, 4])
    loss = tf.reduce_mean(tf.Variable(tf.zeros([4])) * x)
    inputs = tf_keras.layers.Input(tensor=x)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2)(inputs))
    return {"train_op": tf.no_op(), "loss": loss, "model": model, "x": x, "data": records_100}


def _loop(p, **kwargs):
    return tfr_hooks.SessionLoop(p["train_op"], {"loss": p["loss"]}, **kwargs)


CASES = {
    # SessionLoop and its run
    "train_op None": (
        lambda p: tfr_hooks.SessionLoop(None),
        TypeError,
        r"Expected `train_op` to be a tf.Operation or tf.Tensor. Received: train_op=None",
    ),
    "train_op eager": (
        lambda p: tfr_hooks.SessionLoop("train"),
        TypeError,
        r"Expected `train_op` to be a graph-mode tf.Operation .* Received: train_op='train'",
    ),
    "fetches a list": (
        lambda p: tfr_hooks.SessionLoop(p["train_op"], [p["loss"]]),
        TypeError,
        r"Expected `fetches` to be a dict from names to scalar tensors. Received: fetches=\[",
    ),
    "fetch not a tensor": (
        lambda p: tfr_hooks.SessionLoop(p["train_op"], {"loss": 1.0}),
        TypeError,
        r"Expected `fetches\['loss'\]` to be a tensor. Received: fetches\['loss'\]=1.0",
    ),
    "hook not a hook": (
        lambda p: _loop(p, hooks=[object()]),
        TypeError,
        r"Expected `hooks\[0\]` to be a tf.compat.v1.train.SessionRunHook .*"
        r"Received: hooks\[0\]=<object object",
    ),
    "hooks a single hook": (
        lambda p: _loop(p, hooks=tfr_hooks.Hook()),
        TypeError,
        r"Expected `hooks` to be a list of tf.compat.v1.train.SessionRunHook instances",
    ),
    "steps_per_epoch 0": (
        lambda p: _loop(p, steps_per_epoch=0),
        ValueError,
        r"Expected `steps_per_epoch` to be a positive integer or None. "
        r"Received: steps_per_epoch=0",
    ),
    "run_timeout_secs 0": (
        lambda p: _loop(p, run_timeout_secs=0),
        ValueError,
        r"Expected `run_timeout_secs` to be a positive number or None",
    ),
    "handle_signals str": (
        lambda p: _loop(p, handle_signals="yes"),
        TypeError,
        r"Expected `handle_signals` to be a bool. Received: handle_signals='yes'",
    ),
    "validation_data a dict": (
        lambda p: _loop(p).run(validation_data={"loss": p["loss"]}),
        TypeError,
        r"Expected `validation_data` to be a tfr_hooks.Validation or None",
    ),
    "epochs 0": (
        lambda p: _loop(p).run(epochs=0),
        ValueError,
        r"Expected `epochs` to be a positive integer. Received: epochs=0",
    ),
    "epochs negative": (
        lambda p: _loop(p).run(epochs=-3),
        ValueError,
        r"Expected `epochs` to be a positive integer. Received: epochs=-3",
    ),
    "epochs float": (
        lambda p: _loop(p).run(epochs=2.5),
        ValueError,
        r"Expected `epochs` to be a positive integer. Received: epochs=2.5",
    ),
    "initial_epoch negative": (
        lambda p: _loop(p).run(epochs=2, initial_epoch=-1),
        ValueError,
        r"Expected `initial_epoch` to be a non-negative integer. Received: initial_epoch=-1",
    ),
    "session of another graph": (
        lambda p: _loop(p).run(epochs=1, session=v1.Session(graph=tf.Graph())),
        ValueError,
        r"Expected `session` to be a tf.compat.v1.Session on the train op's graph",
    ),
    # Keras callbacks
    "callback not a callback": (
        lambda p: tfr_hooks.KerasCallbacks([tf_keras.callbacks.History(), "csv"], p["model"]),
        TypeError,
        r"Expected `callbacks\[1\]` to be a tf_keras.callbacks.Callback. "
        r"Received: callbacks\[1\]='csv'",
    ),
    "callback of Keras 3 for a tf_keras model": (
        lambda p: tfr_hooks.KerasCallbacks([_keras3().callbacks.History()], p["model"]),
        TypeError,
        r"a callback of another Keras: the model is a tf_keras model, so use "
        r"tf_keras.callbacks.History",
    ),
    "callbacks a single callback": (
        lambda p: tfr_hooks.KerasCallbacks(tf_keras.callbacks.History(), p["model"]),
        TypeError,
        r"Expected `callbacks` to be a list of tf_keras.callbacks.Callback instances",
    ),
    "model not a model": (
        lambda p: tfr_hooks.KerasCallbacks([], object()),
        TypeError,
        r"Expected `model` to be a tf_keras.Model or a keras.Model \(Keras 3\)",
    ),
    "verbose 3": (
        lambda p: tfr_hooks.KerasCallbacks([], p["model"], verbose=3),
        ValueError,
        r"Expected `verbose` to be one of 0, 1, 2 or 'auto'. Received: verbose=3",
    ),
    # the Keras training graph: a model without the needed tensors
    "labels not a tensor": (
        lambda p: tfr_hooks.keras_training_graph(
            p["model"], [0, 1], loss="mse", optimizer=tf_keras.optimizers.legacy.SGD()
        ),
        TypeError,
        r"Expected `labels` to be a tensor",
    ),
    "non-legacy optimizer": (
        lambda p: tfr_hooks.keras_training_graph(
            p["model"], tf.ones([8]), loss="mse", optimizer=tf_keras.optimizers.SGD()
        ),
        TypeError,
        r"Expected `optimizer` to be a legacy tf_keras optimizer",
    ),
    "model with two outputs": (
        lambda p: tfr_hooks.keras_training_graph(
            _two_outputs(p["x"]), tf.ones([8]), loss="mse", optimizer=_sgd()
        ),
        TypeError,
        r"Expected `model` to have a single output \(or pass `outputs`\). "
        r"Received: model=.* with 2 outputs",
    ),
    # reader: bad batch sizes and pipelines
    "batch_size 0": (
        lambda p: tfrecord.read_batches(p["data"], 0),
        ValueError,
        r"Expected `batch_size` to be a positive integer. Received: batch_size=0",
    ),
    "batch_size str": (
        lambda p: tfrecord.read_batches(p["data"], "32"),
        ValueError,
        r"Expected `batch_size` to be a positive integer. Received: batch_size='32'",
    ),
    "batch_size negative (dataset)": (
        lambda p: tfrecord.dataset(p["data"], -8),
        ValueError,
        r"Expected `batch_size` to be a positive integer. Received: batch_size=-8",
    ),
    "pipeline unknown": (
        lambda p: tfrecord.read_batches(p["data"], 8, pipeline="queues"),
        ValueError,
        r"Expected `pipeline` to be 'dataset' or 'queue'. Received: pipeline='queues'",
    ),
    "capacity below batch": (
        lambda p: tfrecord.read_batches(
            p["data"], 8, pipeline="queue", read_config=tfrecord.ReadConfig(capacity=4)
        ),
        ValueError,
        r"Expected `capacity` to exceed the buffer of `shuffle` and be at least `batch_size`",
    ),
    "no files": (
        lambda p: tfrecord.read_batches(str(p["data"]) + ".missing*", 8),
        tfrecord.NoFilesError,
        r"No files match the pattern",
    ),
    # hooks of this issue
    "StopOnSignal SIGKILL": (
        lambda p: tfr_hooks.StopOnSignal([signal.SIGKILL]),
        ValueError,
        r"Expected `signals` to be signals that can be caught \(not SIGKILL or SIGSTOP\)",
    ),
    "StopOnSignal a name": (
        lambda p: tfr_hooks.StopOnSignal("SIGINT"),
        TypeError,
        r"Expected `signals` to be a sequence of signal numbers .* Received: signals='SIGINT'",
    ),
    "StopOnSignal no signal": (
        lambda p: tfr_hooks.StopOnSignal([]),
        ValueError,
        r"Expected `signals` to be a sequence naming at least one signal. Received: signals=\[\]",
    ),
    "StopOnSignal unblock 0": (
        lambda p: tfr_hooks.StopOnSignal(unblock_after_secs=0),
        ValueError,
        r"Expected `unblock_after_secs` to be a positive number. Received: unblock_after_secs=0",
    ),
    "EpochCheckpoint no log_dir": (
        lambda p: tfr_hooks.EpochCheckpoint(None),
        TypeError,
        r"Expected `log_dir` to be a directory path. Received: log_dir=None",
    ),
    "EpochCheckpoint max_to_keep 0": (
        lambda p: tfr_hooks.EpochCheckpoint("ckpt", max_to_keep=0),
        ValueError,
        r"Expected `max_to_keep` to be a positive integer. Received: max_to_keep=0",
    ),
    "QueueRunnerHook grace 0": (
        lambda p: tfr_hooks.QueueRunnerHook(grace_period_secs=0),
        ValueError,
        r"Expected `grace_period_secs` to be a positive number. Received: grace_period_secs=0",
    ),
}


def _keras3():
    import keras

    return keras


def _sgd():
    return tf_keras.optimizers.legacy.SGD()


def _two_outputs(x):
    inputs = tf_keras.layers.Input(tensor=x)
    return tf_keras.Model(
        inputs, [tf_keras.layers.Dense(1)(inputs), tf_keras.layers.Dense(1)(inputs)]
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_fails_at_once_with_a_clear_message(parts, case):
    build, error_type, message = CASES[case]
    with pytest.raises(error_type, match=message):
        build(parts)


def test_function_loop_refuses_bad_arguments():
    import keras

    data = tf.data.Dataset.from_tensor_slices((tf.ones([8, 4]), tf.ones([8]))).batch(4)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=r"Expected `model` to be compiled"):
        tfr_hooks.FunctionLoop(data, model=model)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(TypeError, match=r"Expected `data` to be a tf.data.Dataset of batches"):
        tfr_hooks.FunctionLoop([1, 2, 3], model=model)
    with pytest.raises(ValueError, match=r"Expected exactly one of `model`"):
        tfr_hooks.FunctionLoop(data)
    with pytest.raises(ValueError, match=r"Received: steps_per_execution=0"):
        tfr_hooks.FunctionLoop(data, model=model, steps_per_execution=0)
    with pytest.raises(ValueError, match=r"needs a tf.compat.v1.Session"):
        tfr_hooks.FunctionLoop(data, model=model, hooks=[tfr_hooks.EpochCheckpoint("ckpt")])
    with pytest.raises(TypeError, match=r"Received: handle_signals=1"):
        tfr_hooks.FunctionLoop(data, model=model, handle_signals=1)
    with pytest.raises(ValueError, match=r"Expected `epochs` to be a positive integer"):
        tfr_hooks.FunctionLoop(data, model=model).run(epochs=0)
