"""What the engine asks of a loop's runner, and what a step gives back.

A runner (:class:`~tfr_hooks.SessionLoop`'s, :class:`~tfr_hooks.FunctionLoop`'s) knows
how a step is run and fires no hook event: the engine (:mod:`tfr_hooks.engine`) drives
it through the :class:`Runner` protocol and reads each step's :class:`StepResult`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Runner", "StepResult"]


@dataclass
class StepResult:
    """What one step of a runner produced.

    Attributes:
        steps: Steps run (up to the ``limit`` asked for; 0 when the data had run out).
        examples: Examples consumed by those steps.
        logs: The step's logs as the runner has them (numpy or Python values), or
            ``None`` for a step that keeps no logs (a ``hooked_session`` run).
        exhausted: The data ran out during this step (after ``steps`` steps, maybe 0).
        results: The results of the caller's own fetches (a ``hooked_session`` run).
        hook_results: Each hook's results for what it asked in ``before_run``.
        options: The ``RunOptions`` the step ran with, for ``after_run``.
        run_metadata: The step's ``RunMetadata``, for ``after_run``.
        input_wait: Seconds the steps waited for their input, or ``None`` when the
            runner does not measure it (see :mod:`tfr_hooks.input_report`).
        stall: Why the pass stalled, when it did: its read waited its bound while the
            input is alive (a tf.data service worker lost mid-epoch, whose share of the
            pass TensorFlow never ends). The engine decides what follows (see
            :class:`StallPolicy`); ``None`` for a step that did not stall.
    """

    steps: int = 0
    examples: int = 0
    logs: Mapping[str, Any] | None = None
    exhausted: bool = False
    results: Any = None
    hook_results: Sequence[Any] | None = None
    options: Any = None
    run_metadata: Any = None
    input_wait: float | None = None
    stall: str | None = None


class Runner(Protocol):
    """The part of a loop that knows how a step is run; it fires no hook event."""

    #: Whether :meth:`start_epoch` can restart the data (else the source is one-shot).
    reinitializable: bool
    #: What ``run_context.original_args`` shows hooks (the train op's ``SessionRunArgs``).
    run_args: Any
    #: The ``tf.compat.v1.Session`` steps run in (from :meth:`start` on), or ``None``.
    session: Any
    #: The ``Coordinator`` hooks get in ``after_create_session``, or ``None``.
    coord: Any
    #: Whether the runner already knows the current data (the training data, or during a
    #: validation pass the validation data) has no further batch; no step is then tried.
    ran_out: bool
    #: Whether :meth:`skip_batches` passes over a resumed epoch's trained batches exactly
    #: (the data's order is that of the interrupted run); else the resumed epoch runs only
    #: the steps left, on data started afresh.
    skips_batches: bool
    #: Whether :meth:`start_pass` starts a pass of the training data (a source that the
    #: runner restarts); else the earlier epochs' passes of a resumed run are not replayed
    #: (a queue stream, data without initializers).
    replays_passes: bool

    def start(self) -> None:
        """Prepare to run: create the session (after the hooks' ``begin``)."""

    def start_epoch(self, restart_data: bool) -> None:
        """Reset the epoch's running means, and restart the data when asked."""

    def start_pass(self) -> None:
        """Start a pass of the training data and leave it, without a step.

        The engine calls it, when :attr:`replays_passes`, at the start of a run that
        begins at a later epoch: once for each earlier epoch whose pass was not started
        yet (see :class:`~tfr_hooks.resume.Passes`), so that a seeded shuffle, which draws
        a new order for every pass started, gives the run's first epoch the order it had in an
        uninterrupted run. It should cost the pass's start (an initialization, maybe its
        first batch), not an epoch of input.
        """

    def skip_batches(self, count: int) -> tuple[int, int]:
        """Pass over the next ``count`` training batches without a step; log nothing.

        Called only when :attr:`skips_batches`, right after :meth:`start_epoch`, at the
        start of an epoch resumed at step ``count``.

        Returns:
            The batches skipped (fewer than ``count`` if the data ran out) and their
            examples.
        """

    def run_step(
        self, hook_args: Sequence[Any], limit: int, examples_left: int | None = None
    ) -> StepResult:
        """Run up to ``limit`` training steps, with what the hooks asked for merged in.

        With ``examples_left`` (given only after a stalled pass, see
        :class:`StallPolicy`), fetch no batch once the steps took that many examples:
        the pass ends there (``exhausted``).
        """

    def cancel(self) -> bool:
        """End the read of the step under way, from another thread (a signal's watcher).

        The step then fails (``CancelledError``, or the session's error) instead of
        waiting for a batch that may never come.

        Returns:
            Whether a step was under way to cancel.
        """

    def start_validation(self) -> bool:
        """Restart the validation data and its means; ``False`` when there is none."""

    def run_validation_step(self, limit: int) -> StepResult:
        """Run up to ``limit`` validation steps; ``steps=0`` when the data ran out."""

    def finish(self) -> None:
        """End-of-training work before the hooks' ``end`` (``fit``'s weight finalizing)."""

    def close(self) -> None:
        """Release resources, after the hooks' ``end``."""
