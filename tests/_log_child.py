"""A child process for the "no OUT_OF_RANGE line is logged" tests: TensorFlow reads its log
level once, at import, so these runs need a process of their own.

``python tests/_log_child.py MODE RECORDS`` trains on ``RECORDS`` (a
file written by ``conftest.write_records``) and prints ``RESULT <json>``. Python logging is
set to DEBUG on stderr, so the package's and TensorFlow's Python log lines show next to
TensorFlow's C++ ones (whose level the caller sets with ``TF_CPP_MIN_LOG_LEVEL``).

Modes:

* ``session``: ``SessionLoop``, 4 epochs on an initializable ``tf.data`` iterator, each
  epoch ended by an ``OutOfRangeError`` from ``session.run``, with a validation pass.
* ``function``: ``FunctionLoop``, 3 epochs with validation data, with
  ``steps_per_execution`` 1 and then 32.
* ``exhaust``: the control: a ``tf.function`` that calls ``iterator.get_next()`` until the
  data raises ``OutOfRangeError``, for 3 epochs (what ``FunctionLoop`` is built to avoid).
* ``normal``: a new user's first runs, which must log no warning (``RECORDS`` is a
  directory to write a dataset into): a tf_keras model through ``keras_training_graph``
  on the queue pipeline (``num_epochs`` set, epochs shorter than the data, so the queue
  threads are still feeding when the run ends) with Keras callbacks, ``EpochCheckpoint``
  and a stock ``CheckpointSaverHook``; the same on the memory pipeline with validation;
  a Keras 3 model in a ``FunctionLoop`` with validation data and Keras callbacks.
  ``warnings.warn`` goes to Python logging as well.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The worktree's root: children import its ``tfr_hooks``, not an installed copy.
ROOT = Path(__file__).resolve().parent.parent

#: Every C++ log line, INFO and up (what a user sees at TensorFlow's most verbose level).
ALL_LEVELS = {"TF_CPP_MIN_LOG_LEVEL": "0"}
#: And ``executor.cc`` at VLOG 1, where TensorFlow 2.21 reports each ``OutOfRangeError``
#: raised in a graph or ``tf.function`` ("Executor start aborting: OUT_OF_RANGE: End of
#: sequence"); at ``ALL_LEVELS`` alone 2.21 shows none (seen for ``session.run``, eager
#: and ``tf.function`` ``get_next``, Keras 3 ``fit`` on data of unknown length).
RAISED_ERRORS = {**ALL_LEVELS, "TF_CPP_VMODULE": "executor=1"}


def run_logged(*runs: tuple[dict[str, str], tuple[str, ...]]) -> list[tuple[dict[str, Any], str]]:
    """Run this script once per ``(env, args)``, all at once; each run's (result, stderr).

    ``env`` is added to this process's environment. Every child is killed after 300 s.
    """
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__)), *args],
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
                ),
                **env,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env, args in runs
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            assert proc.returncode == 0 and lines, err[-3000:]
            outputs.append((json.loads(lines[-1][len("RESULT ") :]), err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    return outputs


def _history(history: dict[str, list[float]]) -> dict[str, list[float]]:
    """The logged metrics (not the loop's ``input/`` measurements, which vary by run)."""
    return {k: [float(v) for v in vs] for k, vs in history.items() if not k.startswith("input/")}


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    import tensorflow as tf

    import tfr_hooks
    from conftest import FEATURES, dataset_batches

    mode, path = argv[0], argv[1]
    result: dict[str, Any] = {}
    if mode == "normal":
        logging.captureWarnings(True)
        result = _normal_runs(Path(path))
    elif mode == "session":
        with tf.Graph().as_default():
            batch, init = dataset_batches(path, 30)  # 100 records: 30, 30, 30, 10
            val_batch, val_init = dataset_batches(path, 40)
            loop = tfr_hooks.SessionLoop(
                batch["index"],
                {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float32))},
                initializers=[init],
                batch_size=tf.size(batch["y"]),
            )
            validation = tfr_hooks.Validation(
                {"index": tf.reduce_mean(tf.cast(val_batch["index"], tf.float32))},
                initializers=[val_init],
                batch_size=tf.size(val_batch["y"]),
            )
            result["history"] = _history(loop.run(epochs=4, validation_data=validation))
    elif mode in ("function", "exhaust"):

        def records() -> tf.data.Dataset:
            ds = tf.data.TFRecordDataset(path).batch(128)
            return ds.map(lambda s: tf.io.parse_example(s, FEATURES))

        if mode == "function":

            def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
                return {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float32))}

            for spe in (1, 32):
                loop = tfr_hooks.FunctionLoop(
                    records(), step_fn=step, validation_step_fn=step, steps_per_execution=spe
                )
                history = loop.run(epochs=3, validation_data=records())
                result[f"history_{spe}"] = _history(history)
        else:
            total = tf.Variable(0, dtype=tf.int64)

            @tf.function
            def next_batch(iterator: Any) -> None:
                total.assign_add(tf.reduce_sum(iterator.get_next()["index"]))

            for _ in range(3):
                iterator = iter(records())
                try:
                    while True:
                        next_batch(iterator)
                except tf.errors.OutOfRangeError:
                    pass
            result["total"] = int(total.numpy())
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("RESULT " + json.dumps(result), flush=True)


