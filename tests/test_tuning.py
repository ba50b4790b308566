"""``steps_per_execution="auto"`` (tfr_hooks.tuning): the rule, and FunctionLoop tuned by it."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _scripted import FAST, Scripted, linear, scripted_timing
from conftest import write_records
from helpers import keras_regressor
from tfr_hooks import FunctionLoop, KerasCallbacks, tfrecord
from tfr_hooks.tuning import (
    CALL_SECS,
    HISTORY_KEY,
    OVERHEAD_SHARE,
    SAMPLES,
    AutoSteps,
    Phase,
    StepsTuner,
    choose,
    fit,
)

# -- the rule, on durations of a model call t(k) = o + k * s ------------------------------


def settle(
    tuner: StepsTuner, overhead: float, step: float, calls: int, noise: float = 0.0
) -> list[int]:
    """Feed ``tuner`` ``calls`` calls of the model, with relative noise; the values used."""
    rng = random.Random(0)
    values = []
    for _ in range(calls):
        k = tuner.value
        values.append(k)
        secs = (overhead + k * step) * (1 + rng.uniform(-noise, noise))
        tuner.observe(k, k, secs)
    return values


def test_the_rule_meets_the_overhead_share_within_the_call_bound() -> None:
    assert choose(0.0025, 0.0038) == 128  # the digits MLP: 2.5 ms a call, 3.8 ms a step
    assert choose(0.001, 0.00001) == 1024  # a free step: up to the maximum
    assert choose(0.0005, 0.05) == 1  # a 50 ms step: the overhead is already small
    assert choose(0.001, 0.05) == 2
    assert choose(0.05, 0.01) == 32  # a slow hook: 64 would make a call too long
    assert choose(0.01, 2.0) == 1
    for overhead, step in [(0.0025, 0.0038), (0.0003, 0.0001), (0.002, 0.02)]:
        k = choose(overhead, step)
        assert overhead <= OVERHEAD_SHARE * k * step or overhead + 2 * k * step > CALL_SECS
        assert k == 1 or overhead > OVERHEAD_SHARE * (k // 2) * step  # the smallest such


def test_fit_recovers_overhead_and_step_time() -> None:
    o, s = fit({k: 0.002 + k * 0.001 for k in (1, 2, 8)}) or (0, 0)
    assert o == pytest.approx(0.002) and s == pytest.approx(0.001)
    assert fit({4: 1.0}) is None


@pytest.mark.parametrize(("overhead", "step"), [(0.0025, 0.002), (0.0005, 0.00002), (0.05, 0.01)])
def test_it_settles_at_the_rule_and_stays_there_under_noise(overhead: float, step: float) -> None:
    tuner = StepsTuner()
    values = settle(tuner, overhead, step, 2000, noise=0.3)
    target = choose(overhead, step)
    first = values.index(target)
    assert tuner.settled and tuner.value == target
    assert set(values[first:]) == {target}  # no oscillation once there
    # within the first second of training, a few hundred steps of a normal step
    assert sum(overhead + k * step for k in values[:first]) < 2.0
    assert sum(values[:first]) < 500 or step < 0.0001
    assert max(values) <= max(target, 2)  # no overshoot past the bound


def test_an_expensive_step_stays_at_one() -> None:
    tuner = StepsTuner()
    values = settle(tuner, 0.0005, 0.3, 50)
    assert tuner.value == 1 and max(values) == 1  # 2 steps would take 0.6 s


def test_it_follows_a_step_whose_cost_changes() -> None:
    tuner = StepsTuner()
    settle(tuner, 0.002, 0.0005, 300)
    assert tuner.value == choose(0.002, 0.0005) == 512
    settle(tuner, 0.002, 0.02, 30)  # 40x slower: 512 steps would take 10 s
    assert tuner.value == choose(0.002, 0.02) == 16
    settle(tuner, 0.002, 0.0005, 30)  # and back
    assert tuner.value == 512


def test_slow_first_calls_do_not_hold_it_at_one_for_the_run() -> None:
    tuner = StepsTuner()
    settle(tuner, 0.002, 0.4, 6)  # a loaded machine at the start: 0.4 s a step
    assert tuner.value == 1 and tuner.settled
    settle(tuner, 0.002, 0.0005, 300)  # then the step's own cost
    assert tuner.value == choose(0.002, 0.0005)


def paused_at_two(tuner: StepsTuner, pauses: int, calls: int = 2000) -> list[int]:
    """Calls of 1 ms overhead and 10 us steps; the first ``pauses`` calls of 2 take 3 ms."""
    values = []
    for _ in range(calls):
        k = tuner.value
        values.append(k)
        paused = k == 2 and pauses > 0
        pauses -= paused
        tuner.observe(k, k, 0.003 if paused else 0.001 + k * 0.00001)
    return values


def test_a_pause_while_timing_two_steps_a_call_does_not_hold_it_at_one() -> None:
    # 2 steps a call timed at 3 ms against 1 ms for 1: more a step, which the model of
    # t(k) = o + k * s cannot give (the fit reads no overhead, and would settle at 1)
    tuner = StepsTuner()
    values = paused_at_two(tuner, pauses=3)
    assert values[-1] == choose(0.001, 0.00001) == 1024
    assert tuner.settled


def test_calls_that_keep_costing_more_a_step_settle_on_the_cheapest_a_step() -> None:
    # 2 steps a call always cost more a step than 1 (as a loaded machine makes longer
    # calls): timed again twice, then the value whose calls cost least a step, and still
    tuner = StepsTuner()
    values = paused_at_two(tuner, pauses=10**6)
    assert values[:13] == [1] * 4 + [2] * 9  # the first call (tracing) is not timed
    assert values[13:] == [1] * (len(values) - 13) and tuner.settled


def test_a_loaded_machine_settles_on_the_value_whose_calls_cost_least_a_step() -> None:
    # calls measured under load (ms): a step costs more the longer the call, so the fit
    # of t(k) = o + k * s finds no overhead; the fastest value timed wins, not 1
    def loaded(k: int) -> float:  # 1 ms a call, 0.3 ms a step, and more for long calls
        return (1.0 + 0.3 * k + 0.004 * k * k) / 1000

    tuner = StepsTuner()
    values = []
    for _ in range(400):
        values.append(tuner.value)
        tuner.observe(tuner.value, tuner.value, loaded(tuner.value))
    cheapest = min(set(values), key=lambda k: loaded(k) / k)
    assert tuner.settled and values[-200:] == [cheapest] * 200
    assert cheapest == 8  # of the values timed (1, 2, 8, 32); 16 was not timed
    for _ in range(400):  # the load is gone: calls of 8 are fast, and it climbs again
        tuner.observe(tuner.value, tuner.value, (1.0 + 0.003 * tuner.value) / 1000)
    assert tuner.settled and tuner.value == choose(0.001, 0.000003) == 1024


def test_a_single_call_far_too_long_brings_the_value_down_at_once() -> None:
    tuner = StepsTuner()
    settle(tuner, 0.002, 0.0005, 300)
    tuner.observe(512, 512, 512 * 0.02)  # one call of 10 s
    assert tuner.value * 0.02 <= CALL_SECS
    settle(tuner, 0.002, 0.0005, 30)  # a pause, not a new cost: back up
    assert tuner.value == 512


def test_a_step_made_dearer_while_it_climbs_is_followed_from_its_own_calls() -> None:
    # seen in CI: the step became 20x dearer while the value still climbed; the calls
    # timed before (1 ms a step) then brought back a value whose calls broke the bound
    tuner = StepsTuner()
    settle(tuner, 0.001, 0.0011, 13)
    assert tuner.value == 128 and not tuner.settled
    values = settle(tuner, 0.001, 0.02, 100)  # the first call of 128 takes 2.6 s
    assert all(0.001 + k * 0.02 <= CALL_SECS for k in values[1:])
    assert tuner.settled and values[-50:] == [choose(0.001, 0.02)] * 50


def test_a_pause_before_any_overhead_is_fitted_does_not_hold_it_low() -> None:
    tuner = StepsTuner()
    settle(tuner, 0.001, 0.0003, 4)  # the first call (not timed), then 3 at 1: try 2
    assert tuner.value == 2 and tuner.model is None
    tuner.observe(2, 2, 5.0)  # a pause of 5 s
    assert tuner.value == 1
    settle(tuner, 0.001, 0.0003, 300)
    assert tuner.settled and tuner.value == choose(0.001, 0.0003) == 512


def test_calls_cut_short_and_the_first_call_of_a_run_do_not_move_it() -> None:
    tuner = StepsTuner()
    tuner.observe(1, 1, 30.0)  # the first call traces
    assert tuner.value == 1 and not tuner._times
    settle(tuner, 0.002, 0.0005, 300)
    assert tuner.value == 512
    for _ in range(10):  # each epoch's last call is cut short
        tuner.observe(512, 512, 0.002 + 512 * 0.0005)
        tuner.observe(3, 3, 0.002 + 3 * 0.0005)
    assert tuner.value == 512
    tuner.restart()
    tuner.observe(512, 512, 30.0)  # a new run's first call
    assert tuner.value == 512


def test_a_hook_that_needs_every_step_holds_it(caplog: pytest.LogCaptureFixture) -> None:
    class EveryStep(tfr_hooks.Hook):
        needs_every_step = True

    auto = AutoSteps([tfr_hooks.Hook(), EveryStep()])
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tuning"):
        auto.start_run()
        auto.start_run()
    assert not auto.tuned
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("steps_per_execution='auto' stays at 1: hooks[1]=<")
    assert "EveryStep object" in message and message.endswith("needs every step.")
    for _ in range(20):
        assert auto.observe(auto.train, 1, 1, 0.001) == 1


def test_only_callbacks_with_their_own_batch_methods_need_every_step(tmp_path: Any) -> None:
    class Counter(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    class Quiet(keras.callbacks.EarlyStopping):
        pass

    model = keras_regressor()
    stock = [
        keras.callbacks.EarlyStopping(),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "m.weights.h5"), save_weights_only=True),
        keras.callbacks.TensorBoard(str(tmp_path / "tb")),
        keras.callbacks.TerminateOnNaN(),
        Quiet(),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda *a: None),
    ]
    assert not KerasCallbacks(stock, model, verbose=1).needs_every_step  # + ProgbarLogger
    lam = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *a: None)
    for own, name in [(Counter(), "Counter"), (lam, "LambdaCallback")]:
        hook = KerasCallbacks([*stock, own], model)
        assert hook.needs_every_step
        assert hook.per_batch == (f"{name}.on_train_batch_end",)
        assert f"per batch: {name}.on_train_batch_end" in repr(hook)


def test_a_plain_session_run_hook_with_its_own_before_run_needs_every_step() -> None:
    class Counts(tf.compat.v1.train.SessionRunHook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            pass

    capabilities = tfr_hooks.hooks.capabilities_of
    assert capabilities(Counts()).needs_every_step
    assert not capabilities(tf.compat.v1.train.SessionRunHook()).needs_every_step
    assert not capabilities(tfr_hooks.StopOnSignal()).needs_every_step


class CountsSteps(tfr_hooks.Hook):
    """Counts its ``after_run`` calls as steps, without declaring anything (a user's hook)."""

    def begin(self) -> None:
        self.steps = 0

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1


class CountsCallSteps(tfr_hooks.Hook):
    """Counts ``loop.call_steps`` per call, and says it takes calls of many steps."""

    needs_every_step = False

    def begin(self) -> None:
        self.calls: list[int] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.calls.append(self.loop.call_steps)


class EpochsOnly(tfr_hooks.Hook):
    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        pass


def test_a_hook_with_its_own_before_run_or_after_run_needs_every_step_unless_it_says_not(
    tmp_path: Any,
) -> None:
    class Before(tfr_hooks.Hook):
        def before_run(self, run_context: Any) -> None:
            return None

    class Declared(tfr_hooks.Hook):
        needs_every_step = True

    capabilities = tfr_hooks.hooks.capabilities_of
    assert capabilities(CountsSteps()).needs_every_step
    assert capabilities(Before()).needs_every_step
    assert capabilities(Declared()).needs_every_step
    assert not capabilities(CountsCallSteps()).needs_every_step
    assert not capabilities(EpochsOnly()).needs_every_step
    assert not capabilities(tfr_hooks.Hook()).needs_every_step
    # the package's own hooks with a before_run/after_run work per call
    assert not capabilities(tfr_hooks.TensorBoardLogger(tmp_path)).needs_every_step
    saves = tfr_hooks.PreemptionCheckpoint(tmp_path, objects={"v": tf.Variable(1.0)})
    assert not capabilities(saves).needs_every_step


@pytest.mark.slow  # trains with a Keras model and a counting hook; about 2 s of CPU
def test_auto_is_the_default_and_a_hook_that_counts_calls_as_steps_holds_it(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_timing(monkeypatch)  # cheap calls on any machine: only the hook can hold it
    data = tf.data.Dataset.range(600).batch(2)  # 300 cheap steps an epoch
    step = lambda b: {"x": tf.reduce_mean(tf.cast(b, tf.float32))}  # noqa: E731
    tuned = FunctionLoop(data, step_fn=step, hooks=[EpochsOnly()])
    assert tuned.steps_per_execution == "auto" and tuned.tuning is not None
    assert max(tuned.run(epochs=2)[HISTORY_KEY]) > 1
    counts = CountsSteps()
    held = FunctionLoop(data, step_fn=step, hooks=[counts])
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tuning"):
        history = held.run(epochs=2)
    assert history[HISTORY_KEY] == [1.0, 1.0]
    assert counts.steps == 600  # one after_run a step, as before "auto" was the default
    # the input report's remedy is told which hook holds it
    assert "CountsSteps object" in str(held._input_facts().steps_held_by)
    assert tuned._input_facts().steps_held_by is None
    (message,) = [r.getMessage() for r in caplog.records if "stays at 1" in r.getMessage()]
    assert "CountsSteps object" in message and message.endswith("needs every step.")


def test_call_steps_tells_a_hook_how_many_steps_each_call_ran() -> None:
    counts = CountsCallSteps()
    loop = FunctionLoop(
        tf.data.Dataset.range(20).batch(2),  # 10 steps an epoch
        step_fn=lambda b: {"x": tf.reduce_mean(tf.cast(b, tf.float32))},
        hooks=[counts],
        steps_per_execution=4,
    )
    loop.run(epochs=1)
    assert counts.calls == [4, 4, 2]


def test_steps_per_execution_is_a_positive_int_or_auto() -> None:
    data = tf.data.Dataset.range(4).batch(2)
    step = lambda b: {"x": tf.reduce_sum(b)}  # noqa: E731
    for bad in ("fast", 0, 2.0, True):
        with pytest.raises(ValueError, match=r"positive integer or 'auto'.*Received: steps_per"):
            FunctionLoop(data, step_fn=step, steps_per_execution=bad)


# -- the state machine as a table: call durations in, values and phases out -------------
# No TensorFlow: each row feeds a fresh StepsTuner segments of calls and checks, after
# each segment, the value the next call gets and the phase. The CI flakes of the round
# that made the tuner a state machine are rows of their own, named by their commit.


def loaded(k: int) -> float:
    """A loaded machine: 1 ms a call, 0.3 ms a step, and more a step for longer calls."""
    return (1.0 + 0.3 * k + 0.004 * k * k) / 1000


def paused_at(value: int, secs: float, base: Callable[[int], float]) -> Callable[[int], float]:
    """``base``, except that every call of ``value`` steps takes ``secs`` (a pause)."""
    return lambda k: secs if k == value else base(k)


@dataclass(frozen=True)
class Calls:
    """``count`` calls, each of the tuner's value (cut to ``limit``), costing ``cost(k)``."""

    count: int
    cost: Callable[[int], float]
    limit: int | None = None
    #: every call after the segment's first lasts at most CALL_SECS
    within_bound: bool = False


@dataclass(frozen=True)
class Once:
    """One call of the tuner's value lasting ``secs`` (a pause, a trace)."""

    secs: float


@dataclass(frozen=True)
class Restart:
    """A new run of the loop (its first call is not timed)."""


Segment = Calls | Once | Restart
#: (why, [(segment, the value after it, the phase after it), ...])
Row = tuple[str, Sequence[tuple[Segment, int, Phase]]]

ROWS: list[Row] = [
    ("the rule, reached and kept", [(Calls(300, FAST), choose(0.002, 0.0005), Phase.FITTED)]),
    ("a step slower than the bound runs alone", [(Calls(50, linear(0.0005, 0.3)), 1, Phase.HELD)]),
    (
        "6793e67: slow first calls (a loaded start) held it at 1 for the run",
        [
            (Calls(6, linear(0.002, 0.4)), 1, Phase.HELD),
            (Calls(300, FAST), 512, Phase.FITTED),
        ],
    ),
    (
        "dadd073: one far-too-slow call kept it low for the run",
        [
            (Calls(300, FAST), 512, Phase.FITTED),
            (Once(512 * 0.02), choose(0.002, 0.02), Phase.FITTED),
            (Calls(30, FAST), 512, Phase.FITTED),
        ],
    ),
    (
        "34b46ab: a far-too-long call keeps the fitted overhead: back up within SAMPLES calls",
        [
            (Calls(300, FAST), 512, Phase.FITTED),
            (Once(10.0), choose(0.002, 10.0 / 512), Phase.FITTED),
            (Calls(SAMPLES, FAST), 512, Phase.FITTED),
        ],
    ),
    (
        "34b46ab: a pause with no overhead fitted climbs afresh from the bound, not held at 1",
        [
            (Calls(4, linear(0.001, 0.0003)), 2, Phase.CLIMBING),
            (Once(5.0), 1, Phase.CLIMBING),
            (Calls(300, linear(0.001, 0.0003)), choose(0.001, 0.0003), Phase.FITTED),
        ],
    ),
    (
        "c4e2433: a step made 20x dearer mid-climb; no value breaks the bound after",
        [
            (Calls(13, linear(0.001, 0.0011)), 128, Phase.CLIMBING),
            (Calls(100, linear(0.001, 0.02), within_bound=True), choose(0.001, 0.02), Phase.FITTED),
        ],
    ),
    (
        "d7d07b7: a pause while timing 2 steps a call (it fitted no overhead: settled at 1)",
        [
            (Calls(4, linear(0.001, 0.00001)), 2, Phase.CLIMBING),
            (Calls(3, paused_at(2, 0.003, linear(0.001, 0.00001))), 2, Phase.CLIMBING),
            (Calls(2000, linear(0.001, 0.00001)), choose(0.001, 0.00001), Phase.FITTED),
        ],
    ),
    (
        "d7d07b7: calls of 2 that always cost more a step: timed again twice, then 1",
        [(Calls(2000, paused_at(2, 0.003, linear(0.001, 0.00001))), 1, Phase.CHEAPEST)],
    ),
    (
        "d7d07b7: a loaded machine settles on the value timed that costs least a step",
        [
            (Calls(400, loaded), 8, Phase.CHEAPEST),  # of 1, 2, 8, 32 timed
            (Calls(400, linear(0.001, 0.000003)), choose(0.001, 0.000003), Phase.FITTED),
        ],
    ),
    (
        "an epoch of 20 steps caps it at 20",
        [(Calls(100, linear(0.001, 0.00001), limit=20), 20, Phase.FITTED)],
    ),
    (
        "a new run's first call (tracing) is not timed",
        [
            (Calls(300, FAST), 512, Phase.FITTED),
            (Restart(), 512, Phase.FITTED),
            (Once(30.0), 512, Phase.FITTED),
        ],
    ),
]


def feed(tuner: StepsTuner, segment: Segment) -> list[float]:
    """Feed ``segment`` to ``tuner``; the durations of its calls."""
    if isinstance(segment, Restart):
        tuner.restart()
        return []
    if isinstance(segment, Once):
        tuner.observe(tuner.value, tuner.value, segment.secs)
        return [segment.secs]
    durations = []
    for _ in range(segment.count):
        limit = min(tuner.value, segment.limit or tuner.value)
        durations.append(segment.cost(limit))
        tuner.observe(limit, limit, durations[-1])
    return durations


@pytest.mark.parametrize("row", ROWS, ids=[why for why, _ in ROWS])
def test_the_tuner_as_a_table_of_calls_values_and_phases(row: Row) -> None:
    _, segments = row
    tuner = StepsTuner()
    for i, (segment, value, phase) in enumerate(segments):
        durations = feed(tuner, segment)
        assert (tuner.value, tuner.phase) == (value, phase), f"after segment {i}: {segment}"
        if isinstance(segment, Calls):
            # settled: more calls of the same cost leave the value where it is; climbing:
            # they move it or settle it (on a copy, so that the row goes on from here)
            more, states = copy.deepcopy(tuner), []
            for _ in range(200):
                feed(more, dataclasses.replace(segment, count=1))
                states.append((more.value, more.phase))
            if tuner.settled:
                assert {v for v, _ in states} == {value}, f"settled after segment {i}: {states}"
            else:
                assert set(states) != {(value, phase)}, f"still climbing after segment {i}"
        if isinstance(segment, Calls) and segment.within_bound:
            assert max(durations[1:]) <= CALL_SECS


# -- FunctionLoop with auto -------------------------------------------------------------


def test_an_epoch_shorter_than_the_value_caps_it() -> None:
    tuner = StepsTuner()
    for _ in range(40):  # epochs of 20 steps: the loop cuts the calls at their end
        done = 0
        while done < 20:
            limit = min(tuner.value, 20 - done)
            tuner.observe(limit, limit, 0.001 + limit * 0.00001)
            done += limit
    assert tuner.value == 20


def test_a_per_batch_keras_callback_keeps_it_at_one_and_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Counter(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.batches: list[int] = []

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.batches.append(batch)

    x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2)
    model = keras_regressor()
    counter = Counter()
    loop = FunctionLoop(
        data,
        model=model,
        hooks=[KerasCallbacks([counter, keras.callbacks.EarlyStopping()], model)],
        steps_per_execution="auto",
    )
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tuning"):
        history = loop.run(epochs=2)
        loop.run(epochs=1)
    assert history[HISTORY_KEY] == [1.0, 1.0]
    assert counter.batches == list(range(32))  # every batch, the last run's epoch
    held = [r.getMessage() for r in caplog.records if "stays at 1" in r.getMessage()]
    assert held == [
        "steps_per_execution='auto' stays at 1: hooks[0]=KerasCallbacks([Counter, "
        "EarlyStopping, History], per batch: Counter.on_train_batch_end) needs every step."
    ]


# -- exact resume ---------------------------------------------------------------------------


def recording_step(seen: tf.Variable, count: tf.Variable) -> Any:
    """A step that writes the first element of each batch it trains on to ``seen``."""

    def step(batch: Any) -> dict[str, Any]:
        seen.scatter_nd_update([[count.read_value()]], [batch[0]])
        count.assign_add(1)
        return {"x": tf.cast(batch[0], tf.float32)}

    return step


class StopAt(tfr_hooks.Hook):
    """Stops at the first call boundary past ``step``; keeps the steps each call ran."""

    needs_every_step = False

    def __init__(self, step: int) -> None:
        self.step = step
        self.calls: list[int] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.calls.append(self.loop.call_steps)
        if self.loop.global_step >= self.step:
            self.loop.request_stop("a test")


def scripted(loop: FunctionLoop, cost: Callable[[int], float]) -> Scripted:
    """Give ``loop``'s training calls the durations ``cost`` says; the tuner."""
    assert loop.tuning is not None
    loop.tuning.train = Scripted(cost)
    return loop.tuning.train


class ResumeAt(tfr_hooks.Hook):
    """Sets ``loop.initial_step`` as a checkpoint hook restoring a mid-epoch position does."""

    def __init__(self, step: int) -> None:
        self.step = step

    def begin(self) -> None:
        self.loop.initial_step = self.step


def trained(hooks: list[Any], epochs: int, initial_epoch: int = 0) -> tuple[list[int], Any]:
    """The batches (by first element) a fresh loop trains on, and the loop's state."""
    seen = tf.Variable(tf.fill([8192], tf.constant(-1, tf.int64)))
    count = tf.Variable(0, dtype=tf.int32)
    # 2,000 steps an epoch: more than MAX_STEPS, so that a call of the largest value the
    # rule may reach on a quiet machine still ends inside the epoch it starts in
    data = tf.data.Dataset.range(4000).shuffle(4000, seed=7).batch(2)
    loop = FunctionLoop(
        data, step_fn=recording_step(seen, count), hooks=hooks, steps_per_execution="auto"
    )
    scripted(loop, FAST)  # calls of up to 512 steps, whatever the machine's load
    loop.run(epochs=epochs, initial_epoch=initial_epoch)
    return [int(v) for v in seen.numpy()[: int(count.numpy())]], loop.loop


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
def test_a_run_resumed_mid_epoch_with_auto_trains_the_batches_of_an_uninterrupted_one() -> None:
    whole, _ = trained([], epochs=2)
    assert len(whole) == 4000
    stop = StopAt(2100)
    before, state = trained([stop], epochs=2)
    assert state.epoch == 1 and 0 < state.epoch_steps < 2000  # stopped inside epoch 1
    assert max(stop.calls) == 512  # with calls of many steps
    after, _ = trained([ResumeAt(state.epoch_steps)], epochs=2, initial_epoch=1)
    assert before + after == whole


# -- real calls, of a step whose cost the test controls --------------------------------------


class Cost:
    """A step that sleeps ``secs`` in the compiled call (a ``tf.py_function``).

    ``secs`` may change between calls (:meth:`set`): the function is not traced again.
    At 0 the step runs no ``py_function`` at all (a ``tf.cond`` on a variable), so that
    it is really cheap: a ``py_function``'s own cost (about half a millisecond, more on
    a loaded machine) would make the rule's value depend on the machine's load.
    """

    def __init__(self, secs: float) -> None:
        self.secs = secs
        self.sleeps = tf.Variable(secs > 0, trainable=False)

    def set(self, secs: float) -> None:
        self.secs = secs
        self.sleeps.assign(secs > 0)

    def step(self, batch: Any) -> dict[str, Any]:
        def sleep() -> np.ndarray:
            time.sleep(self.secs)
            return np.float32(0.0)

        slept = tf.cond(
            self.sleeps,
            lambda: tf.py_function(sleep, [], tf.float32),
            lambda: tf.constant(0.0),
        )
        return {"x": tf.reduce_mean(tf.cast(batch, tf.float32)) + slept}


@pytest.mark.slow
def test_real_calls_grow_on_a_cheap_step_and_stay_at_one_on_an_expensive_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = CountsCallSteps()
    cheap = FunctionLoop(
        tf.data.Dataset.range(4000).batch(2),
        step_fn=Cost(0.0).step,
        hooks=[counts],
        steps_per_execution="auto",
    )
    scripted(cheap, FAST)  # a cheap step, as any machine's load would time it
    with caplog.at_level(logging.INFO, logger="tfr_hooks"):
        history = cheap.run(epochs=2)
    assert history["x"] == pytest.approx([1999.5, 1999.5])  # every batch, once an epoch
    assert history[HISTORY_KEY] == [512.0, 512.0] and choose(0.002, 0.0005) == 512
    # the calls run the tuner's values: they grew, and the epoch's end cuts the last
    assert counts.calls[:4] == [1, 1, 1, 1] and max(counts.calls) == 512
    assert sum(counts.calls) == 4000 and len(counts.calls) < 4000 // 64
    # the input report names the value chosen by the end of its epoch
    reports = [r.getMessage() for r in caplog.records if "waiting for input" in r.getMessage()]
    assert reports and f"(steps_per_execution={int(history[HISTORY_KEY][0])})" in reports[0]
    costly = FunctionLoop(
        tf.data.Dataset.range(16).batch(2), step_fn=Cost(0.3).step, steps_per_execution="auto"
    )
    # two steps would take at least 0.6 s (a sleep is never shorter): a loaded machine
    # only makes the calls longer
    assert costly.run(epochs=1)[HISTORY_KEY] == [1.0]


@pytest.mark.slow
def test_real_calls_follow_a_step_that_becomes_far_dearer() -> None:
    dear = DearFrom(1)
    counts = CountsCallSteps()
    loop = FunctionLoop(
        tf.data.Dataset.range(4000).batch(2),  # 2,000 steps an epoch
        step_fn=Cost(0.0).step,
        hooks=[dear, counts],
        steps_per_execution="auto",
    )
    # the durations the tuner sees: 0.5 ms a step, then 20 ms from epoch 1 on
    scripted(loop, lambda k: 0.002 + k * (0.02 if dear.now else 0.0005))
    values = loop.run(epochs=2)[HISTORY_KEY]
    assert values == [512.0, 16.0] and choose(0.002, 0.02) == 16
    # the first dear call (of 512 steps, 10 s) brings it down at once, and no call after
    # it breaks the half-second bound
    epoch_1 = _calls_from_step(counts.calls, 2000)
    assert epoch_1[0] == 512 and max(epoch_1[1:]) * 0.02 <= CALL_SECS, epoch_1


class DearFrom(tfr_hooks.Hook):
    """Says (``now``) whether the step is dear: from epoch ``epoch`` on."""

    def __init__(self, epoch: int) -> None:
        self.epoch, self.now = epoch, False

    def epoch_begin(self, epoch: int) -> None:
        self.now = epoch >= self.epoch


def _calls_from_step(calls: list[int], step: int) -> list[int]:
    """The calls (their steps) from the one that starts at ``step`` on."""
    done = 0
    for i, steps in enumerate(calls):
        if done == step:
            return calls[i:]
        done += steps
    raise AssertionError(f"no call starts at step {step}: {calls}")


class Latency(tfr_hooks.Hook):
    """A hook that takes 50 ms a call; once the value stayed at 16 or more for 6 calls,
    ``stop`` is called from another thread at a moment unrelated to the calls, and its time
    kept."""

    needs_every_step = False  # it times calls, whatever their steps

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self.asked: float | None = None
        self.calls: list[tuple[float, int]] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        time.sleep(0.05)
        self.calls.append((time.monotonic(), self.loop.steps_per_execution))
        last = {value for _, value in self.calls[-6:]}
        if self.asked is None and len(self.calls) > 6 and len(last) == 1 and max(last) >= 16:
            self.asked = float("inf")
            threading.Timer(0.13, self._ask).start()

    def _ask(self) -> None:
        self.asked = time.monotonic()
        self.stop(self.loop)


@pytest.mark.slow
@pytest.mark.usefixtures("default_signal_handlers")
@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(lambda loop: loop.request_stop("a test"), id="request_stop"),
        pytest.param(lambda loop: os.kill(os.getpid(), signal.SIGTERM), id="SIGTERM"),
    ],
)
def test_stop_requests_and_sigterm_are_answered_within_the_call_bound(stop: Any) -> None:
    # a 50 ms hook on 10 ms steps: the 1% share alone would ask for 512 steps a call
    # (5 s); the half-second bound holds it at 32, and the stop waits for one call
    assert choose(0.05, 0.01) == 32 and choose(0.05, 0.01, call_secs=1e9) == 512
    latency = Latency(stop)
    loop = FunctionLoop(
        tf.data.Dataset.range(4000).batch(2),  # 2,000 steps: a few seconds if never stopped
        step_fn=Cost(0.001).step,
        hooks=[latency],
        steps_per_execution="auto",
    )
    scripted(loop, linear(0.05, 0.01))  # the calls as the tuner sees them, on any machine
    loop.run(epochs=1)
    assert latency.asked is not None and latency.asked != float("inf"), "never stopped"
    # counted in calls, not seconds (a loaded machine stretches both): the call under way
    # when the stop came ends, and no other starts
    after = [value for at, value in latency.calls if at > latency.asked]
    assert len(after) <= 1, after
    assert latency.loop.global_step < 2000  # the epoch was cut short
    assert max(value for _, value in latency.calls) == 32  # held by the call bound


