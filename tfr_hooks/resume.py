"""How a run enters its first epoch: a resume strategy, chosen once per run.

A run that starts at a later epoch, or at a step inside one (``loop.initial_epoch``,
``loop.initial_step``: a checkpoint said where the interrupted run was), puts its
training data there in one of three ways:

* :class:`Seek`: the data can start a pass anywhere (a
  :class:`~tfr_hooks.seeking.Seekable` position, see :func:`~tfr_hooks.seeking.entry`):
  the first pass starts where the interrupted run was, with no replay;
* :class:`Skip`: the runner replays the passes of the earlier epochs (so that seeded
  shuffles draw what they drew), then passes over the batches already trained on
  (``Runner.skip_batches``) and runs the epoch to the data's end;
* :class:`Replay`: the earlier passes are replayed as for :class:`Skip` (when the data
  decides the epoch), and the epoch runs only the steps left, on data started afresh.

:func:`choose_resume` chooses once, when the run's runner has started; the engine
(:mod:`tfr_hooks.engine`) then calls the same two transitions for every epoch without
knowing which strategy it holds: :meth:`Resume.begin_epoch` before the epoch's data
starts, and :meth:`Resume.entered` after ``epoch_begin`` (a hook may have moved
``loop.initial_step`` by then). Only the run's first epoch is entered; later epochs
start at their first step. What a read's position means for the entry (a bucketed
read's pool, a batch split into several steps) stays with the position and
:mod:`tfr_hooks.seeking`.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from tfr_hooks.hooks import LoopState
from tfr_hooks.runners import Runner
from tfr_hooks.seeking import Seekable, entry, note_worker_count
from tfr_hooks.task import current_task

__all__ = ["Passes", "Phase", "Resume", "Seek", "Skip", "Replay", "choose_resume"]

logger = logging.getLogger(__name__)


@dataclass
class Passes:
    """The passes over a loop's training data started where the data keeps its state.

    A loop keeps one across its runs and hands it to :func:`~tfr_hooks.engine.run_loop`,
    which counts every pass the runner starts (each epoch that restarts the data, each
    replayed pass). The count holds for ``session``: the runner's ``session`` once it
    started (a graph's random ops keep their state in it), or ``None`` for a runner
    without one (a ``tf.data`` pipeline keeps it in the dataset). A run whose runner has
    another session starts again from 0.

    Attributes:
        started: The passes started so far.
        session: The session they were started in.
    """

    started: int = 0
    session: Any = None

    def follow(self, session: Any) -> None:
        """Count the passes of ``session`` from now on: from 0 if it is another one."""
        if session is not self.session:
            self.started, self.session = 0, session


class Phase(enum.Enum):
    """Where a strategy is in its run."""

    #: before the run's first epoch: its data is not yet put where the run resumes
    START = "start"
    #: the first epoch's data is put there (begin_epoch ran); epoch_begin comes next
    BEGUN = "begun"
    #: the first epoch was entered: every later epoch starts at its first step
    RUNNING = "running"


class Resume:
    """A run's resume strategy: one method per transition the engine calls.

    Args:
        runner: The run's runner (started).
        steps_per_epoch: The loop's ``steps_per_epoch`` (``None``: the data decides).
    """

    #: the strategy's name, as logs and tests say it
    kind = ""

    def __init__(self, runner: Runner, steps_per_epoch: int | None) -> None:
        self.runner, self.steps_per_epoch = runner, steps_per_epoch
        self.phase = Phase.START
        self._sought = 0

    def begin_epoch(self, loop: LoopState, passes: Passes, epoch: int) -> None:
        """Before ``epoch``'s data starts: on the run's first, put the data where it resumes.

        Logs a resume at a step saved on another worker count
        (:func:`~tfr_hooks.seeking.note_worker_count`).
        """
        if self.phase is not Phase.START:
            return
        self.phase, self._sought = Phase.BEGUN, loop.initial_step
        if self._sought:
            note_worker_count(
                loop.initial_workers, self._workers(), self._position(), epoch, self._sought
            )
        self._put(passes, epoch, self._sought, loop.initial_input)
        position = self._position()
        loop.input_state = None if position is None else position.input_state()

    def entered(self, loop: LoopState, passes: Passes) -> int | None:
        """After ``epoch_begin``: put the epoch at its step; return the step it ends at.

        ``None``: the data's end ends the epoch. Sets ``loop.epoch_steps`` (and the
        examples already seen, when known) for the steps the epoch starts after.
        """
        if self.phase is not Phase.BEGUN:
            return self.steps_per_epoch
        self.phase = Phase.RUNNING
        return self._enter(loop, passes, loop.initial_step)

    def _workers(self) -> int:
        """The workers reading the data now."""
        return current_task().num_workers

    def _position(self) -> Seekable | None:
        """The position the run seeks, if any."""
        return None

    def _put(self, passes: Passes, epoch: int, done: int, state: bytes | None) -> None:
        """Start the first epoch's data where the run resumes: replay the earlier passes.

        ``state``: the input state saved with the position (``loop.initial_input``),
        which only a seek reads.
        """
        if state is not None:
            logger.warning(
                "The checkpoint holds an input state (a mixture's weights) that a run "
                "which does not seek cannot read (steps_per_epoch, or a read without a "
                "position): the input starts afresh at the reader's weights."
            )
        if self.steps_per_epoch is None:
            _replay_passes(self.runner, passes, epoch)

    def _enter(self, loop: LoopState, passes: Passes, done: int) -> int | None:
        """Put the first epoch at step ``done`` (as hooks left it); return its length."""
        steps = self.steps_per_epoch
        loop.epoch_steps = done
        return steps if steps is not None or not done else loop.steps_per_epoch


class Replay(Resume):
    """Replay the earlier epochs' passes (when the data decides the epoch), run the rest.

    The resumed epoch runs only the steps left, on data started afresh: for a runner
    that cannot skip batches, or epochs counted in steps (``steps_per_epoch``), whose
    data is started once.
    """

    kind = "replay"


class Skip(Resume):
    """Replay the earlier epochs' passes, then skip the batches already trained on.

    The resumed epoch runs to the data's end, so that it has the steps (and the
    batches) of an uninterrupted one, whatever its length was thought to be.
    """

    kind = "skip"

    def _enter(self, loop: LoopState, passes: Passes, done: int) -> int | None:
        if done:
            skipped, examples = self.runner.skip_batches(done)
            logger.info("Skipped %d batches (%d examples) of the resumed epoch", skipped, examples)
            if skipped < done:
                logger.warning(
                    "Epoch %d resumes at step %d, but its data holds only %d batches.",
                    loop.epoch,
                    done,
                    skipped,
                )
            loop.epoch_examples = examples  # seen before the interruption
        loop.epoch_steps = done
        return None


class Seek(Resume):
    """Start the first pass where the interrupted run was: no replay.

    The pass is entered at :func:`~tfr_hooks.seeking.entry`'s records, and the steps it
    leaves (inside a batch split into steps, or a bucketed read's pool) are skipped.

    Args:
        runner: The run's runner (started).
        position: Where the training data's next pass starts.
    """

    kind = "seek"

    def __init__(self, runner: Runner, position: Seekable) -> None:
        super().__init__(runner, None)
        self.position = position

    def _workers(self) -> int:
        return self.position.workers

    def _position(self) -> Seekable | None:
        return self.position

    def _put(self, passes: Passes, epoch: int, done: int, state: bytes | None) -> None:
        # numbered as a replay would number it (the passes this loop already started
        # count: a second run of one loop goes on with new passes)
        number = max(epoch, passes.started)
        records, _ = entry(self.position, done)
        self.position.seek(number, records, state=state)
        passes.started = number
        if number or records:
            logger.info(
                "Resumed the input at epoch %d, record %d of its sequence (a seek, no replay)",
                number,
                records,
            )

    def _enter(self, loop: LoopState, passes: Passes, done: int) -> int | None:
        position = self.position
        records, skip = entry(position, done)
        if done != self._sought:  # a hook moved the start in epoch_begin: seek there instead
            position.seek(passes.started - 1, records, state=loop.initial_input)
            loop.input_state = position.input_state()
            self.runner.start_epoch(restart_data=True)
        if skip and self.runner.skips_batches:  # inside a split batch, or a bucketed pool
            self.runner.skip_batches(skip)
        loop.epoch_examples = done * position.batch_size // position.split
        loop.epoch_steps = done
        return None  # the data's end ends the epoch


def choose_resume(runner: Runner, steps_per_epoch: int | None, position: Seekable | None) -> Resume:
    """The run's strategy: seek when the data can be entered at the step, else skip or replay.

    Args:
        runner: The run's runner (started).
        steps_per_epoch: The loop's ``steps_per_epoch`` (``None``: the data decides).
        position: Where the training data's next pass starts, when it can start
            anywhere; a pass entered at a pool's start (a bucketed read) seeks only on a
            runner that skips the pool's batches trained on.
    """
    if steps_per_epoch is not None:  # epochs counted in steps: the data starts once
        return Replay(runner, steps_per_epoch)
    if position is not None and (position.grain == 1 or runner.skips_batches):
        return Seek(runner, position)
    return Skip(runner, None) if runner.skips_batches else Replay(runner, None)


def _replay_passes(runner: Runner, passes: Passes, epoch: int) -> None:
    """Start (and leave) a pass of the data for each epoch before ``epoch`` not started."""
    if not runner.replays_passes:
        return
    missing = epoch - passes.started
    for _ in range(missing):
        runner.start_pass()
        passes.started += 1
    if missing > 0:
        logger.info("Started %d passes over the data to resume at epoch %d", missing, epoch)
