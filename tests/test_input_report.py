"""Both loops say how much of each step waits for input, and what to change (issue 21).

The end-to-end tests are honest by construction: an input slowed on purpose (a batch map
that sleeps) under a small model, and a large model on data held in memory. In each, the
share the loop reports is compared with the share implied by the input-alone and
model-alone times measured in the same test. Their pipelines prefetch, so the input
works while the step runs: a step waits ``max(0, input - model)`` and lasts
``max(input, model)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import TensorFed, keras_classifier, scalars
from tfr_hooks import (
    FunctionLoop,
    Hook,
    KerasCallbacks,
    LoopState,
    SessionLoop,
    TensorBoardLogger,
    tfrecord,
)
from tfr_hooks.engine import run_loop
from tfr_hooks.hooks import HookList
from tfr_hooks.input_report import (
    EXAMPLES_PER_SEC,
    HISTORY_KEYS,
    INPUT_BOUND,
    MODERATELY_INPUT_BOUND,
    NOT_INPUT_BOUND,
    WAIT_SHARE,
    EpochClock,
    InputFacts,
    InputReport,
    InputStats,
    classify,
    remedy,
    verdict,
)
from tfr_hooks.tuning import HISTORY_KEY as STEPS_KEY

v1 = tf.compat.v1

SLEEP_SECS = 0.05  # per batch of the slowed input
SMALL_BATCH, SMALL_BATCHES = 16, 8
LARGE_BATCH, LARGE_BATCHES, LARGE_WIDTH, LARGE_HIDDEN = 128, 6, 256, 2048
LARGE_STEPS = 12  # per epoch, of data repeated without end
TOLERANCE = 0.10  # the 10 percentage points


# --- the parts, called directly -------------------------------------------------------


def test_classes_follow_the_profilers_thresholds() -> None:
    assert [classify(s) for s in (0.0, 0.049, 0.05, 0.2, 0.201, 1.0)] == [
        NOT_INPUT_BOUND,
        NOT_INPUT_BOUND,
        MODERATELY_INPUT_BOUND,
        MODERATELY_INPUT_BOUND,
        INPUT_BOUND,
        INPUT_BOUND,
    ]


def _stats(share: float, *, secs_per_step: float = 0.01, epoch: int = 0) -> InputStats:
    steps = 100
    return InputStats(
        epoch, steps, steps * 32, share * steps * secs_per_step, steps * secs_per_step
    )


def _streamed(decoded: int, record: float) -> InputFacts:
    """The facts of a streamed read whose files measured so (memory budget 1 GB)."""
    from tfr_hooks.tfrecord import PipelineKind, ReadFacts
    from tfr_hooks.tfrecord.pipelines.decide import DataFacts

    measured = DataFacts(decoded_nbytes=decoded, memory_budget=10**9, record_nbytes=record)
    return InputFacts(ReadFacts(kind=PipelineKind.STREAMED), measured)


def test_the_remedy_fits_the_run() -> None:
    fits = _streamed(10**6, 5000.0)
    small = _streamed(10**12, 100.0)
    large = _streamed(10**12, 10**5)
    bound = _stats(0.6)
    assert "in_memory=True" in remedy(bound, fits)
    assert "packed shards" in remedy(bound, small)
    assert "map_fn" in remedy(bound, large)
    assert "in_memory='auto'" in remedy(bound, InputFacts())  # a dataset of unknown files
    assert remedy(_stats(0.01), fits).startswith("The model is the bottleneck")
    short = _stats(0.01, secs_per_step=0.0005)
    assert "steps_per_execution" in remedy(short, InputFacts(steps_per_execution=1))
    assert "steps_per_execution" not in remedy(short, InputFacts(steps_per_execution=8))
    assert "steps_per_execution" not in remedy(short, InputFacts())  # SessionLoop has none
    # "auto" held at 1 by a hook: the remedy says which, and what frees it
    held = InputFacts(steps_per_execution=1, steps_held_by="hooks[0]=<Counts> needs every step")
    assert "stays at 1 because hooks[0]=<Counts> needs every step" in remedy(short, held)
    assert "needs_every_step = False" in remedy(short, held)
    assert "raise steps_per_execution" not in remedy(short, held)


def test_the_remedy_names_the_data_service_when_the_data_does_not_fit() -> None:
    small = _streamed(10**12, 100.0)
    large = _streamed(10**12, 10**5)
    fits = _streamed(10**6, 10**5)
    bound = _stats(0.6)
    for facts in (small, large):
        text = remedy(bound, facts)
        assert "tf.data service" in text and "docs/data_service.md" in text
        assert "`tfr-hooks data-service dispatcher --port PORT`" in text
        assert "`tfr-hooks data-service worker --dispatcher HOST:PORT`" in text
        assert 'tfrecord.dataset(..., service="grpc://HOST:PORT")' in text
        assert "tf.data service" in verdict(bound, facts)
    assert "packed shards" in remedy(bound, small)  # still the first remedy for small records
    # fitting data is held in memory; a run that is not input-bound needs no service
    assert "tf.data service" not in remedy(bound, fits)
    assert "tf.data service" not in remedy(_stats(0.01), large)
    assert "tf.data service" not in remedy(bound, InputFacts())  # unknown size


def test_the_verdict_is_logged_once_and_when_the_class_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    report = InputReport(InputFacts())
    with caplog.at_level(logging.DEBUG, logger="tfr_hooks"):
        logged = [report.epoch_end(_stats(s, epoch=i)) for i, s in enumerate((0.5, 0.6, 0.1, 0.1))]
    assert logged == [True, False, True, False]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(r.levelno == logging.INFO for r in caplog.records)
    assert lines[0].startswith("Epoch 0: 50% of step time waiting for input (input-bound;")
    assert lines[1].startswith("Epoch 2: 10% of step time waiting for input (moderately")


def test_the_runs_first_execution_is_left_out_when_more_follow() -> None:
    now = [0.0]
    clock = EpochClock(lambda: now[0], skip_first=True)
    for end, wait in ((5.0, 4.0), (6.0, 0.5), (7.0, 0.5)):  # tracing, then two steps
        now[0] = end
        clock.step(1, 10, wait)
    assert clock.stats(0) == InputStats(0, 2, 20, 1.0, 2.0)
    alone = EpochClock(lambda: now[0], skip_first=True)
    now[0] = 9.0
    alone.step(1, 10, 1.0)
    assert alone.stats(0) == InputStats(0, 1, 10, 1.0, 2.0)  # nothing else to measure
    assert EpochClock(lambda: now[0], skip_first=False).stats(0) is None  # not measured


def test_restarting_the_data_counts_as_waiting_for_input() -> None:
    now = [10.0]
    clock = EpochClock(lambda: now[0], skip_first=False)
    now[0] = 11.0
    clock.restarted()  # a new iterator, or the initializers, took a second
    now[0] = 13.0
    clock.step(4, 40, 0.5)
    assert clock.stats(3) == InputStats(3, 4, 40, 1.5, 3.0)


def test_the_engine_puts_the_measurement_in_the_history_not_in_the_hooks_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from test_engine_lifecycle import FakeRunner

    class Waiting(FakeRunner):
        """Reports a wait of 0 for each step it runs."""

        def run_step(self, hook_args: Any, limit: int) -> Any:
            result = super().run_step(hook_args, limit)
            result.input_wait = 0.0 if result.steps else None
            return result

    class Seen(Hook):
        def begin(self) -> None:
            self.logs: list[set[str]] = []
            self.stats: list[Any] = []

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            self.logs.append(set(logs))
            self.stats.append(self.loop.input_stats)

    seen = Seen()
    loop = LoopState()
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        history = run_loop(Waiting(val=None), HookList([seen]), loop, epochs=3)
    assert set(history) == {"loss", WAIT_SHARE, EXAMPLES_PER_SEC}
    # the first epoch's steps, after the first, waited for nothing (the later epochs'
    # restarts of the data count, however short)
    assert history[WAIT_SHARE][0] == 0.0 and all(0 <= v <= 1 for v in history[WAIT_SHARE])
    assert all(rate > 0 for rate in history[EXAMPLES_PER_SEC])
    assert seen.logs == [{"loss"}] * 3  # hooks (Keras callbacks) get fit's logs
    assert [s.epoch for s in seen.stats] == [0, 1, 2]
    assert [s.steps for s in seen.stats] == [2, 3, 3]  # the run's first step left out
    assert verdicts(caplog)[0].startswith("Epoch 0: 0% of step time waiting for input (not")
    # a runner that does not measure its input adds nothing
    assert set(run_loop(FakeRunner(val=None), HookList([]), LoopState(), epochs=1)) == {"loss"}


# --- both loops, on cases whose truth is known -----------------------------------------


def _write(path: Path, n: int, width: int) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, width)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    tfrecord.write({"x": x, "y": y}, path)
    return path


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("small"), SMALL_BATCH * SMALL_BATCHES, 4)


@pytest.fixture(scope="module")
def large_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("large"), LARGE_BATCH * LARGE_BATCHES, LARGE_WIDTH)


def _sleep(x: np.ndarray) -> np.ndarray:
    time.sleep(SLEEP_SECS)
    return x


def slowed(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch map that waits: the input slowed on purpose."""
    x = tf.numpy_function(_sleep, [batch["x"]], tf.float32, stateful=True)
    return {**batch, "x": tf.ensure_shape(x, batch["x"].shape)}


