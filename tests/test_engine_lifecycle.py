"""The engine's lifecycle, driven with a fake runner: no session, no tf.function.

The engine alone fires every hook event; a runner only runs steps. These tests pin the
order of the events, stop requests from each event, the teardown when a hook's ``end``
fails, epochs cut short, validation every ``freq`` epochs and the logs hooks get.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from helpers import LifecycleRecorder as Recorder
from tfr_hooks.engine import Passes, RunInput, run_loop
from tfr_hooks.hooks import HookList
from tfr_hooks.runners import StepResult

v1 = tf.compat.v1


class FakeRunner:
    """Serves ``batches`` per epoch (the value of each is its loss) and ``val`` batches.

    With ``lookahead`` it knows the data ran out before a step is tried (as
    FunctionLoop's runner does); without, a step finds out (as a session's
    ``OutOfRangeError`` does).
    """

    session = "fake-session"
    coord = "fake-coord"
    run_args = v1.train.SessionRunArgs("train_op")
    skips_batches = False  # a resumed epoch runs the steps left
    replays_passes = True

    def __init__(
        self,
        batches: Sequence[float] = (1.0, 2.0, 3.0),
        val: Sequence[Any] | None = (10.0, 20.0),
        *,
        lookahead: bool = False,
        reinitializable: bool = True,
        fail_at_step: int | None = None,
        fail_start: bool = False,
    ) -> None:
        self.batches = list(batches)
        self.val = None if val is None else list(val)
        self.lookahead = lookahead
        self.reinitializable = reinitializable
        self.fail_at_step = fail_at_step
        self.fail_start = fail_start
        self.calls: list[str] = []
        self.passes_started = 0  # by start_pass: the engine alone counts the passes
        self.hook_args: list[Sequence[Any]] = []
        self.position = 0
        self.val_position = 0
        self.total = 0.0
        self.steps = 0
        self.in_validation = False

    @property
    def ran_out(self) -> bool:
        if not self.lookahead:
            return False
        if self.in_validation:
            return self.val is not None and self.val_position >= len(self.val)
        return self.position >= len(self.batches)

    def start(self) -> None:
        self.calls.append("start")
        if self.fail_start:
            raise RuntimeError("the session could not be created")

    def start_epoch(self, restart_data: bool) -> None:
        self.calls.append(f"start_epoch(restart={restart_data})")
        self.in_validation = False
        self.total = 0.0
        self.steps = 0
        if restart_data:
            self.position = 0

    def start_pass(self) -> None:
        self.passes_started += 1

    def skip_batches(self, count: int) -> tuple[int, int]:
        skipped = min(count, len(self.batches) - self.position)
        self.position += skipped
        return skipped, 4 * skipped

    def run_step(self, hook_args: Sequence[Any], limit: int) -> StepResult:
        self.hook_args.append(hook_args)
        if self.fail_at_step is not None and self.position == self.fail_at_step:
            raise RuntimeError("the step failed")
        if self.position >= len(self.batches):
            return StepResult(exhausted=True)
        self.total += self.batches[self.position]
        self.position += 1
        self.steps += 1
        results = [None if a is None else f"results for {a.fetches}" for a in hook_args]
        return StepResult(
            1,
            4,
            {"loss": np.float32(self.total / self.steps)},
            exhausted=self.lookahead and self.position >= len(self.batches),
            hook_results=results,
        )

    def start_validation(self) -> bool:
        self.calls.append("start_validation")
        if self.val is None:
            return False
        self.in_validation = True
        self.val_position = 0
        return True

    def run_validation_step(self, limit: int) -> StepResult:
        assert self.val is not None
        if self.val_position >= len(self.val):
            return StepResult(exhausted=True)
        self.val_position += 1
        mean = sum(self.val[: self.val_position]) / self.val_position  # a running mean
        return StepResult(1, 4, {"loss": mean})

    def cancel(self) -> bool:
        return False  # nothing blocks in a fake

    def finish(self) -> None:
        self.calls.append("finish")

    def close(self) -> None:
        self.calls.append("close")


def run(runner: FakeRunner, hooks: Sequence[Any], **kwargs: Any) -> dict[str, list[Any]]:
    kwargs.setdefault("epochs", 2)
    return run_loop(runner, HookList(hooks), tfr_hooks.LoopState(), **kwargs)


def epoch_events(first: int, *, lookahead: bool) -> list[str]:
    """The events of one epoch of three batches, validated on two."""
    steps = ["before_run", "after_run"] * 3
    validation = ["validation_begin"]
    validation += ["validation_batch_begin(0)", "validation_batch_end(0)"]
    validation += ["validation_batch_begin(1)", "validation_batch_end(1)"]
    if not lookahead:  # a step finds the data gone: before_run, and no after_run
        steps.append("before_run")
        validation.append("validation_batch_begin(2)")
    return [f"epoch_begin({first})", *steps, *validation, "validation_end", f"epoch_end({first})"]


@pytest.mark.parametrize("lookahead", [False, True], ids=["step-finds-end", "lookahead"])
def test_the_engine_fires_every_event_in_the_documented_order(lookahead: bool) -> None:
    events: list[Any] = []
    runner = FakeRunner(lookahead=lookahead)
    history = run(runner, [Recorder(events)])
    assert events == [
        "begin",
        "after_create_session(fake-session, fake-coord)",
        *epoch_events(0, lookahead=lookahead),
        *epoch_events(1, lookahead=lookahead),
        "end(fake-session)",
    ]
    assert runner.calls == [
        "start",
        "start_epoch(restart=True)",
        "start_validation",
        "start_epoch(restart=True)",
        "start_validation",
        "finish",
        "close",
    ]
    assert history == {"loss": [2.0, 2.0], "val_loss": [15.0, 15.0]}


def test_hooks_args_reach_the_runner_and_their_results_come_back_to_after_run() -> None:
    class Asks(Recorder):
        def before_run(self, run_context: Any) -> Any:
            super().before_run(run_context)
            return v1.train.SessionRunArgs("my_tensor")

    events: list[Any] = []
    plain, asking = Recorder(events), Asks(events)
    runner = FakeRunner(val=None)
    run(runner, [plain, asking], epochs=1)
    assert [args[1].fetches for args in runner.hook_args] == ["my_tensor"] * 4
    assert all(args[0] is None for args in runner.hook_args)
    assert asking.after_run_results == ["results for my_tensor"] * 3
    assert plain.after_run_results == [None] * 3


class StopAt(tfr_hooks.Hook):
    """Asks the loop to stop the first time it gets ``event``."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.done = False

    def _maybe_stop(self, event: str, run_context: Any = None) -> None:
        if event == self.event and not self.done:
            self.done = True
            if run_context is not None:  # the SessionRunHook way
                run_context.request_stop()
            else:
                self.loop.request_stop(f"at {event}")

    def begin(self) -> None:
        self._maybe_stop("begin")

    def after_create_session(self, session: Any, coord: Any) -> None:
        self._maybe_stop("after_create_session")

    def epoch_begin(self, epoch: int) -> None:
        self._maybe_stop("epoch_begin")

    def before_run(self, run_context: Any) -> None:
        self._maybe_stop("before_run", run_context)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._maybe_stop("after_run", run_context)

    def validation_begin(self) -> None:
        self._maybe_stop("validation_begin")

    def validation_batch_end(self, step: int, logs: dict[str, Any]) -> None:
        self._maybe_stop("validation_batch_end")

    def validation_end(self, logs: dict[str, Any]) -> None:
        self._maybe_stop("validation_end")

    def epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
        self._maybe_stop("epoch_end")


