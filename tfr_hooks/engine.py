"""The whole lifecycle of a run, shared by every loop in the package.

The engine knows no session, no ``tf.function``, no Keras and no TFRecord. It fires every
hook event in the order documented in :mod:`tfr_hooks.hooks`: it collects the hooks'
``before_run`` arguments, asks a *runner* to run one step (or one validation step) with
them, calls ``after_run`` with the results, turns ``run_context.request_stop()`` into a
stop of the loop, drives the validation events, turns logs into Python floats (here and
nowhere else) and tears the run down. A runner (:class:`~tfr_hooks.SessionLoop`'s or
:class:`~tfr_hooks.FunctionLoop`'s) only runs steps, restarts data and releases what it
holds.

Epoch boundaries:

* ``steps_per_epoch=None`` and a re-initializable source: the data running out ends the
  epoch (a final partial batch included); the runner restarts the data for the next one.
  The number of steps is learned from the first epoch and shown to hooks (it replaces a
  length known up front that the data did not match). A run that starts at a later
  epoch first starts (and leaves) a pass of the data for each earlier epoch not yet
  started where the data keeps its random state (``Runner.start_pass``, counted by
  :class:`~tfr_hooks.resume.Passes`), so that a seeded shuffle gives that epoch its own
  order. Resumed mid-epoch on a runner that can skip batches (``Runner.skips_batches``),
  it then passes over the batches already trained on (``Runner.skip_batches``; they
  count in ``loop.epoch_examples``) and runs that epoch to the data's end. How a run enters its
  first epoch (a seek, a skip or a replay) is chosen once per run, in
  :mod:`tfr_hooks.resume`; this module does not know which.
* ``steps_per_epoch=None`` and a one-shot source: the data running out closes the current
  epoch and ends training.
* ``steps_per_epoch=N``: epochs are counted in steps; the data is started once. Data
  running out early closes the epoch and ends training with a warning.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfr_hooks.calls import Call, CallObserver, call_observers
from tfr_hooks.checks import (
    check_non_negative_int,
    check_optional_positive_int,
    check_positive_int,
)
from tfr_hooks.hooks import Hook, HookList, LoopState, SessionRunContext, call_all
from tfr_hooks.input_report import EpochClock, InputFacts, InputReport
from tfr_hooks.resume import Passes, Resume, choose_resume
from tfr_hooks.runners import Runner, StepResult
from tfr_hooks.seeking import Seekable
from tfr_hooks.stalls import StallPolicy

__all__ = [
    "Passes",
    "RunInput",
    "check_run_args",
    "run_loop",
    "begin_run",
    "start_session",
    "run_hooked_step",
    "end_run",
    "python_logs",
    "python_value",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunInput:
    """What a loop knows of its training input, handed to :func:`run_loop` once a run.

    Attributes:
        steps: With ``steps_per_epoch=None``, the steps an epoch is known to make before
            it runs (a dataset's cardinality), shown to hooks as
            ``loop.steps_per_epoch``; ``None``: learned from the first epoch.
        examples: The examples of one epoch whose pass may stall, when known (data read
            through a tf.data service:
            :meth:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts.served_examples`); after a
            stalled pass, later passes end at this size (see :class:`StallPolicy`).
        report: What the input report's remedy needs (an
            :class:`~tfr_hooks.input_report.InputFacts`), or a function returning it,
            called when the first verdict is logged.
        position: Where the training data's next pass starts, when it can start
            anywhere (:class:`~tfr_hooks.seeking.Seekable`: a reader's
            :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`); ``None`` replays.
    """

    steps: int | None = None
    examples: int | None = None
    report: InputFacts | Callable[[], InputFacts] | None = None
    position: Seekable | None = None


def check_run_args(
    epochs: object, initial_epoch: object, validation_steps: object, validation_freq: object
) -> None:
    """Check the arguments of a loop's ``run`` that every loop shares, once, on entry.

    Raises:
        TypeError: If one is not an int (``validation_steps``: nor ``None``).
        ValueError: If ``epochs``, ``validation_steps`` or ``validation_freq`` is not
            positive, or ``initial_epoch`` is negative.
    """
    check_positive_int(epochs, "epochs")
    check_non_negative_int(initial_epoch, "initial_epoch")
    check_optional_positive_int(validation_steps, "validation_steps")
    check_positive_int(validation_freq, "validation_freq")


_NUMBERS = (float, int, np.floating, np.integer)  # a bool is an int: 1.0, as in fit


def python_value(value: Any) -> Any:
    """A log value as Keras ``fit`` hands it to callbacks: a float when it is a scalar.

    Numbers and 0-d arrays or tensors become Python floats, as ``float()`` makes them
    (on numpy < 2 a one-element array too); arrays of other shapes (a per-class metric,
    ``F1Score`` on one class on numpy 2) stay numpy arrays; other objects stay.
    """
    if isinstance(value, _NUMBERS):  # the common case, first
        return float(value)
    if isinstance(value, (str, bytes)) or value is None:
        return value
    try:
        array = np.asarray(value)
    except Exception:  # not array-like: leave it as it is
        return value
    if array.size == 1 and array.dtype.kind in "biuf":
        try:  # fit's own float(): numpy < 2 also turns a (1,) array into a float
            return float(array)
        except TypeError:
            pass
    return array if array.dtype.kind in "biufc" else value


def python_logs(logs: Mapping[str, Any]) -> dict[str, Any]:
    """Logs with nested dicts flattened and every value through :func:`python_value`."""
    result: dict[str, Any] = {}
    for key, value in logs.items():
        if isinstance(value, _NUMBERS):
            result[key] = float(value)
        elif isinstance(value, Mapping):
            result.update(python_logs(value))
        else:
            result[key] = python_value(value)
    return result


def begin_run(hooks: HookList, loop: LoopState, cancels: Sequence[Callable[[], bool]] = ()) -> None:
    """The first event of a run: attach ``loop`` to the hooks, then every ``begin``.

    ``hooks.begun`` lists those whose ``begin`` returned (the ones :func:`end_run` ends).
    Every run of the package starts here: :func:`run_loop`'s, and ``hooked_session``'s
    around a script's own loop.

    Args:
        hooks: The run's hooks.
        loop: The run's state.
        cancels: What ends a read under way besides the hooks' own ``cancel`` (the
            runner's), listed in ``loop.input_cancels`` before any ``begin``.
    """
    hooks.set_loop(loop)
    loop.input_cancels = (*loop.input_cancels, *cancels)
    hooks.begin()


def start_session(hooks: HookList, loop: LoopState, session: Any, coord: Any) -> None:
    """The run's session is ready: show it as ``loop.session``, then ``after_create_session``."""
    loop.session = session
    hooks.after_create_session(session, coord)


def run_hooked_step(
    hooks: HookList,
    loop: LoopState,
    original_args: Any,
    session: Any,
    run: Callable[[list[Any]], StepResult],
) -> StepResult:
    """One step with ``before_run``/``after_run`` around it, as ``MonitoredSession`` does.

    ``run`` gets what each hook returned from ``before_run``. A step that found the data
    run out (``steps == 0``) has had its ``before_run`` but gets no ``after_run``. The
    step's logs become ``loop.batch_logs`` before any ``after_run``, and a
    ``run_context.request_stop()`` stops the loop.
    """
    run_context = SessionRunContext(original_args=original_args, session=session)
    result = run(hooks.before_run(run_context))
    if result.steps:
        loop.call_steps = result.steps
        if result.logs is not None:
            loop.batch_logs = python_logs(result.logs)
        hooks.after_run(run_context, result.hook_results, result.options, result.run_metadata)
    if run_context.stop_requested:
        loop.request_stop("a hook called run_context.request_stop()")
    return result


def run_loop(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    *,
    epochs: int,
    initial_epoch: int = 0,
    steps_per_epoch: int | None = None,
    steps_per_execution: int = 1,
    validation_freq: int = 1,
    validation_steps: int | None = None,
    data: RunInput | None = None,
    passes: Passes | None = None,
) -> dict[str, list[Any]]:
    """Run epochs of steps with hooks; return the history of epoch logs.

    The arguments are those the loop checked on entry (:func:`check_run_args`, and
    ``steps_per_epoch`` at its construction); they are not checked again here.

    When the runner measures its steps' input wait (``StepResult.input_wait``), each
    epoch's :class:`~tfr_hooks.input_report.InputStats` is shown to hooks as
    ``loop.input_stats`` from the end of its last step on, added to the history under
    :data:`~tfr_hooks.input_report.HISTORY_KEYS` (not to the logs hooks get), and the
    run's verdict is logged (see :mod:`tfr_hooks.input_report`).

    Features attach as hooks, and the engine takes no parameter for them: each call of
    the step (training or validation) is timed once and handed, as a
    :class:`~tfr_hooks.calls.Call`, to the epoch's clock and to every hook with an
    ``observe_call`` method (:mod:`tfr_hooks.calls`: ``steps_per_execution="auto"``'s
    tuner); after ``epoch_end``, the entries hooks wrote to ``loop.history_entries``
    join the history (:mod:`tfr_hooks.entries`: ``input/corrupt_records``,
    ``input/steps_per_execution``).

    Args:
        runner: Runs the steps and the validation steps.
        hooks: The hooks, in call order.
        loop: The state shown to hooks; reset here.
        epochs: Train until this epoch index (exclusive), like ``model.fit``.
        initial_epoch: The epoch to start from (for resuming).
        steps_per_epoch: Steps per epoch, or ``None`` to let the data decide.
        steps_per_execution: Steps the runner may run per call (hooks see each call
            once); a hook may change ``loop.steps_per_execution`` between calls.
        validation_freq: Validate after every this many epochs (as ``fit`` counts).
        validation_steps: Stop each validation pass after this many steps.
        data: What the loop knows of its training input (:class:`RunInput`), or
            ``None`` when it knows nothing.
        passes: The passes the loop's runners started over its data so far (kept by
            the loop across runs), or ``None`` to count this run's only.

    Returns:
        A dict from each log name to its list of per-epoch values, like Keras'
        ``History.history``.
    """
    passes = Passes() if passes is None else passes
    data = RunInput() if data is None else data
    stalls = StallPolicy(data.examples)
    observers = call_observers(hooks)
    loop.reset(
        epochs=epochs,
        initial_epoch=initial_epoch,
        steps_per_epoch=steps_per_epoch if steps_per_epoch is not None else data.steps,
        steps_per_execution=steps_per_execution,
    )
    history: dict[str, list[Any]] = {}
    report = InputReport(data.report)
    error: BaseException | None = None
    started = False
    try:
        # a signal's watcher may end the read of a step that cannot finish
        begin_run(hooks, loop, cancels=(runner.cancel,))
        runner.start()
        started = True
        passes.follow(runner.session)
        start_session(hooks, loop, runner.session, runner.coord)
        resume = choose_resume(runner, steps_per_epoch, data.position)  # once, for the run
        # a hook may move the start in begin/after_create_session (Keras' BackupAndRestore)
        for epoch in range(loop.initial_epoch, epochs):
            if loop.stop_requested:
                break
            logs, more = _run_epoch(
                runner, hooks, loop, epoch, steps_per_epoch, passes, stalls, resume, observers
            )
            if logs is None:
                break
            stats = loop.input_stats
            if stats is not None:
                report.epoch_end(stats)
            if (epoch + 1) % validation_freq == 0:  # as model.fit counts it
                val_logs = _validate(runner, hooks, loop, validation_steps, stalls, observers)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
            hooks.epoch_end(epoch, logs)
            for key, value in logs.items():  # keys hooks added (a callback's lr) too
                history.setdefault(key, []).append(python_value(value))
            if stats is not None:  # keys with a "/", which no metric name has
                for key, value in stats.history().items():
                    history.setdefault(key, []).append(value)
            for key, value in loop.history_entries.items():  # the features' own
                history.setdefault(key, []).append(value)
            if not more or loop.stop_requested:
                break
    except BaseException as exc:  # re-raised by end_run, after cleanup
        error = exc
    end_run(
        hooks,
        loop,
        runner.session,
        error,
        started=started,
        before=runner.finish,
        after=runner.close,
    )
    return history


def _run_epoch(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    epoch: int,
    steps_per_epoch: int | None,
    passes: Passes,
    stalls: StallPolicy,
    resume: Resume,
    observers: Sequence[CallObserver] = (),
) -> tuple[dict[str, Any] | None, bool]:
    """Run one epoch; return its logs (``None`` if it saw no step) and whether to go on.

    ``resume`` (chosen once for the run) puts the run's first epoch where the run resumes;
    the steps already run count, and only the rest are run.
    """
    first = epoch == loop.initial_epoch
    resume.begin_epoch(loop, passes, epoch)
    clock = _begin_epoch(runner, hooks, loop, epoch, steps_per_epoch, passes, first)
    done = loop.initial_step if first else 0  # as hooks left it by now
    length = resume.entered(loop, passes)
    end = _run_steps(runner, hooks, loop, length, stalls, [*observers, clock])
    if loop.epoch_steps == done:
        logger.warning(
            "Epoch %d got no data: the input ran out before its first step; training ends.",
            epoch,
        )
        return None, False
    loop.input_stats = clock.stats(epoch)
    if end.stall is not None:  # the pass ends here; it teaches nothing of its length
        stalls.stalled(end.stall, f"epoch {epoch}", loop.epoch_examples)
        stalls.check_restartable(end.stall, runner.reinitializable and steps_per_epoch is None)
        return dict(loop.batch_logs), True
    more = not end.exhausted or _goes_on_after_data_end(runner, loop, epoch, steps_per_epoch)
    return dict(loop.batch_logs), more


def _begin_epoch(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    epoch: int,
    steps_per_epoch: int | None,
    passes: Passes,
    first: bool,
) -> EpochClock:
    """Reset the epoch's state, start its data (a pass when it restarts) and its clock.

    Fires ``epoch_begin`` last; returns the clock of the epoch's steps.
    """
    loop.epoch = epoch
    loop.epoch_steps = loop.epoch_examples = 0
    loop.batch_logs = {}
    loop.input_stats = None
    loop.history_entries = {}
    # the run's first execution (tracing, warm-up) is left out when more follow
    clock = EpochClock(time.perf_counter, skip_first=loop.global_step == 0)
    restart = first or steps_per_epoch is None
    runner.start_epoch(restart_data=restart)
    if restart:  # a new pass of the data, and its first batch: time spent on the input
        passes.started += 1
        clock.restarted()
    hooks.epoch_begin(epoch)
    return clock


@dataclass(frozen=True)
class _EpochEnd:
    """How an epoch's steps ended: the data ran out, or its pass stalled, or neither."""

    exhausted: bool = False
    stall: str | None = None


def _run_steps(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    length: int | None,
    stalls: StallPolicy,
    observers: Sequence[CallObserver],
) -> _EpochEnd:
    """Run the epoch's steps up to ``length`` (``None``: no limit) or a stop request.

    Each call is handed to ``observers`` (the epoch's clock, the hooks that observe
    calls) before the loop counts its steps.

    Returns:
        Whether the data ran out before ``length``, or the pass stalled.
    """
    while length is None or loop.epoch_steps < length:
        left = stalls.examples_left(loop.epoch_examples)
        if runner.ran_out or left == 0:
            return _EpochEnd(exhausted=True)
        limit = loop.steps_per_execution
        if length is not None:
            limit = min(limit, length - loop.epoch_steps)
        step = functools.partial(runner.run_step, limit=limit)
        if left is not None:  # only after a stalled pass: a runner may not take it else
            step = functools.partial(runner.run_step, limit=limit, examples_left=left)
        started = time.perf_counter()
        result = run_hooked_step(hooks, loop, runner.run_args, runner.session, step)
        _observed(observers, started, result, limit, validation=False)
        loop.epoch_steps += result.steps
        loop.global_step += result.steps
        loop.epoch_examples += result.examples
        if result.stall is not None:
            return _EpochEnd(stall=result.stall)
        if result.exhausted and (length is None or loop.epoch_steps < length):
            return _EpochEnd(exhausted=True)
        if loop.stop_requested:
            break
    return _EpochEnd()


def _goes_on_after_data_end(
    runner: Runner, loop: LoopState, epoch: int, steps_per_epoch: int | None
) -> bool:
    """Whether training goes on after the data ran out in ``epoch`` (which had a step).

    Epochs counted in steps: the data ran out early, training ends with a warning. A
    one-shot source: training ends. A re-initializable one: the epoch ended at the data's
    end, and its steps are the epoch's length from now on.
    """
    if steps_per_epoch is not None:
        logger.warning(
            "The input ran out of data after %d steps of epoch %d (%d steps in all); "
            "expected %d steps per epoch for %d epochs. Training ends here.",
            loop.epoch_steps,
            epoch,
            loop.global_step,
            steps_per_epoch,
            loop.epochs,
        )
        return False
    if not runner.reinitializable:
        logger.info("One-shot input exhausted after %d steps; training ends.", loop.epoch_steps)
        return False
    if loop.steps_per_epoch != loop.epoch_steps:
        if loop.steps_per_epoch is not None:
            logger.info(
                "Epoch %d ran %d steps, not the %d expected up front (the dataset's "
                "cardinality); the loop counts %d from now on.",
                epoch,
                loop.epoch_steps,
                loop.steps_per_epoch,
                loop.epoch_steps,
            )
        loop.steps_per_epoch = loop.epoch_steps
    return True


def _observed(
    observers: Sequence[CallObserver],
    started: float,
    result: StepResult,
    limit: int,
    *,
    validation: bool,
) -> None:
    """Hand the call that ``started`` (a ``perf_counter`` reading) and gave ``result`` on."""
    call = Call(
        steps=result.steps,
        limit=limit,
        secs=time.perf_counter() - started,
        examples=result.examples,
        input_wait=result.input_wait,
        validation=validation,
    )
    for observer in observers:
        observer.observe_call(call)


def _validate(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    steps: int | None,
    stalls: StallPolicy,
    observers: Sequence[CallObserver] = (),
) -> dict[str, Any]:
    """Run the validation pass with its events; return its logs (unprefixed).

    Each call that ran steps is handed to ``observers`` (a hook may give validation
    calls a ``loop.steps_per_execution`` of their own, from ``validation_begin`` to
    ``validation_end``).
    """
    if not runner.start_validation():
        return {}
    hooks.validation_begin()
    logs: dict[str, Any] = {}
    step = 0
    while (steps is None or step < steps) and not runner.ran_out:
        limit = loop.steps_per_execution
        if steps is not None:
            limit = min(limit, steps - step)
        started = time.perf_counter()
        hooks.validation_batch_begin(step)
        result = runner.run_validation_step(limit)
        if result.stall is not None:
            stalls.stalled(result.stall, "the validation pass", 0, training=False)
            break
        if not result.steps:
            break
        logs = python_logs(result.logs or {})
        # like Keras' evaluate: the index of the execution's last batch (begin + spe - 1)
        hooks.validation_batch_end(step + loop.steps_per_execution - 1, logs)
        step += result.steps
        _observed(observers, started, result, limit, validation=True)
        if result.exhausted:
            break
    if step == 0:
        logger.warning("The validation data gave no batch; no val_ logs this epoch.")
    hooks.validation_end(logs)
    return logs


def end_run(
    hooks: HookList,
    loop: LoopState,
    session: Any,
    error: BaseException | None,
    *,
    started: bool = True,
    before: Callable[[], object] | None = None,
    after: Callable[[], object] | None = None,
) -> None:
    """The teardown every run shares; raises the error that ended the run, if any.

    Runs ``before``, the ``end`` of every hook that began (each one even when another
    raises), then ``after``. A hook whose ``begin`` raised, and those after it, get no
    ``end``. With ``started=False`` (the run failed before its session existed) only
    hooks that can end without one get ``end(None)``: :class:`~tfr_hooks.Hook`
    subclasses without ``requires_session``, not plain ``SessionRunHook`` instances (whose
    ``end`` would fail on ``None`` and hide the real error, as ``MonitoredSession``
    never calls it so). The run's own ``error`` wins and is set as ``loop.error`` before
    any ``end``; otherwise the first teardown error is raised; later ones are logged.
    The error raised is the clearer one a hook's ``translate_error`` offers, if any.

    Args:
        hooks: The run's hooks; ``hooks.begun`` are those to end.
        loop: The run's state.
        session: What the hooks' ``end`` gets once the run ``started``.
        error: The error that ended the run, or ``None``.
        started: Whether the session was created (the runner's ``start`` returned).
        before: Called before the hooks' ``end`` (the runner's ``finish``).
        after: Called after them (the runner's ``close``).
    """
    if error is not None:
        loop.error = error  # lets hooks' end() tell a failed run from a finished one
    calls = [before] if before is not None and started else []
    for hook in hooks.begun:
        if started:
            calls.append(functools.partial(hook.end, session))
        elif isinstance(hook, Hook) and not hook.requires_session:
            calls.append(functools.partial(hook.end, None))
    calls += [after] if after is not None else []
    end_error = call_all(calls)
    if error is not None and end_error is not None and end_error is not error:
        # the run's own error wins; a hook's end failing after it must not vanish
        logger.error(
            "Error in a hook's end, after the error that ended the run", exc_info=end_error
        )
    error = error or end_error
    if error is None:
        return
    better = hooks.translate_error(error)
    if better is not error:
        raise better from error
    raise error