def slowed_dataset(path: Path) -> tf.data.Dataset:
    """The files' batches, each one waited for in turn, then prefetched."""
    ds = tfrecord.dataset(path, SMALL_BATCH)
    return ds.map(slowed).map(lambda b: (b["x"], b["y"])).prefetch(2)


@dataclass
class InputAlone:
    """The input alone: a fresh pass's first batch (the restart), then each further batch."""

    first_secs: float
    batch_secs: float

    @classmethod
    def time(
        cls, start: Callable[[], Any], get: Callable[[], Any], limit: int | None = None
    ) -> InputAlone:
        """Time ``start`` (a new pass) and ``get`` (one batch) until the data runs out.

        With ``limit``, stop after that many batches (for endless data).
        """
        began = time.perf_counter()
        start()
        get()
        first = time.perf_counter()
        count = 1
        with contextlib.suppress(StopIteration, tf.errors.OutOfRangeError):
            while limit is None or count < limit:
                get()
                count += 1
        count -= 1  # the batches after the first
        return cls(first - began, (time.perf_counter() - first) / count)

    @classmethod
    def of_dataset(cls, ds: tf.data.Dataset) -> InputAlone:
        iterator: list[Any] = []
        return cls.time(lambda: iterator.append(iter(ds)), lambda: next(iterator[0]))


