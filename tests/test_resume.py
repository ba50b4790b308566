"""The resume strategy, chosen once per run: a table of inputs and what each transition does.

:func:`~tfr_hooks.resume.choose_resume` picks seek, skip or replay from the runner and the
data's position; :meth:`~tfr_hooks.resume.Resume.begin_epoch` (before the epoch's data
starts) and :meth:`~tfr_hooks.resume.Resume.entered` (after ``epoch_begin``) are the
engine's only calls. The runner and the position here record the calls they get (a
position is a plain protocol: no TensorFlow is involved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tfr_hooks.hooks import LoopState
from tfr_hooks.resume import Passes, Phase, choose_resume


@dataclass
class Runner:
    """The runner's primitives a strategy uses, recorded."""

    skips_batches: bool = True
    replays_passes: bool = True
    holds: int = 100  # the batches its data holds
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def start_pass(self) -> None:
        self.calls.append(("start_pass", None))

    def start_epoch(self, restart_data: bool) -> None:
        self.calls.append(("start_epoch", restart_data))

    def skip_batches(self, count: int) -> tuple[int, int]:
        skipped = min(count, self.holds)
        self.calls.append(("skip_batches", count))
        return skipped, skipped * 4


@dataclass
class Position:
    """A :class:`~tfr_hooks.seeking.Seekable`, its seeks recorded."""

    batch_size: int = 4
    workers: int = 1
    split: int = 1
    grain: int = 1
    seeks: list[tuple[int, int]] = field(default_factory=list)

    def seek(self, epoch: int, records: int, *, state: bytes | None = None) -> None:
        self.seeks.append((epoch, records))

    def input_state(self) -> bytes | None:
        return None


@dataclass(frozen=True)
class Row:
    """One run's first epoch: inputs, then what the strategy did."""

    # inputs
    position: dict[str, int] | None
    skips: bool
    steps_per_epoch: int | None
    epoch: int
    step: int
    moved_to: int | None = None  # a hook moves loop.initial_step in epoch_begin
    started: int = 0  # passes the loop started before this run
    # outputs
    kind: str = ""
    seeks: tuple[tuple[int, int], ...] = ()
    calls: tuple[tuple[str, Any], ...] = ()
    length: int | None = None
    epoch_steps: int = 0
    epoch_examples: int = 0
    passes: int = 0


TABLE = [
    # a position, a whole batch a step: one seek to the step's records, no replay
    Row(
        {},
        True,
        None,
        2,
        6,
        kind="seek",
        seeks=((2, 24),),
        epoch_steps=6,
        epoch_examples=24,
        passes=3,
    ),
    # a fresh run seeks too (to epoch 0, record 0): every pass is the position's
    Row({}, True, None, 0, 0, kind="seek", seeks=((0, 0),), passes=1),
    # a second run of one loop: its passes go on from those started
    Row({}, True, None, 1, 0, started=3, kind="seek", seeks=((3, 0),), passes=4),
    # a batch split into 2 steps: entered at the batch, the step inside it skipped
    Row(
        {"split": 2},
        True,
        None,
        0,
        5,
        kind="seek",
        seeks=((0, 8),),
        calls=(("skip_batches", 1),),
        epoch_steps=5,
        epoch_examples=10,
        passes=1,
    ),
    # a bucketed pool of 3 batches: entered at the pool's start, its batches skipped
    Row(
        {"grain": 3},
        True,
        None,
        1,
        7,
        kind="seek",
        seeks=((1, 24),),
        calls=(("skip_batches", 1),),
        epoch_steps=7,
        epoch_examples=28,
        passes=2,
    ),
    # a pool on a runner that cannot skip: replay instead (and the steps left run)
    Row(
        {"grain": 3},
        False,
        None,
        1,
        7,
        kind="replay",
        calls=(("start_pass", None),),
        length=50,
        epoch_steps=7,
        passes=2,
    ),
    # a hook moves the step in epoch_begin: seek there, and restart the pass
    Row(
        {},
        True,
        None,
        1,
        2,
        moved_to=5,
        kind="seek",
        seeks=((1, 8), (1, 20)),
        calls=(("start_epoch", True),),
        epoch_steps=5,
        epoch_examples=20,
        passes=2,
    ),
    # no position, a runner that skips: replay the earlier passes, skip the trained batches
    Row(
        None,
        True,
        None,
        2,
        3,
        kind="skip",
        calls=(("start_pass", None), ("start_pass", None), ("skip_batches", 3)),
        epoch_steps=3,
        epoch_examples=12,
        passes=3,
    ),
    # the data holds fewer batches than the step: what it holds is skipped
    Row(
        None,
        True,
        None,
        0,
        200,
        kind="skip",
        calls=(("skip_batches", 200),),
        epoch_steps=200,
        epoch_examples=400,
        passes=1,
    ),
    # no position, no skip: replay the passes; the epoch runs the steps left of its length
    Row(
        None,
        False,
        None,
        1,
        4,
        kind="replay",
        calls=(("start_pass", None),),
        length=50,
        epoch_steps=4,
        passes=2,
    ),
    # epochs counted in steps: the data started once, neither replayed nor sought
    Row({}, True, 10, 2, 4, kind="replay", length=10, epoch_steps=4, passes=1),
    Row(None, True, 10, 2, 0, kind="replay", length=10, passes=1),
]


