"""tfr_hooks.calls: the engine times each call once and hands it to the call observers."""

from __future__ import annotations

import time
from typing import Any

import tfr_hooks
from test_engine_lifecycle import FakeRunner
from tfr_hooks.calls import Call, CallObserver, call_observers
from tfr_hooks.engine import run_loop
from tfr_hooks.hooks import HookList
from tfr_hooks.input_report import EpochClock, InputStats
from tfr_hooks.runners import StepResult


class Watcher(tfr_hooks.Hook):
    """Records each call it is handed; its ``before_run`` takes 20 ms (a slow hook).

    ``events`` is the order of its ``before_run``s and the calls, ``before_run_secs``
    what each ``before_run`` took by the engine's clock.
    """

    needs_every_step = False

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: list[str] = []
        self.before_run_secs: list[float] = []

    def before_run(self, run_context: Any) -> None:
        started = time.perf_counter()
        time.sleep(0.02)
        self.before_run_secs.append(time.perf_counter() - started)
        self.events.append("before_run")

    def observe_call(self, call: Call) -> None:
        self.calls.append(call)
        self.events.append("validation" if call.validation else "training")


class Measured(FakeRunner):
    """Reports a wait of 1 ms for each training step it runs."""

    def run_step(self, hook_args: Any, limit: int) -> StepResult:
        result = super().run_step(hook_args, limit)
        result.input_wait = 0.001 if result.steps else None
        return result


def test_the_engine_hands_each_training_and_validation_call_to_the_hooks_that_observe_calls() -> (
    None
):
    watcher = Watcher()
    run_loop(Measured(), HookList([watcher]), tfr_hooks.LoopState(), epochs=1)
    training = [c for c in watcher.calls if not c.validation]
    validation = [c for c in watcher.calls if c.validation]
    # three batches, then a call that finds the data run out (it gets no after_run)
    assert [(c.steps, c.limit, c.examples, c.input_wait) for c in training] == [
        (1, 1, 4, 0.001),
        (1, 1, 4, 0.001),
        (1, 1, 4, 0.001),
        (0, 1, 0, None),
    ]
    # the hooks' time is the call's: each call spans its before_run (one clock, no bound)
    assert len(watcher.before_run_secs) == len(training)
    assert all(c.secs >= s for c, s in zip(training, watcher.before_run_secs, strict=True))
    # the two validation batches; the call that found the end is not handed on
    assert [(c.steps, c.limit) for c in validation] == [(1, 1), (1, 1)]
    # no before_run around them: none runs between the last training call and them
    assert watcher.events == ["before_run", "training"] * 4 + ["validation"] * 2


def test_only_hooks_with_observe_call_are_call_observers() -> None:
    watcher, plain = Watcher(), tfr_hooks.Hook()
    assert call_observers([plain, watcher]) == [watcher]
    assert isinstance(watcher, CallObserver) and not isinstance(plain, CallObserver)


def test_the_epoch_clock_observes_training_calls_only() -> None:
    now = [0.0]
    clock = EpochClock(lambda: now[0], skip_first=False)
    now[0] = 2.0
    clock.observe_call(Call(steps=2, limit=2, secs=2.0, examples=8, input_wait=0.5))
    clock.observe_call(Call(steps=3, limit=4, secs=1.0, examples=12, validation=True))
    assert clock.stats(0) == InputStats(0, 2, 8, 0.5, 2.0)


class Limits(tfr_hooks.Hook):
    """Records ``loop.steps_per_execution`` as each call and epoch_end see it."""

    needs_every_step = False

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def before_run(self, run_context: Any) -> None:
        self.seen.append(("train", self.loop.steps_per_execution))

    def validation_batch_begin(self, step: int) -> None:
        self.seen.append(("validation", self.loop.steps_per_execution))

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.seen.append(("epoch_end", self.loop.steps_per_execution))


def test_the_auto_tuner_is_a_hook_the_engine_hands_calls_to() -> None:
    from tfr_hooks.tuning import HISTORY_KEY, AutoSteps

    tuning, limits = AutoSteps([]), Limits()
    tuning.train.value, tuning.validation.value = 4, 2  # as earlier runs left them
    runner = FakeRunner(batches=(1.0, 2.0), val=(1.0,), lookahead=True)
    history = run_loop(runner, HookList([tuning, limits]), tfr_hooks.LoopState(), epochs=2)
    # training calls run with the training value, validation calls with their own, and
    # the training value is back for epoch_end and the next epoch
    epoch = [("train", 4), ("train", 4), ("validation", 2), ("epoch_end", 4)]
    assert limits.seen == epoch * 2
    assert history[HISTORY_KEY] == [4.0, 4.0]
