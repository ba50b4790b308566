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
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
            env={**os.environ, **env},
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
    return {k: [float(v) for v in vs] for k, vs in history.items()}


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    import tensorflow as tf

    import tfr_hooks
    from conftest import FEATURES, dataset_batches

    mode, path = argv[0], argv[1]
    result: dict[str, Any] = {}
    if mode == "session":
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


if __name__ == "__main__":
    main(sys.argv[1:])