@pytest.mark.parametrize(
    ("event", "steps", "epochs_closed"),
    [
        ("begin", 0, 0),  # no epoch starts
        ("after_create_session", 0, 0),
        ("epoch_begin", 1, 1),  # as in fit: the step under way runs, the epoch closes
        ("before_run", 1, 1),
        ("after_run", 1, 1),
        ("validation_begin", 3, 1),  # the epoch was whole; no next epoch
        ("validation_batch_end", 3, 1),
        ("validation_end", 3, 1),
        ("epoch_end", 3, 1),
    ],
)
def test_a_stop_request_from_any_event_ends_the_run_cleanly(
    event: str, steps: int, epochs_closed: int
) -> None:
    events: list[Any] = []
    stopper, recorder = StopAt(event), Recorder(events)
    runner = FakeRunner(lookahead=True)
    history = run(runner, [stopper, recorder], epochs=3)
    assert events.count("after_run") == steps
    assert sum(e.startswith("epoch_end") for e in events) == epochs_closed
    assert len(history.get("loss", [])) == epochs_closed
    assert events[-1] == "end(fake-session)"
    assert runner.calls[-2:] == ["finish", "close"]
    assert stopper.loop.stop_requested


def test_an_error_in_one_hooks_end_still_runs_every_end_and_is_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailingEnd(tfr_hooks.Hook):
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def end(self, session: Any) -> None:
            raise self.error

    events: list[Any] = []
    hooks = [
        Recorder(events, "a:"),
        FailingEnd(ValueError("first end failed")),
        Recorder(events, "b:"),
        FailingEnd(OSError("second end failed")),
        Recorder(events, "c:"),
    ]
    runner = FakeRunner()
    with caplog.at_level(logging.ERROR), pytest.raises(ValueError, match="first end failed"):
        run(runner, hooks, epochs=1)
    assert [e for e in events if e.endswith(":end(fake-session)")] == [
        "a:end(fake-session)",
        "b:end(fake-session)",
        "c:end(fake-session)",
    ]
    assert runner.calls[-1] == "close"  # resources released after every end
    logged = [r for r in caplog.records if r.exc_info]
    assert [str(r.exc_info[1]) for r in logged if r.exc_info] == ["second end failed"]