@pytest.mark.parametrize("row", TABLE, ids=lambda row: f"{row.kind}-{row.position}-{row.step}")
def test_the_first_epoch_is_entered_as_the_strategy_says(row: Row) -> None:
    runner = Runner(skips_batches=row.skips)
    position = None if row.position is None else Position(**row.position)
    loop = LoopState()
    loop.initial_epoch, loop.initial_step, loop.steps_per_epoch = row.epoch, row.step, 50
    passes = Passes(started=row.started)
    resume = choose_resume(runner, row.steps_per_epoch, position)  # type: ignore[arg-type]
    assert resume.kind == row.kind and resume.phase is Phase.START
    resume.begin_epoch(loop, passes, row.epoch)
    assert resume.phase is Phase.BEGUN
    passes.started += 1  # the engine then starts the epoch's pass, and counts it
    if row.moved_to is not None:  # as a hook's epoch_begin would (Keras' BackupAndRestore)
        loop.initial_step = row.moved_to
    length = resume.entered(loop, passes)
    assert resume.phase is Phase.RUNNING
    assert (position.seeks if position else []) == list(row.seeks)
    assert runner.calls == list(row.calls)
    assert length == row.length
    assert (loop.epoch_steps, loop.epoch_examples) == (row.epoch_steps, row.epoch_examples)
    assert passes.started == row.passes


@pytest.mark.parametrize("row", TABLE[:1] + TABLE[7:8] + TABLE[-2:-1], ids=lambda row: row.kind)
def test_later_epochs_start_at_their_first_step(row: Row) -> None:
    """Only the run's first epoch is entered: later ones get the loop's steps, untouched."""
    runner = Runner(skips_batches=row.skips)
    position = None if row.position is None else Position(**row.position)
    loop = LoopState()
    loop.initial_step = row.step
    resume = choose_resume(runner, row.steps_per_epoch, position)  # type: ignore[arg-type]
    passes = Passes()
    resume.begin_epoch(loop, passes, row.epoch)
    resume.entered(loop, passes)
    runner.calls.clear()
    seeks = list(position.seeks) if position else []
    loop.epoch_steps = loop.epoch_examples = 0
    resume.begin_epoch(loop, passes, row.epoch + 1)
    assert resume.entered(loop, passes) == row.steps_per_epoch
    assert runner.calls == [] and (position.seeks if position else []) == seeks
    assert (loop.epoch_steps, loop.epoch_examples) == (0, 0)


def test_a_runner_that_replays_no_pass_starts_none() -> None:
    """A queue stream (``replays_passes=False``): the earlier passes are not started."""
    runner = Runner(skips_batches=False, replays_passes=False)
    loop = LoopState()
    loop.initial_epoch, loop.initial_step = 3, 0
    passes = Passes()
    resume = choose_resume(runner, None, None)  # type: ignore[arg-type]
    resume.begin_epoch(loop, passes, 3)
    assert resume.entered(loop, passes) is None
    assert runner.calls == [] and passes.started == 0


def test_the_engine_knows_no_reader_detail() -> None:
    """engine.py names no pool grain and no multi-worker split: the strategy does."""
    engine = (Path(__file__).resolve().parents[1] / "tfr_hooks" / "engine.py").read_text()
    assert not re.findall(r"grain|split", engine)