@pytest.mark.slow
def test_validation_calls_get_a_value_of_their_own_and_see_every_batch() -> None:
    x = np.random.default_rng(1).normal(size=(2048, 4)).astype(np.float32)
    train = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4)  # 512 steps
    val = tf.data.Dataset.from_tensor_slices((x[:802], x[:802, :1] * 2)).batch(4)  # 201
    model = keras_regressor()
    loop = FunctionLoop(train, model=model, steps_per_execution="auto")
    assert loop.tuning is not None
    # the calls as each tuner sees them, on any machine: training steps held at 2 by the
    # half-second bound (0.2 s a step), validation steps cheap
    loop.tuning.train = Scripted(linear(0.01, 0.2))
    loop.tuning.validation = Scripted(FAST)
    history = loop.run(epochs=2, validation_data=val)
    assert loop.tuning.train.value == 2
    assert loop.tuning.validation.value > 2  # its own calls' value, not training's
    # every validation batch once, the last (2 examples) included: as Keras evaluates it
    expected = model.evaluate(val, verbose=0, return_dict=True)["loss"]
    assert history["val_loss"][-1] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["streamed", "in_memory", "packed"])
def test_auto_trains_each_example_once_an_epoch_on_every_pipeline(
    tmp_path: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_timing(monkeypatch)  # calls of several steps on any machine's load
    plain = write_records(tmp_path / "plain.tfrecord", 1001)  # 500 batches of 2, and 1
    files: Any = str(plain)
    if kind == "packed":
        files = tfrecord.convert([plain], tmp_path / "packed", examples_per_record=8).files
    memory = kind == "in_memory"
    source = tfrecord.source(files, 2, shuffle="global" if memory else 64, seed=0, in_memory=memory)

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float64))}

    loop = FunctionLoop(source, step_fn=step, steps_per_execution="auto")
    history = loop.run(epochs=3)
    assert history["index"] == pytest.approx([500.0] * 3)  # every example once, weighted
    assert loop.loop.epoch_examples == 1001 and loop.loop.epoch_steps == 501
    assert max(history[HISTORY_KEY]) > 1
