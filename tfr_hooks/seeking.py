"""Where a resumed pass is entered: the input a loop can seek, and the records to seek to.

A loop's training input that can start a pass anywhere (a reader's
:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`) is a :class:`Seekable`.
A resumed run whose strategy seeks (:class:`tfr_hooks.resume.Seek`) starts its first
epoch at :func:`entry`'s records and skips the steps it leaves: the batches of a bucketed read's
pool already trained on (a pool's batches are cut from the whole pool, so its pass is
entered at the pool's start).

A position counts the records of one global sequence, the same for any number of
workers: a step trains one global batch of it, each worker its part (under
``MultiWorkerMirroredStrategy`` the strategy splits each global batch among the
workers). So a run saved with N workers resumes with M at the same place
(:func:`note_worker_count` says so; input that cannot seek replays, and then it says
that the examples of the resumed epoch move).
"""

from __future__ import annotations

import logging
from typing import Protocol

__all__ = ["Seekable", "entry", "note_worker_count"]

logger = logging.getLogger(__name__)


class Seekable(Protocol):
    """Input whose next pass can start at any epoch and record.

    See :class:`~tfr_hooks.engine.RunInput`'s ``position`` and :mod:`tfr_hooks.resume`.
    """

    #: The examples of a global batch (a step of all workers).
    batch_size: int
    #: The workers of the cluster reading it now (each takes its part of every batch).
    workers: int
    #: Steps a batch makes (1: a step is a global batch).
    split: int
    #: The batches a pass can be entered at a multiple of (a bucketed read's pool: its
    #: batches are cut from the whole pool); the steps past it are skipped.
    grain: int

    def seek(self, epoch: int, records: int, *, state: bytes | None = None) -> None:
        """Start the next pass as epoch ``epoch``, at record ``records`` of its sequence.

        ``state``: the :meth:`input_state` a checkpoint saved with that position (a
        mixture's stretches of weights), or ``None``.
        """

    def input_state(self) -> bytes | None:
        """What a checkpoint saves beside the loop's position (``None``: nothing)."""


def entry(position: Seekable, done: int) -> tuple[int, int]:
    """Where a pass resumed at step ``done`` is entered: its records, and the steps after.

    The records are whole global batches, a multiple of the position's ``grain`` of
    batches (a bucketed read enters a pool at its start); the steps are the rest,
    skipped (the batches of the pool trained on).
    """
    batches = done // position.split // position.grain * position.grain
    return batches * position.batch_size, done - batches * position.split


def note_worker_count(
    saved: int | None, now: int, position: Seekable | None, epoch: int, done: int
) -> None:
    """Log a resume at step ``done`` of ``epoch`` onto another worker count than ``saved``.

    With a position (one global sequence), the resume is exact: said at INFO level.
    Without one, the loop replays the epoch's data on ``now`` workers and skips ``done``
    steps, which are other examples than the ``saved`` workers trained: a WARNING says
    so (some examples of the epoch are trained twice, others not at all).
    """
    if not saved or saved == now or not done:
        return
    if position is not None:
        logger.info(
            "Resuming epoch %d at step %d on %d worker(s), saved on %d: the position "
            "counts global batches of one sequence, the same for any worker count (each "
            "worker takes its part of every global batch).",
            epoch,
            done,
            now,
            saved,
        )
        return
    logger.warning(
        "Resuming epoch %d at step %d on %d worker(s), saved on %d: this input cannot "
        "seek (it replays), and its first %d steps on %d worker(s) are not the examples "
        "the %d worker(s) trained on: some examples of epoch %d are trained twice and "
        "others not at all. Resume on %d worker(s), or read with shuffle='global' or "
        "unshuffled through tfrecord.source(...) to resume exactly on any count.",
        epoch,
        done,
        now,
        saved,
        done,
        now,
        saved,
        epoch,
        saved,
    )
