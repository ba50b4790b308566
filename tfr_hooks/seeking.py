"""Where a resumed pass is entered: the input a loop can seek, and the records to seek to.

A loop's training input that can start a pass anywhere (a reader's
:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`) is a :class:`Seekable`.
The engine (:mod:`tfr_hooks.engine`) seeks the first epoch of a resumed run to
:func:`entry`'s records and skips the steps it leaves: those inside a batch that a
multi-worker strategy split among its replicas, and the batches of a bucketed read's
pool already trained on (a pool's batches are cut from the whole pool, so its pass is
entered at the pool's start).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Seekable", "entry"]


class Seekable(Protocol):
    """Input whose next pass can start at any epoch and record.

    See :class:`~tfr_hooks.engine.RunInput`'s ``position``.
    """

    #: The examples of a batch of this worker's share.
    batch_size: int
    #: Workers sharing an epoch (each reads its own share).
    workers: int
    #: Steps a batch makes (a multi-worker strategy splits it among the replicas).
    split: int
    #: The batches a pass can be entered at a multiple of (a bucketed read's pool: its
    #: batches are cut from the whole pool); the engine skips the steps past it.
    grain: int

    def seek(self, epoch: int, records: int) -> None:
        """Start the next pass as epoch ``epoch``, at this worker's record ``records``."""


def entry(position: Seekable, done: int) -> tuple[int, int]:
    """Where a pass resumed at step ``done`` is entered: its records, and the steps after.

    The records are whole batches of this worker's share, a multiple of the position's
    ``grain`` of batches (a bucketed read enters a pool at its start); the steps are the
    rest, skipped (those inside a batch a multi-worker strategy split, or the batches of
    the pool trained on).
    """
    batches = done // position.split // position.grain * position.grain
    return batches * position.batch_size, done - batches * position.split