def implied_share(data: InputAlone, model_secs: float, steps: int, *, restart: bool) -> float:
    """The share of an epoch spent waiting for input, from the input and the model alone.

    Each step lasts ``model_secs`` plus its wait; the input works while the step runs,
    so a batch makes the next step wait ``max(0, batch - model)``. An epoch that restarts
    the data also waits for the restart and its first batch, which nothing overlaps.
    """
    overlap = max(0.0, data.batch_secs - model_secs)
    wait = data.first_secs + (steps - 1) * overlap if restart else steps * overlap
    return wait / (wait + steps * model_secs)


class StepTimes(Hook):
    """Notes the time of each ``after_run``."""

    def begin(self) -> None:
        self.times: list[float] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.times.append(time.perf_counter())


def function_model_secs(model: Any, ds: tf.data.Dataset, steps: int) -> float:
    """The model alone: the same loop's steps on one batch held in memory, repeated.

    Timed from the first step's end to the last's, the median of three runs.
    """
    held = tf.data.Dataset.from_tensors(next(iter(ds))).repeat()
    times = StepTimes()
    loop = FunctionLoop(held, model=model, steps_per_epoch=steps + 1, hooks=[times])
    runs = []
    for _ in range(3):
        loop.run(epochs=1)
        runs.append((times.times[-1] - times.times[0]) / steps)
    return float(np.median(runs))


