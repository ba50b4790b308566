"""What several test files share: tiny models and data, recording hooks, event-file readers."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tfr_hooks
import tfr_hooks.input_report
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
            self.validation = self.training.validation(vx, vy, initializers=[val_it.initializer])
        self.validation_steps = validation_steps
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
        )

    @property
    def run_kwargs(self) -> dict[str, Any]:
        """What ``loop.run`` takes besides ``epochs``: the session and the validation."""
        return {
            "session": self.session,
            "validation_data": self.validation,
            "validation_steps": self.validation_steps,
        }

    def run(self, callbacks: list[Any], epochs: int, **kwargs: Any) -> dict[str, list[float]]:
        hook = self.training.keras_callbacks(callbacks, **kwargs)
        return self.loop([hook]).run(epochs, **self.run_kwargs)

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


def metrics(history: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A run's history without the loop's own ``input/...`` keys (its input measurements,
    ``steps_per_execution="auto"``'s values): the keys ``model.fit``'s history has."""
    return {k: v for k, v in history.items() if not k.startswith("input/")}


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


class HookRecorder(tfr_hooks.Hook):
    """The suite's recording hook: every event it gets goes through ``describe``.

    ``describe(event, *args)`` returns what to append to ``events`` (``None``: nothing); the
    subclasses below are the views the tests read. ``events`` is the hook's own list, emptied
    at each ``begin`` so one instance can be reused, unless a list shared with other hooks is
    given. With ``fail_in``, the hook raises ``RuntimeError`` in that event (from global step
    ``at_step`` on, for the step events).
    """

    def __init__(
        self,
        name: str = "",
        *,
        events: list[Any] | None = None,
        fail_in: str | None = None,
        at_step: int = 0,
    ) -> None:
        self.name = name
        self.fail_in = fail_in
        self.at_step = at_step
        self._shared = events is not None
        self.events: list[Any] = events if events is not None else []

    def describe(self, event: str, *args: Any) -> Any:
        return (event, *args)

    def _note(self, event: str, *args: Any) -> None:
        item = self.describe(event, *args)
        if item is not None:
            self.events.append(item)
        if self.fail_in == event and (
            event in ("end", "epoch_end") or self.loop.global_step >= self.at_step
        ):
            raise RuntimeError(f"{self.name} failed in {event}")

    def begin(self) -> None:
        if not self._shared:
            self.events = []
        self._note("begin")

    def after_create_session(self, session: Any, coord: Any) -> None:
        self._note("after_create_session", session, coord)

    def epoch_begin(self, epoch: int) -> None:
        self._note("epoch_begin", epoch)

    def before_run(self, run_context: Any) -> Any:
        self._note("before_run", run_context)
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._note("after_run", run_context, run_values)

    def validation_begin(self) -> None:
        self._note("validation_begin")

    def validation_batch_begin(self, step: int) -> None:
        self._note("validation_batch_begin", step)

    def validation_batch_end(self, step: int, logs: dict[str, Any]) -> None:
        self._note("validation_batch_end", step, logs)

    def validation_end(self, logs: dict[str, Any]) -> None:
        self._note("validation_end", logs)

    def epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
        self._note("epoch_end", epoch, logs)

    def end(self, session: Any) -> None:
        self._note("end", session)


class LoopRecorder(HookRecorder):
    """SessionLoop's view: each event as a tuple with what the loop state says at that moment."""

    def describe(self, event: str, *args: Any) -> Any:
        loop = self.loop
        if event == "epoch_begin":
            return (event, args[0], loop.steps_per_epoch)
        if event == "before_run":
            return (event, loop.epoch_steps)
        if event == "after_run":
            return (event, loop.epoch_steps, dict(loop.batch_logs))
        if event == "validation_batch_begin":
            return None
        if event == "validation_batch_end":
            return (event, args[0])
        if event == "validation_end":
            return (event, dict(args[0]))
        if event == "epoch_end":
            return (event, args[0], loop.epoch_steps, loop.epoch_examples, dict(args[1]))
        return (event,)

    def names(self) -> list[str]:
        return [e[0] for e in self.events]


class FunctionLoopRecorder(HookRecorder):
    """FunctionLoop's view: run contexts carry no session; step results and counts as seen."""

    def describe(self, event: str, *args: Any) -> Any:
        loop = self.loop
        if event == "begin":
            return (event, loop.steps_per_execution)
        if event == "after_create_session":
            return (event, args[0])
        if event == "before_run":
            assert args[0].session is None
            return (event, loop.epoch_steps)
        if event == "after_run":
            self.last_logs = dict(loop.batch_logs)
            return (event, loop.epoch_steps, args[1].results)
        if event in ("epoch_begin", "validation_batch_begin", "validation_batch_end"):
            return (event, args[0])
        if event == "validation_end":
            return (event, dict(args[0]))
        if event == "epoch_end":
            return (event, args[0], loop.epoch_steps, loop.epoch_examples, dict(args[1]))
        if event == "end":
            return (event, loop.global_step)
        return (event,)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == name]