def _normal_runs(directory: Path) -> dict[str, Any]:
    """The ``normal`` mode's three runs; their histories."""
    import keras
    import numpy as np
    import tensorflow as tf
    import tf_keras

    import tfr_hooks
    from tfr_hooks import tfrecord

    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    data = directory / "data"
    tfrecord.write({"x": x, "y": y}, data, shards=2)
    result: dict[str, Any] = {}
    for pipeline in ("queue", "memory"):
        with tf.Graph().as_default():
            v1.set_random_seed(0)
            v1.train.get_or_create_global_step()  # for the CheckpointSaverHook
            queue = pipeline == "queue"
            batches = tfrecord.read_batches(
                data, 20, pipeline="queue" if queue else "dataset", in_memory=not queue,
                num_epochs=3 if queue else 1, shuffle=100 if queue else "global", seed=0,
                as_tuple=("x", "y"),
            )  # fmt: skip
            features, labels = batches.tensors
            inputs = tf_keras.layers.Input(tensor=features)
            hidden = tf_keras.layers.Dense(8, activation="relu")(inputs)
            model = tf_keras.Model(inputs, tf_keras.layers.Dense(2, activation="softmax")(hidden))
            training = tfr_hooks.keras_training_graph(
                model,
                labels,
                loss="sparse_categorical_crossentropy",
                optimizer=tf_keras.optimizers.legacy.SGD(0.1),
                metrics=["accuracy"],
            )
            validation = None
            if not queue:
                named = tfrecord.ReadConfig(name="validation")
                val = tfrecord.read_batches(data, 50, in_memory=True, as_tuple=("x", "y"),
                                            read_config=named)  # fmt: skip
                validation = training.validation(*val.tensors, initializers=val.initializers)
            logdir = directory / pipeline
            callbacks = [tf_keras.callbacks.EarlyStopping(monitor="loss", patience=5)]
            loop = tfr_hooks.SessionLoop(
                training,
                data=batches,
                steps_per_epoch=4 if queue else None,  # 80 of the 200 records an epoch
                hooks=[
                    training.keras_callbacks(callbacks, verbose=0),
                    tfr_hooks.EpochCheckpoint(logdir / "epochs"),
                    v1.train.CheckpointSaverHook(str(logdir / "steps"), save_steps=3),
                ],
            )
            result[pipeline] = _history(loop.run(epochs=2, validation_data=validation))
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    loop = tfr_hooks.FunctionLoop(
        tfrecord.dataset(data, 20, shuffle=200, seed=0, as_tuple=("x", "y")),
        model=model,
        hooks=[tfr_hooks.KerasCallbacks([keras.callbacks.EarlyStopping(patience=5)], model)],
        steps_per_execution=2,
    )
    history = loop.run(epochs=2, validation_data=tfrecord.dataset(data, 50, as_tuple=("x", "y")))
    result["function"] = _history(history)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