def large_keras_model() -> Any:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((LARGE_WIDTH,)),
            keras.layers.Dense(LARGE_HIDDEN, activation="relu"),
            keras.layers.Dense(LARGE_HIDDEN, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def verdicts(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The verdict lines logged, after checking nothing was logged as a warning."""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    return [r.getMessage() for r in caplog.records if r.name == "tfr_hooks.input_report"]


def reported(history: dict[str, list[float]], implied: float, epochs: int) -> float:
    """The last epoch's reported share, checked against the implied one."""
    assert len(history[WAIT_SHARE]) == len(history[EXAMPLES_PER_SEC]) == epochs
    assert all(0.0 <= s <= 1.0 for s in history[WAIT_SHARE])
    share = history[WAIT_SHARE][-1]
    assert abs(share - implied) <= TOLERANCE, f"reported {share:.3f}, implied {implied:.3f}"
    return share


@pytest.mark.slow  # trains on a slowed input; about 2 s of CPU
def test_function_loop_reads_a_slowed_input_as_input_bound(
    small_data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # streamed from the files, restarted every epoch
    ds = slowed_dataset(small_data)
    model = keras_classifier()
    board = TensorBoardLogger(tmp_path / "tb")
    loop = FunctionLoop(ds, model=model, hooks=[board])
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        history = loop.run(epochs=2)
    data = InputAlone.of_dataset(ds)
    model_secs = function_model_secs(model, ds, steps=20)
    share = reported(
        history, implied_share(data, model_secs, SMALL_BATCHES, restart=True), epochs=2
    )
    assert classify(share) == INPUT_BOUND == loop.loop.input_stats.bound  # type: ignore[union-attr]
    # held back by its input, the loop runs at the input's rate
    input_pass = data.first_secs + (SMALL_BATCHES - 1) * data.batch_secs
    rate = SMALL_BATCH * SMALL_BATCHES / input_pass
    assert history[EXAMPLES_PER_SEC][-1] == pytest.approx(rate, rel=0.5)
    lines = verdicts(caplog)
    # the loop finds the reader's facts behind the user's map: the remedy names its kind
    assert len(lines) == 1 and "(input-bound;" in lines[0]
    assert "read it with in_memory=True (or 'auto')" in lines[0]
    # TensorBoard's own loader finds the history's values in their own group, `input/`
    for key in HISTORY_KEYS:
        written = scalars(tmp_path / "tb" / "train", key)
        assert [step for step, _ in written] == [0, 1]
        assert [v for _, v in written] == pytest.approx(history[key], rel=1e-6)


@pytest.mark.slow  # trains a large model; about 3 s of CPU
def test_function_loop_reads_a_large_model_on_memory_data_as_not_input_bound(
    large_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # held in memory, one endless pass: epochs of LARGE_STEPS steps, no restart
    ds = tfrecord.dataset(
        large_data, LARGE_BATCH, in_memory=True, num_epochs=None, as_tuple=("x", "y")
    )
    model = large_keras_model()
    loop = FunctionLoop(ds, model=model, steps_per_epoch=LARGE_STEPS)
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        history = loop.run(epochs=2)
    data = InputAlone.of_dataset(ds.take(LARGE_BATCHES * 2))
    model_secs = function_model_secs(model, ds, steps=6)
    share = reported(history, implied_share(data, model_secs, LARGE_STEPS, restart=False), epochs=2)
    assert classify(share) == NOT_INPUT_BOUND
    lines = verdicts(caplog)
    assert len(lines) == 1 and "(not input-bound;" in lines[0]
    assert "The model is the bottleneck" in lines[0]


class GraphModel:
    """A graph-mode model on ``read_batches``, and the same step on a batch held in memory."""

    def __init__(self, batches: Any, widths: tuple[int, ...]) -> None:
        x, y = batches.tensors
        self.batches = batches
        self.session = v1.Session()
        optimizer = v1.train.GradientDescentOptimizer(0.01)
        with v1.variable_scope("model", reuse=v1.AUTO_REUSE):
            self.loss = self._loss(x, y, widths)
            self.train_op = optimizer.minimize(self.loss)
            self.session.run(batches.initializers)
            held = self.session.run(batches.tensors)  # one batch, as a constant
            const_loss = self._loss(tf.constant(held[0]), tf.constant(held[1]), widths)
            self.const_train_op = optimizer.minimize(const_loss)

    @staticmethod
    def _loss(x: Any, y: Any, widths: tuple[int, ...]) -> Any:
        hidden = x
        for i, width in enumerate(widths):
            w = v1.get_variable(f"w{i}", (hidden.shape[-1], width))
            hidden = tf.matmul(hidden, w)
            hidden = tf.nn.relu(hidden) if i < len(widths) - 1 else hidden
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, hidden))

    def run(self, epochs: int, **kwargs: Any) -> tuple[SessionLoop, dict[str, list[float]]]:
        loop = SessionLoop(self.train_op, {"loss": self.loss}, data=self.batches, **kwargs)
        return loop, loop.run(epochs=epochs, session=self.session)

    def input_alone(self) -> InputAlone:
        """The input alone: the initializers, then batches until the data runs out."""
        return InputAlone.time(
            lambda: self.session.run(self.batches.initializers),
            lambda: self.session.run(self.batches.tensors),
        )

    def model_secs(self, steps: int) -> float:
        """The model alone: its train op on a batch held in the graph."""
        self.session.run(self.const_train_op)  # the first run prunes the graph
        began = time.perf_counter()
        for _ in range(steps):
            self.session.run(self.const_train_op)
        return (time.perf_counter() - began) / steps


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
def test_session_loop_reads_a_slowed_input_as_input_bound(
    graph: tf.Graph, small_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = tfrecord.read_batches(
        small_data, SMALL_BATCH, batch_map_fn=slowed, as_tuple=("x", "y")
    )
    model = GraphModel(batches, (8, 2))
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        loop, history = model.run(epochs=2)
    implied = implied_share(model.input_alone(), model.model_secs(30), SMALL_BATCHES, restart=True)
    share = reported(history, implied, epochs=2)
    assert classify(share) == INPUT_BOUND == loop.loop.input_stats.bound  # type: ignore[union-attr]
    lines = verdicts(caplog)
    assert len(lines) == 1 and "(input-bound;" in lines[0]
    assert "fits the memory budget" in lines[0] and "in_memory=True" in lines[0]


@pytest.mark.slow  # trains a large model; about 2 s of CPU
def test_session_loop_reads_a_large_model_on_memory_data_as_not_input_bound(
    graph: tf.Graph, large_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = tfrecord.read_batches(
        large_data, LARGE_BATCH, in_memory=True, num_epochs=None, as_tuple=("x", "y")
    )
    model = GraphModel(batches, (LARGE_HIDDEN, LARGE_HIDDEN, 2))
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        _, history = model.run(epochs=2, steps_per_epoch=LARGE_STEPS)
    data = InputAlone.time(
        lambda: model.session.run(batches.initializers),
        lambda: model.session.run(batches.tensors),
        limit=LARGE_BATCHES * 2,
    )
    model_secs = model.model_secs(LARGE_STEPS)
    share = reported(history, implied_share(data, model_secs, LARGE_STEPS, restart=False), epochs=2)
    assert classify(share) == NOT_INPUT_BOUND
    lines = verdicts(caplog)
    assert len(lines) == 1 and "(not input-bound;" in lines[0]
    assert "The model is the bottleneck" in lines[0]


# --- beside Keras' own TensorBoard callback ---------------------------------------------


def tensorboard_runs(log_dir: Path) -> dict[str, set[str]]:
    """What ``tensorboard --logdir log_dir`` loads: each run's scalar tags."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    board = EventMultiplexer().AddRunsFromDirectory(str(log_dir))
    board.Reload()
    return {run: set(tags["scalars"]) | set(tags["tensors"]) for run, tags in board.Runs().items()}


def assert_input_run(log_dir: Path, history: dict[str, list[float]], epochs: int) -> None:
    """The history's input values, epoch by epoch, in a run ``input`` of ``log_dir``."""
    for key in HISTORY_KEYS:
        written = scalars(log_dir / "input", key)
        assert [step for step, _ in written] == list(range(epochs))
        assert [v for _, v in written] == pytest.approx(history[key], rel=1e-6)


@pytest.mark.slow  # trains with TensorBoard (the session-loop case stays fast)
def test_keras_tensorboard_callback_gets_the_input_scalars_in_function_loop(
    small_data: Path, tmp_path: Path
) -> None:
    ds = tfrecord.dataset(small_data, SMALL_BATCH, as_tuple=("x", "y"))
    model = keras_classifier()
    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    loop = FunctionLoop(ds, model=model, hooks=[KerasCallbacks([board], model)])
    history = loop.run(epochs=2)
    runs = tensorboard_runs(tmp_path / "tb")
    # beside the callback's own runs, in a run of their own, in the `input` tag group
    assert {"train", "input"} <= set(runs) and "epoch_loss" in runs["train"]
    assert runs["input"] == set(HISTORY_KEYS)
    assert_input_run(tmp_path / "tb", history, epochs=2)


def test_keras_tensorboard_callback_gets_the_input_scalars_in_session_loop(
    graph: tf.Graph, tmp_path: Path
) -> None:
    import tf_keras

    ours = TensorFed()
    board = tf_keras.callbacks.TensorBoard(str(tmp_path), profile_batch=0, write_graph=False)
    history = ours.run([board], 3)  # through KerasTrainingGraph.keras_callbacks
    runs = tensorboard_runs(tmp_path)
    # the v1 callback writes one run, the log_dir itself; the input run sits in it
    assert "epoch_loss" in runs["."] and runs["input"] == set(HISTORY_KEYS)
    assert_input_run(tmp_path, history, epochs=3)


# --- measure_input=False: nothing measured, nothing reported ------------------------------


def test_function_loop_without_measure_input_reports_nothing(
    small_data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = tfrecord.dataset(small_data, SMALL_BATCH, as_tuple=("x", "y"))
    model = keras_classifier()
    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    hooks = [KerasCallbacks([board], model), TensorBoardLogger(tmp_path / "ours")]
    loop = FunctionLoop(ds, model=model, hooks=hooks, measure_input=False)
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        history = loop.run(epochs=2)
    assert set(history) == {"loss", "accuracy", STEPS_KEY} and loop.loop.input_stats is None
    assert not [r for r in caplog.records if r.name == "tfr_hooks.input_report"]  # no verdict
    assert "input" not in tensorboard_runs(tmp_path / "tb")
    assert not set(HISTORY_KEYS) & tensorboard_runs(tmp_path / "ours")["train"]


def test_session_loop_without_measure_input_reports_nothing(
    graph: tf.Graph, small_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = tfrecord.read_batches(small_data, SMALL_BATCH, as_tuple=("x", "y"))
    model = GraphModel(batches, (8, 2))
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        loop, history = model.run(epochs=2, measure_input=False)
    assert set(history) == {"loss"} and loop.loop.input_stats is None
    assert not [r for r in caplog.records if r.name == "tfr_hooks.input_report"]  # no verdict
    assert not [op for op in graph.get_operations() if op.type == "Timestamp"]


@pytest.mark.parametrize("make", ["function", "session"])
def test_measure_input_must_be_a_bool(make: str, small_data: Path) -> None:
    wording = r"Expected `measure_input` to be a bool. Received: measure_input="
    with pytest.raises(TypeError, match=wording):
        if make == "function":
            ds = tfrecord.dataset(small_data, SMALL_BATCH, as_tuple=("x", "y"))
            FunctionLoop(ds, model=keras_classifier(), measure_input="no")  # type: ignore[arg-type]
        else:
            with tf.Graph().as_default():
                batches = tfrecord.read_batches(small_data, SMALL_BATCH, as_tuple=("x", "y"))
                GraphModel(batches, (2,)).run(epochs=1, measure_input=1)


@pytest.mark.parametrize("in_memory", [False, True], ids=["streamed", "in-memory"])
def test_both_loops_report_the_same_input_facts_for_the_same_files(
    tmp_path: Path, in_memory: bool
) -> None:
    """The input contract: the reader's facts reach both loops' input report alike."""
    rng = np.random.default_rng(0)
    tfrecord.write(
        {"x": rng.normal(size=(300, 8)).astype(np.float32), "y": np.arange(300)},
        tmp_path,
        shards=3,
    )
    files = str(tmp_path)
    source = tfrecord.source(files, 32, in_memory=in_memory)
    function_loop = FunctionLoop(
        source, step_fn=lambda b: {"m": tf.reduce_mean(b["x"])}, steps_per_execution=4
    )
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(files, 32, in_memory=in_memory)
        session_loop = SessionLoop(tf.reduce_mean(batches.tensors["x"]), data=batches)
        session_facts = session_loop._input_facts()
    function_facts = function_loop._input_facts()
    assert function_facts.kind is session_facts.kind is source.facts.kind
    # the memory budget is measured from the memory available at each call (it moves
    # with the machine's other processes): equal facts besides it, both budgets set
    assert function_facts.measured.memory_budget and session_facts.measured.memory_budget
    assert dataclasses.replace(function_facts.measured, memory_budget=None) == (
        dataclasses.replace(session_facts.measured, memory_budget=None)
    )
    assert function_facts.measured.decoded_nbytes > 0
    assert function_facts.measured.record_nbytes > 0
    assert function_facts.read == source.facts
    assert session_facts.kind.in_memory is in_memory
    assert function_facts.steps_per_execution == 4  # the one fact that is the loop's own
    # tfrecord.dataset behind the user's map: its reader's facts, found by the loop
    mapped = FunctionLoop(
        tfrecord.dataset(files, 32, in_memory=in_memory).map(lambda b: b),
        step_fn=lambda b: {"m": tf.reduce_mean(b["x"])},
    )
    assert mapped._input_facts().kind is source.facts.kind
    assert mapped._input_facts().read.files == source.facts.files
    # a dataset the readers did not build says nothing of its files
    plain = FunctionLoop(
        tf.data.Dataset.from_tensors({"x": tf.zeros([2, 8])}),
        step_fn=lambda b: {"m": tf.reduce_mean(b["x"])},
    )
    assert plain._input_facts().kind is None