class LifecycleRecorder(HookRecorder):
    """The fake runner's view: calls as strings (``"epoch_begin(0)"``), prefixed with ``name``,
    appended to ``events`` (shared between hooks)."""

    def __init__(self, events: list[Any], name: str = "") -> None:
        super().__init__(name, events=events)
        self.epoch_logs: list[dict[str, Any]] = []
        self.after_run_results: list[Any] = []

    def describe(self, event: str, *args: Any) -> Any:
        if event == "after_create_session":
            event = f"{event}({args[0]}, {args[1]})"
        elif event == "before_run":
            assert args[0].original_args.fetches == "train_op"
            assert args[0].session == "fake-session"
        elif event == "after_run":
            self.after_run_results.append(args[1].results)
        elif event in ("epoch_begin", "validation_batch_begin", "validation_batch_end", "end"):
            event = f"{event}({args[0]})"
        elif event == "epoch_end":
            self.epoch_logs.append(dict(args[1]))
            event = f"{event}({args[0]})"
        return f"{self.name}{event}"


class EpochSizes(tfr_hooks.Hook):
    """The steps and examples of each epoch, read from ``self.loop`` at ``epoch_end``.

    An epoch that never ends becomes a quick failure: the hook raises ``RuntimeError``
    once an epoch has run more than ``max_steps`` steps (more than its data can hold).
    """

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.sizes: list[tuple[int, int]] = []

    def begin(self) -> None:
        self.sizes = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.loop.epoch_steps > self.max_steps:
            raise RuntimeError(
                f"epoch {self.loop.epoch} ran {self.loop.epoch_steps} steps, more than the "
                f"{self.max_steps} its data holds: it would never end"
            )

    def epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
        self.sizes.append((self.loop.epoch_steps, self.loop.epoch_examples))


class FaultRecorder(HookRecorder):
    """The fault tests' view: only ``begin``, ``epoch_end <epoch>`` and ``end``."""

    def __init__(self, name: str = "rec", *, fail_in: str | None = None, at_step: int = 0):
        super().__init__(name, fail_in=fail_in, at_step=at_step)

    def describe(self, event: str, *args: Any) -> Any:
        if event == "epoch_end":
            return f"epoch_end {args[0]}"
        return event if event in ("begin", "end") else None


def keras_classifier(
    *,
    hidden: int = 8,
    optimizer: str = "sgd",
    lr: float = 0.05,
    momentum: float = 0.0,
    seed: int | None = 0,
    steps_per_execution: int = 1,
) -> Any:
    """A compiled Keras 3 ``4 -> hidden (relu) -> 2 logits`` classifier of sparse labels.

    ``optimizer`` is ``"sgd"`` (with ``momentum``) or ``"adam"``; ``seed=None`` leaves Keras'
    random seed alone. Build it inside a strategy's scope to distribute it.
    """
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(hidden, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=_keras_optimizer(optimizer, lr, momentum),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


def keras_regressor(
    *,
    inputs: int = 4,
    optimizer: str = "sgd",
    lr: float = 0.1,
    momentum: float = 0.0,
    seed: int | None = 0,
) -> Any:
    """A compiled Keras 3 linear regressor ``inputs -> 1`` with a mean squared error loss."""
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(1)])
    model.compile(optimizer=_keras_optimizer(optimizer, lr, momentum), loss="mse")
    return model


def _keras_optimizer(name: str, lr: float, momentum: float) -> Any:
    import keras

    if name == "adam":
        return keras.optimizers.Adam(lr)
    return keras.optimizers.SGD(lr, momentum=momentum)


class SigtermAt(tfr_hooks.Hook):
    """Sends this process a real SIGTERM after step ``step`` of epoch ``epoch``."""

    def __init__(self, epoch: int, step: int) -> None:
        self.at = (epoch, step)
        self.sent: tuple[int, int] | None = None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.sent is None and (self.loop.epoch, self.loop.epoch_steps) == self.at:
            self.sent = self.at
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.5)  # TensorFlow's handler polls for the signal once a second
        elif self.sent is not None:
            time.sleep(0.2)  # in case the machine is slow to run the polling thread


def preemptible_run(
    data: Any, key: str, directory: Any, at: tuple[int, int] | None, epochs: int
) -> tuple[dict[int, list[list[int]]], tuple[Any, int]]:
    """Train a ``FunctionLoop`` on ``data`` with a ``PreemptionCheckpoint`` in ``directory``.

    Returns the batches' ``key`` values it trained on by epoch, the ``Preempted`` it
    stopped with (``None`` if it ran to the end) and its step counter. With ``at``, a
    real SIGTERM comes after that ``(epoch, step)``.
    """
    seen: dict[int, list[list[int]]] = {}
    counter = tf.Variable(0, dtype=tf.int64)
    state: list[Any] = []

    def note(indices: Any) -> Any:
        seen.setdefault(state[0].epoch, []).append(indices.numpy().tolist())
        return np.int64(0)

    def step_fn(b: Any) -> dict[str, Any]:
        tf.py_function(note, [b[key]], tf.int64)
        counter.assign_add(1)
        return {"steps": tf.cast(counter, tf.float64)}

    hooks: list[Any] = [tfr_hooks.PreemptionCheckpoint(directory, objects={"counter": counter})]
    if at is not None:
        hooks.insert(0, SigtermAt(*at))
    loop = tfr_hooks.FunctionLoop(data, step_fn=step_fn, hooks=hooks)
    state.append(loop.loop)
    stop = None
    try:
        loop.run(epochs=epochs)
    except tfr_hooks.Preempted as preempted:
        stop = preempted
    return seen, (stop, int(counter.numpy()))
