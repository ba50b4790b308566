"""The loop over epochs and steps, shared by every loop in the package.

The engine knows no session, no ``tf.function``, no Keras and no TFRecord. A *runner*
(:class:`~tfr_hooks.SessionLoop`'s or :class:`~tfr_hooks.FunctionLoop`'s) runs one step
at a time and says when the data ran out; the engine turns that into epochs, validation,
stop requests, history and cleanup, calling the hooks at each event.

Epoch boundaries:

* ``steps_per_epoch=None`` and a re-initializable source: the data running out ends the
  epoch (a final partial batch included); the runner restarts the data for the next one.
  The number of steps is learned from the first epoch and shown to hooks.
* ``steps_per_epoch=None`` and a one-shot source: the data running out closes the current
  epoch and ends training.
* ``steps_per_epoch=N``: epochs are counted in steps; the data is started once. Data
  running out early closes the epoch and ends training with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from tfr_hooks.hooks import HookList, LoopState

__all__ = ["Runner", "StepResult", "run_loop", "check_epochs", "check_positive", "check_steps"]

logger = logging.getLogger(__name__)


@dataclass
class StepResult:
    """What one call of a runner's step produced.

    Attributes:
        steps: Training steps run by the call (``steps_per_execution`` or fewer).
        examples: Examples consumed by those steps.
        logs: Running means of the fetched values over the epoch so far.
        exhausted: The data ran out during this call (after ``steps`` steps, maybe 0).
    """

    steps: int
    examples: int
    logs: dict[str, float] = field(default_factory=dict)
    exhausted: bool = False


class Runner(Protocol):
    """The part of a loop that knows how a step is run."""

    #: Whether :meth:`start_epoch` can restart the data (else the source is one-shot).
    reinitializable: bool

    def start(self, loop: LoopState, hooks: HookList) -> None:
        """Prepare to run (create the session, call ``after_create_session``)."""

    def start_epoch(self, epoch: int, restart_data: bool) -> None:
        """Reset the epoch's running means, and restart the data when asked."""

    def step(self, loop: LoopState, hooks: HookList) -> StepResult:
        """Run one execution, calling ``before_run``/``after_run`` around it."""

    def evaluate(self, hooks: HookList) -> dict[str, float]:
        """Run the validation pass; return its means (unprefixed), or ``{}`` if none."""

    def finish(self, hooks: HookList) -> BaseException | None:
        """Call every hook's ``end`` and release resources; return the first error."""


def check_positive(value: object, name: str) -> None:
    """Raise a clear ``ValueError`` unless ``value`` is a positive integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"Expected `{name}` to be a positive integer. Received: {name}={value!r}")


def check_epochs(epochs: object, initial_epoch: object) -> None:
    """Raise a clear error for bad ``epochs``/``initial_epoch`` arguments."""
    check_positive(epochs, "epochs")
    if isinstance(initial_epoch, bool) or not isinstance(initial_epoch, int) or initial_epoch < 0:
        raise ValueError(
            "Expected `initial_epoch` to be a non-negative integer. "
            f"Received: initial_epoch={initial_epoch!r}"
        )


def check_steps(value: object, name: str) -> None:
    """Raise a clear error unless ``value`` is ``None`` or a positive integer."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"Expected `{name}` to be a positive integer or None. Received: {name}={value!r}"
        )


def run_loop(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    *,
    epochs: int,
    initial_epoch: int = 0,
    steps_per_epoch: int | None = None,
    validation_freq: int = 1,
) -> dict[str, list[float]]:
    """Run epochs of steps with hooks; return the history of epoch logs.

    Args:
        runner: Runs the steps and the validation pass.
        hooks: The hooks, in call order.
        loop: The state shown to hooks; reset here.
        epochs: Train until this epoch index (exclusive), like ``model.fit``.
        initial_epoch: The epoch to start from (for resuming).
        steps_per_epoch: Steps per epoch, or ``None`` to let the data decide.
        validation_freq: Run the validation pass every this many epochs.

    Returns:
        A dict from each log name to its list of per-epoch values, like Keras'
        ``History.history``.
    """
    check_epochs(epochs, initial_epoch)
    check_steps(steps_per_epoch, "steps_per_epoch")
    loop.__init__()  # type: ignore[misc]  # one state object, fresh for every run
    loop.epochs, loop.initial_epoch, loop.epoch = epochs, initial_epoch, initial_epoch
    loop.steps_per_epoch = steps_per_epoch
    history: dict[str, list[float]] = {}
    hooks.set_loop(loop)

    error: BaseException | None = None
    try:
        hooks.begin()
        runner.start(loop, hooks)
        # a hook may move the start in begin/after_create_session (Keras' BackupAndRestore)
        for epoch in range(loop.initial_epoch, epochs):
            if loop.stop_requested:
                break
            logs, more = _run_epoch(runner, hooks, loop, epoch, steps_per_epoch)
            if logs is None:
                break
            if (epoch + 1) % validation_freq == 0:  # as model.fit counts it
                val_logs = runner.evaluate(hooks)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
            hooks.epoch_end(epoch, logs)
            for key, value in logs.items():
                history.setdefault(key, []).append(value)
            if not more:
                break
    except BaseException as exc:  # re-raised below, after cleanup
        error = exc
        loop.error = exc  # lets hooks' end() tell a failed run from a finished one
    finally:
        end_error = runner.finish(hooks)
        if error is not None and end_error is not None and end_error is not error:
            # the run's own error wins; a hook's end failing after it must not vanish
            logger.error(
                "Error in a hook's end, after the error that ended the run", exc_info=end_error
            )
        error = error or end_error
    if error is not None:
        better = hooks.translate_error(error)
        if better is not error:
            raise better from error
        raise error
    return history


def _run_epoch(
    runner: Runner,
    hooks: HookList,
    loop: LoopState,
    epoch: int,
    steps_per_epoch: int | None,
) -> tuple[dict[str, float] | None, bool]:
    """Run one epoch; return its logs (``None`` if it saw no step) and whether to go on."""
    loop.epoch = epoch
    loop.epoch_steps = loop.epoch_examples = 0
    loop.batch_logs = {}
    first_of_run = epoch == loop.initial_epoch
    runner.start_epoch(epoch, restart_data=first_of_run or steps_per_epoch is None)
    hooks.epoch_begin(epoch)
    exhausted = False
    while steps_per_epoch is None or loop.epoch_steps < steps_per_epoch:
        result = runner.step(loop, hooks)
        loop.epoch_steps += result.steps
        loop.global_step += result.steps
        loop.epoch_examples += result.examples
        if result.steps:
            loop.batch_logs = dict(result.logs)
        if result.exhausted:
            exhausted = True
            break
        if loop.stop_requested:
            break
    if loop.epoch_steps == 0:
        logger.warning(
            "Epoch %d got no data: the input ran out before its first step; training ends.",
            epoch,
        )
        return None, False
    more = not loop.stop_requested
    if exhausted:
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
            more = False
        elif not runner.reinitializable:
            logger.info("One-shot input exhausted after %d steps; training ends.", loop.epoch_steps)
            more = False
        elif loop.steps_per_epoch is None:
            loop.steps_per_epoch = loop.epoch_steps
    return dict(loop.batch_logs), more