def test_a_failed_step_wins_over_end_errors_which_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen_error: list[Any] = []

    class NotesError(tfr_hooks.Hook):
        def end(self, session: Any) -> None:
            seen_error.append(self.loop.error)
            raise ValueError("end failed too")

    events: list[Any] = []
    runner = FakeRunner(fail_at_step=1)
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="the step failed"):
        run(runner, [NotesError(), Recorder(events)], epochs=1)
    assert isinstance(seen_error[0], RuntimeError)  # end() could tell the run failed
    assert events[-1] == "end(fake-session)"
    assert "epoch_end(0)" not in events
    assert any("end failed too" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


class FailsIn(tfr_hooks.Hook):
    """Raises in ``event``; records its ``end`` calls in ``events``."""

    def __init__(self, events: list[Any], event: str) -> None:
        self.events = events
        self.event = event

    def begin(self) -> None:
        if self.event == "begin":
            raise RuntimeError("Global step should be created to use CheckpointSaverHook.")

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self.event == "after_create_session":
            raise RuntimeError("restoring failed")

    def end(self, session: Any) -> None:
        self.events.append(f"failing:end({session})")


class PlainRecorder(v1.train.SessionRunHook):  # type: ignore[misc,name-defined]
    """A TensorFlow-style hook: its ``end`` needs the session, as CheckpointSaverHook's."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def end(self, session: Any) -> None:
        self.events.append(f"plain:end({session})")
        if session is None:  # as CheckpointSaverHook's end fails on session.run
            raise AttributeError("'NoneType' object has no attribute 'run'")


def test_a_hook_whose_begin_raised_and_those_after_it_get_no_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    hooks = [
        Recorder(events, "a:"),
        PlainRecorder(events),
        FailsIn(events, "begin"),
        Recorder(events, "c:"),
    ]
    runner = FakeRunner()
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="Global step"):
        run(runner, hooks, epochs=1)
    # no session was created: the Hook that began ends without one, the plain
    # SessionRunHook (which MonitoredSession never ends without a session) does not
    assert events == ["a:begin", "a:end(None)"]
    assert runner.calls == ["close"]  # no start, no finish; resources still released
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # the one error


def test_a_session_that_could_not_be_created_ends_only_hooks_that_need_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    hooks = [Recorder(events, "a:"), PlainRecorder(events), Recorder(events, "c:")]
    runner = FakeRunner(fail_start=True)
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="could not be"):
        run(runner, hooks, epochs=1)
    assert events == ["a:begin", "c:begin", "a:end(None)", "c:end(None)"]
    assert runner.calls == ["start", "close"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_once_the_session_exists_every_hook_that_began_gets_end() -> None:
    events: list[Any] = []
    hooks = [
        Recorder(events, "a:"),
        FailsIn(events, "after_create_session"),
        PlainRecorder(events),
        Recorder(events, "c:"),
    ]
    runner = FakeRunner()
    with pytest.raises(RuntimeError, match="restoring failed"):
        run(runner, hooks, epochs=1)
    assert [e for e in events if "end(" in e] == [
        "a:end(fake-session)",
        "failing:end(fake-session)",
        "plain:end(fake-session)",
        "c:end(fake-session)",
    ]


def test_an_epoch_cut_short_by_the_data_is_closed_and_ends_training(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[Any] = []
    recorder = Recorder(events)
    runner = FakeRunner(reinitializable=False, val=None)
    with caplog.at_level(logging.WARNING):
        history = run(runner, [recorder], epochs=3, steps_per_epoch=5)
    assert history == {"loss": [2.0]}  # the three steps it had, closed as an epoch
    assert events.count("after_run") == 3
    assert events[-2:] == ["epoch_end(0)", "end(fake-session)"]
    assert "ran out of data after 3 steps of epoch 0" in caplog.text
    assert recorder.loop.epoch_steps == 3 and recorder.loop.global_step == 3


def test_data_decided_epochs_learn_their_length_and_restart_the_data() -> None:
    recorder = Recorder([])
    runner = FakeRunner(val=None)
    history = run(runner, [recorder], epochs=3)
    assert history == {"loss": [2.0, 2.0, 2.0]}
    assert recorder.loop.steps_per_epoch == 3
    assert recorder.loop.global_step == 9
    assert runner.calls.count("start_epoch(restart=True)") == 3


@pytest.mark.parametrize(
    ("epochs", "initial_epoch", "freq", "validated"),
    [(6, 0, 3, [2, 5]), (6, 1, 2, [1, 3, 5]), (4, 0, 1, [0, 1, 2, 3]), (2, 0, 5, [])],
)
def test_validation_runs_every_freq_epochs_as_fit_counts_them(
    epochs: int, initial_epoch: int, freq: int, validated: list[int]
) -> None:
    events: list[Any] = []
    recorder = Recorder(events)
    history = run(
        FakeRunner(lookahead=True),
        [recorder],
        epochs=epochs,
        initial_epoch=initial_epoch,
        validation_freq=freq,
    )
    # the epoch each validation pass belongs to: the epoch_begin before it
    epochs_validated = []
    current = None
    for event in events:
        if event.startswith("epoch_begin("):
            current = int(event[len("epoch_begin(") : -1])
        elif event == "validation_begin":
            epochs_validated.append(current)
    assert epochs_validated == validated
    assert ["val_loss" in logs for logs in recorder.epoch_logs] == [
        e in validated for e in range(initial_epoch, epochs)
    ]
    assert len(history.get("val_loss", [])) == len(validated)


def test_validation_steps_cap_each_pass() -> None:
    events: list[Any] = []
    run(FakeRunner(val=(1.0, 2.0, 3.0)), [Recorder(events)], epochs=1, validation_steps=2)
    assert events.count("validation_batch_end(0)") == 1
    assert events.count("validation_batch_end(1)") == 1
    assert "validation_batch_begin(2)" not in events


def test_a_validation_pass_without_batches_warns_once_per_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder([])
    with caplog.at_level(logging.WARNING):
        history = run(FakeRunner(val=()), [recorder], epochs=2)
    assert caplog.text.count("The validation data gave no batch") == 2
    assert "val_loss" not in history


def test_logs_are_python_floats_and_non_scalar_metrics_stay_arrays() -> None:
    class Runner(FakeRunner):
        def run_step(self, hook_args: Sequence[Any], limit: int) -> StepResult:
            result = super().run_step(hook_args, limit)
            if result.steps:
                result.logs = {
                    "loss": np.float32(0.5),
                    "f1": np.array([0.25], np.float32),  # F1Score on one class: shape (1,)
                    "per_class": np.array([0.1, 0.2, 0.3]),
                    "nested": {"count": np.int64(4)},
                }
            return result

    class Checks(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.batch_logs = dict(self.loop.batch_logs)

        def epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
            self.logs = dict(logs)

    checks = Checks()
    history = run(Runner(val=None), [checks], epochs=1)
    for logs in (checks.batch_logs, checks.logs):
        assert type(logs["loss"]) is float and logs["loss"] == 0.5
        assert type(logs["count"]) is float and logs["count"] == 4.0
        if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
            assert isinstance(logs["f1"], np.ndarray) and logs["f1"].shape == (1,)
        else:  # float() of a one-element array, as fit's conversion gives on numpy < 2
            assert logs["f1"] == pytest.approx(0.25) and isinstance(logs["f1"], float)
        assert isinstance(logs["per_class"], np.ndarray) and logs["per_class"].shape == (3,)
    assert isinstance(history["f1"][0], type(checks.logs["f1"]))
    assert type(history["loss"][0]) is float


def test_each_run_starts_from_a_fresh_loop_state() -> None:
    loop = tfr_hooks.LoopState()
    hooks = HookList([StopAt("epoch_end")])
    run_loop(FakeRunner(val=None), hooks, loop, epochs=3)
    assert loop.stop_requested and loop.global_step == 3
    hooks = HookList([Recorder([])])
    history = run_loop(FakeRunner(val=None), hooks, loop, epochs=2)
    assert not loop.stop_requested and loop.stop_reason == ""
    assert loop.global_step == 6 and loop.epoch == 1
    assert len(history["loss"]) == 2
    assert hooks.hooks[0].loop is loop  # hooks keep seeing the loop's own state


class ResumeMidEpoch(tfr_hooks.Hook):
    """Moves the start to step ``step`` of epoch ``epoch``, as a restored checkpoint does."""

    def __init__(self, epoch: int, step: int) -> None:
        self.at = (epoch, step)
        self.batches: list[tuple[int, int]] = []

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.loop.initial_epoch, self.loop.initial_step = self.at

    def before_run(self, run_context: Any) -> None:
        self.batches.append((self.loop.epoch, self.loop.epoch_steps))


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_run_resumed_mid_epoch_runs_only_the_steps_left(lookahead: bool) -> None:
    runner = FakeRunner(batches=(1.0, 2.0, 3.0, 4.0), val=None, lookahead=lookahead)
    hook = ResumeMidEpoch(epoch=1, step=3)
    loop = tfr_hooks.LoopState()
    history = run_loop(runner, HookList([hook]), loop, epochs=3, data=RunInput(steps=4))
    # epoch 1 counts its first 3 steps as run and runs the 4th (on fresh data), then
    # epoch 2 runs in full (without look-ahead, a 5th step finds the data run out)
    found_out = [] if lookahead else [(2, 4)]
    assert hook.batches == [(1, 3), (2, 0), (2, 1), (2, 2), (2, 3), *found_out]
    assert history["loss"] == [1.0, 2.5]  # epoch 1's mean is of the step it ran
    assert loop.global_step == 5  # steps of this run
    assert runner.calls.count("start_epoch(restart=True)") == 2


class ResumedAt(tfr_hooks.Hook):
    """Restores a position in ``begin``, as a checkpoint hook does; records each epoch."""

    def __init__(self, epoch: int, step: int) -> None:
        self.at = (epoch, step)
        self.seen: list[tuple[int, int, int]] = []

    def begin(self) -> None:
        self.loop.initial_epoch, self.loop.initial_step = self.at

    def epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
        self.seen.append((epoch, self.loop.epoch_steps, self.loop.epoch_examples))


class Skipping(FakeRunner):
    """Skips batches exactly, and counts no pass itself (``start_pass`` only records)."""

    skips_batches = True


def test_a_run_resumed_mid_epoch_replays_the_earlier_passes_and_skips_the_trained_batches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner, resumed = Skipping(batches=(1.0, 2.0, 3.0, 4.0, 5.0), val=None), ResumedAt(2, 2)
    passes = Passes()
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        run_loop(runner, HookList([resumed]), tfr_hooks.LoopState(), epochs=3, passes=passes)
    # the engine asks for a pass for each of epochs 0 and 1, so that a seeded shuffle
    # draws their orders first, and counts them with epoch 2's own
    assert runner.passes_started == 2
    assert (passes.started, passes.session) == (3, runner.session)
    # the two trained batches are passed over, then the epoch runs to the data's end
    assert resumed.seen == [(2, 5, 20)]
    assert runner.steps == 3  # the steps after the two skipped
    resume_lines = [r.getMessage() for r in caplog.records if r.name == "tfr_hooks.resume"]
    assert "Started 2 passes over the data to resume at epoch 2" in resume_lines
    assert "Skipped 2 batches (8 examples) of the resumed epoch" in resume_lines


def test_the_passes_a_loop_started_count_for_its_next_run_in_the_same_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    passes = Passes()
    first = Skipping(val=None)
    run_loop(first, HookList([]), tfr_hooks.LoopState(), epochs=2, passes=passes)
    assert (first.passes_started, passes.started) == (0, 2)  # two epochs, two passes
    # the next run, in the same session, resumed at epoch 3: only epoch 2's pass is missing
    again = Skipping(val=None)
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        run_loop(again, HookList([ResumedAt(3, 0)]), tfr_hooks.LoopState(), epochs=4, passes=passes)
    assert (again.passes_started, passes.started) == (1, 4)
    assert "Started 1 passes over the data to resume at epoch 3" in caplog.messages
    # a runner in another session (its data's random state afresh) starts them all again
    other = Skipping(val=None)
    other.session = "another-session"
    run_loop(other, HookList([ResumedAt(3, 0)]), tfr_hooks.LoopState(), epochs=4, passes=passes)
    assert (other.passes_started, passes.started) == (3, 4)


def test_a_runner_that_cannot_replay_passes_is_asked_for_none() -> None:
    runner = Skipping(val=None)
    runner.replays_passes = False  # a queue stream, data without initializers
    passes = Passes()
    run_loop(runner, HookList([ResumedAt(2, 0)]), tfr_hooks.LoopState(), epochs=3, passes=passes)
    assert runner.passes_started == 0
    assert passes.started == 1  # epoch 2's own


def test_a_run_resumed_with_epochs_counted_in_steps_replays_and_skips_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner, resumed = Skipping(batches=(1.0, 2.0, 3.0, 4.0), val=None), ResumedAt(1, 2)
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        run(runner, [resumed], epochs=2, steps_per_epoch=4)
    assert runner.passes_started == 0
    assert resumed.seen == [(1, 4, 8)]  # the two steps left, run on data started afresh
    assert not [m for m in caplog.messages if m.startswith(("Started", "Skipped"))]


def test_a_resumed_epoch_whose_data_holds_fewer_batches_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = Skipping(batches=(1.0, 2.0), val=None)
    with caplog.at_level(logging.INFO, logger="tfr_hooks.resume"):
        run(runner, [ResumedAt(0, 3)], epochs=2)
    assert "Skipped 2 batches (8 examples) of the resumed epoch" in caplog.messages
    assert "Epoch 0 resumes at step 3, but its data holds only 2 batches." in caplog.messages


class Stalling(FakeRunner):
    """A pass of 10 batches of 4 examples whose first pass stalls after 3 steps.

    Later passes are bounded by the engine (``examples_left``), as a lost worker's share
    would otherwise stall every pass; it records the bounds it was given.
    """

    def __init__(self) -> None:
        super().__init__(batches=[1.0] * 10, val=None)
        self.passes = 0
        self.bounds: list[int | None] = []

    def start_epoch(self, restart_data: bool) -> None:
        super().start_epoch(restart_data)
        self.passes += 1

    def run_step(
        self, hook_args: Sequence[Any], limit: int, examples_left: int | None = None
    ) -> StepResult:
        self.bounds.append(examples_left)
        if self.passes == 1 and self.position == 3:
            return StepResult(exhausted=True, stall="tf.data service at grpc://h:1: stalled")
        return super().run_step(hook_args, limit)


def test_the_engine_ends_a_stalled_pass_and_bounds_the_later_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = Stalling()
    loop = tfr_hooks.LoopState()
    with caplog.at_level(logging.WARNING):
        history = run_loop(runner, HookList([]), loop, epochs=3, data=RunInput(examples=40))
    assert len(history["loss"]) == 3  # the stalled epoch ended, the run went on
    warnings = [r.getMessage() for r in caplog.records if "ends here" in r.getMessage()]
    assert warnings == [
        "tf.data service at grpc://h:1: stalled: epoch 0 ends here: 28 of its 40 examples "
        "were lost (12 read). The next pass reads from a new iterator."
    ]
    # no bound before the stall; after it, each step is bounded by what the pass holds
    assert runner.bounds[:4] == [None] * 4
    assert runner.bounds[4:14] == [40 - 4 * i for i in range(10)]
    # a stalled pass teaches nothing of the epoch's length: the full pass does
    assert loop.steps_per_epoch == 10


def test_a_stalled_pass_of_data_that_cannot_restart_ends_the_run() -> None:
    runner = Stalling()
    runner.reinitializable = False
    with pytest.raises(ConnectionError, match="cannot start its data again"):
        run_loop(runner, HookList([]), tfr_hooks.LoopState(), epochs=2, data=RunInput(examples=40))
