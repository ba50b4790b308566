"""What several test files share: tiny models and data, recording hooks, event-file readers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tfr_hooks
from tfr_hooks.graph.metrics import RunningMeans

v1 = tf.compat.v1

N_TRAIN, N_VAL, BATCH = 96, 48, 24  # 4 train and 2 validation batches, all full


def arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, y


TRAIN = arrays(N_TRAIN, 0)
VAL = arrays(N_VAL, 1)


def initial_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(42)
    return [
        rng.normal(scale=0.5, size=(4, 8)).astype(np.float32),
        np.zeros(8, np.float32),
        rng.normal(scale=0.5, size=(8, 2)).astype(np.float32),
        np.zeros(2, np.float32),
    ]


def head(inputs: Any) -> Any:
    hidden = tf_keras.layers.Dense(8, activation="relu")(inputs)
    return tf_keras.layers.Dense(2, activation="softmax")(hidden)


def batches(data: tuple[np.ndarray, np.ndarray], *, repeat: bool = False) -> Any:
    ds = tf.data.Dataset.from_tensor_slices(data)
    if repeat:
        ds = ds.repeat()
    return ds.batch(BATCH)


class TensorFed:
    """A tensor-fed tf_keras model with a SessionLoop-ready training graph.

    Build inside ``with tf.Graph().as_default()``; weights start at ``initial_weights``.
    """

    def __init__(
        self,
        *,
        lr: float = 0.1,
        steps_per_epoch: int | None = None,
        metrics: tuple[str, ...] = ("accuracy",),
        validation: bool = True,
        validation_steps: int | None = None,
    ) -> None:
        repeat = steps_per_epoch is not None
        it = v1.data.make_initializable_iterator(batches(TRAIN, repeat=repeat))
        x, y = it.get_next()
        self.model = tf_keras.Model(*_io(tf_keras.layers.Input(tensor=x)))
        self.optimizer = tf_keras.optimizers.legacy.SGD(lr)
        self.training = tfr_hooks.keras_training_graph(
            self.model,
            y,
            loss="sparse_categorical_crossentropy",
            optimizer=self.optimizer,
            metrics=list(metrics),
        )
        self.validation = None
        if validation:
            val_it = v1.data.make_initializable_iterator(batches(VAL))
            vx, vy = val_it.get_next()
            self.validation = self.training.validation(
                vx, vy, initializers=[val_it.initializer], steps=validation_steps
            )
        self.initializer = it.initializer
        self.steps_per_epoch = steps_per_epoch
        self.session = v1.Session()
        with self.session.as_default():
            self.model.set_weights(initial_weights())

    def loop(self, hooks: list[Any]) -> tfr_hooks.SessionLoop:
        return tfr_hooks.SessionLoop(
            self.training,
            hooks=hooks,
            steps_per_epoch=self.steps_per_epoch,
            initializers=[self.initializer],
            validation=self.validation,
        )

    def run(self, callbacks: list[Any], epochs: int, **kwargs: Any) -> dict[str, list[float]]:
        hook = self.training.keras_callbacks(callbacks, **kwargs)
        return self.loop([hook]).run(epochs, session=self.session)

    def weights(self) -> list[np.ndarray]:
        with self.session.as_default():
            return list(self.model.get_weights())

    def evaluate_val(self) -> float:
        """Validation loss of the current weights, computed by the loop's own pass."""
        assert self.validation is not None
        means = RunningMeans(self.validation.fetches, self.validation.batch_size)
        self.session.run([means.reset, *self.validation.initializers])
        value = float("nan")
        while True:
            try:
                value = float(self.session.run(means.update)["loss"])
            except tf.errors.OutOfRangeError:
                return value


def _io(inputs: Any) -> tuple[Any, Any]:
    return inputs, head(inputs)


def compiled_model(lr: float = 0.1, metrics: tuple[str, ...] = ("accuracy",)) -> Any:
    """The same architecture as ``TensorFed``, compiled for ``model.fit``."""
    inputs = tf_keras.layers.Input(shape=(4,))
    model = tf_keras.Model(inputs, head(inputs))
    model.compile(
        optimizer=tf_keras.optimizers.legacy.SGD(lr),
        loss="sparse_categorical_crossentropy",
        metrics=list(metrics),
    )
    model.set_weights(initial_weights())
    return model


class Recorder:
    """Builds a Callback subclass (of a given Keras) recording every call."""

    @staticmethod
    def make(keras: Any) -> Any:
        class _Recorder(keras.callbacks.Callback):  # type: ignore[name-defined,misc]
            def __init__(self) -> None:
                super().__init__()
                self.calls: list[tuple[Any, ...]] = []
                self.values: list[dict[str, Any]] = []
                self.begin_params: dict[str, Any] = {}

            def _rec(self, name: str, *args: Any) -> None:
                logs = args[-1] or {}
                self.calls.append((name, *args[:-1], tuple(sorted(logs))))
                self.values.append(dict(logs))

            def on_train_begin(self, logs=None):  # type: ignore[no-untyped-def]
                self.begin_params = dict(self.params)
                self._rec("on_train_begin", logs)

            def on_train_end(self, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_train_end", logs)

            def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_epoch_begin", epoch, logs)

            def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_epoch_end", epoch, logs)

            def on_train_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_train_batch_begin", batch, logs)

            def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_train_batch_end", batch, logs)

            def on_test_begin(self, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_test_begin", logs)

            def on_test_end(self, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_test_end", logs)

            def on_test_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_test_batch_begin", batch, logs)

            def on_test_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
                self._rec("on_test_batch_end", batch, logs)

        return _Recorder()


def scalars(path: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(path))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


WATCHER = "tfr_hooks-signal-watcher"


class Threads(tfr_hooks.Hook):
    """Notes the thread names during the first step, and the coordinator it was given."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.coord: Any = None

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.coord = coord

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if not self.names:
            self.names = [t.name for t in threading.enumerate()]
