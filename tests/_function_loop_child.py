"""Tiny Keras 3 models and data for the FunctionLoop tests, and the script their subprocesses run.

As a script (``python tests/_function_loop_child.py MODE ...``) it prints one JSON line:

* ``resume BACKUP_DIR [--kill-at-epoch E]``: train 5 epochs with ``BackupAndRestore``;
  with ``--kill-at-epoch`` the process sends itself SIGKILL in the middle of epoch E.
* ``strategy``: configure two logical CPUs (before TensorFlow starts its runtime) and
  train under ``MirroredStrategy`` and without it (also with ``class_weight``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

N_TRAIN, N_VAL, BATCH = 96, 48, 24  # 4 training and 2 validation batches per epoch
EPOCHS = 5


def arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, y


def batches(n: int = N_TRAIN, seed: int = 0, batch: int = BATCH) -> Any:
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(arrays(n, seed)).batch(batch)


def make_model() -> Any:
    """A compiled two-layer classifier with a stateful optimizer (SGD with momentum)."""
    from helpers import keras_classifier

    return keras_classifier(momentum=0.9)


def _resume(backup_dir: str, kill_at_epoch: int | None) -> dict[str, Any]:
    import signal

    import keras

    from tfr_hooks import FunctionLoop, KerasCallbacks

    seen: dict[str, Any] = {"epochs": []}

    class Watch(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            seen["iterations_at_begin"] = int(self.model.optimizer.iterations)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            seen["epochs"].append(epoch)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if kill_at_epoch is not None and seen["epochs"][-1] == kill_at_epoch and batch == 1:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    model = make_model()
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir), Watch()]
    loop = FunctionLoop(batches(), model=model, hooks=[KerasCallbacks(callbacks, model)])
    history = loop.run(epochs=EPOCHS)
    seen["history_epochs"] = len(history["loss"])
    seen["iterations"] = int(model.optimizer.iterations)
    seen["weights"] = [w.tolist() for w in model.get_weights()]
    return seen


def _strategy() -> dict[str, Any]:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    import keras

    from tfr_hooks import FunctionLoop, Hook

    class Counts(Hook):
        needs_every_step = False  # counts calls: "auto" is to make fewer than steps

        def begin(self) -> None:
            self.epochs: list[tuple[int, int]] = []
            self.calls = 0

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.calls += 1

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            self.epochs.append((self.loop.epoch_steps, self.loop.epoch_examples))

    result: dict[str, Any] = {}
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result["replicas"] = strategy.num_replicas_in_sync
    index = tf.data.Dataset.range(1000).batch(128)  # 7 batches of 128 and one of 104

    def step(batch: Any) -> dict[str, Any]:
        ctx = tf.distribute.get_replica_context()
        return {
            "index": tf.reduce_mean(tf.cast(batch, tf.float32)),
            "replica": tf.cast(ctx.replica_id_in_sync_group, tf.float32),
        }

    for spe in (1, 3):
        counts = Counts()
        history = FunctionLoop(
            index, step_fn=step, hooks=[counts], steps_per_execution=spe, strategy=strategy
        ).run(epochs=2)
        result[f"step_fn_{spe}"] = {"history": history, "epochs": counts.epochs}
        result[f"step_fn_{spe}"]["calls"] = counts.calls

    # "auto" under the strategy: 500 cheap steps an epoch, the value chosen from the calls
    from tfr_hooks.tuning import StepsTuner

    class Cheap(StepsTuner):
        """Sees each call of k steps last 2 ms + 0.5 ms a step, on any machine's load."""

        def observe(self, steps: int, limit: int, secs: float) -> int:
            return super().observe(steps, limit, 0.002 + steps * 0.0005)

    counts = Counts()
    auto = FunctionLoop(
        tf.data.Dataset.range(8000).batch(16),
        step_fn=step,
        hooks=[counts],
        steps_per_execution="auto",
        strategy=strategy,
    )
    assert auto.tuning is not None
    auto.tuning.train = Cheap()
    history = auto.run(epochs=2)
    result["step_fn_auto"] = {"history": history, "epochs": counts.epochs, "calls": counts.calls}

    def train(strategy: Any, class_weight: dict[int, float] | None = None) -> dict[str, Any]:
        with strategy.scope():
            model = make_model()
        counts = Counts()
        history = FunctionLoop(
            batches(),
            model=model,
            hooks=[counts],
            steps_per_execution=2,
            strategy=strategy,
            class_weight=class_weight,
        ).run(epochs=3, validation_data=batches(N_VAL, 1))
        return {
            "history": history,
            "epochs": counts.epochs,
            "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            "weights": [w.tolist() for w in model.get_weights()],
        }

    result["mirrored"] = train(strategy)
    result["default"] = train(tf.distribute.get_strategy())
    # class weights, looked up on each replica's part of the batch
    result["mirrored_class_weight"] = train(strategy, {0: 1.0, 1: 4.0})
    result["default_class_weight"] = train(tf.distribute.get_strategy(), {0: 1.0, 1: 4.0})
    return result


def main(argv: list[str]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mode = argv[0]
    if mode == "resume":
        kill = int(argv[argv.index("--kill-at-epoch") + 1]) if "--kill-at-epoch" in argv else None
        result = _resume(argv[1], kill)
    elif mode == "strategy":
        result = _strategy()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
