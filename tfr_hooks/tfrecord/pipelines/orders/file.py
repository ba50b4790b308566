"""File order (no shuffle): the files' records as stored, interleaved a record at a time.

``reads`` files are interleaved one record at a time
(:func:`~tfr_hooks.tfrecord.pipelines.passes.record_passes` without a buffer). Its order
is fixed by the files' record counts, so a pass is entered at a record by arithmetic
(:func:`~tfr_hooks.tfrecord.pipelines.seek.stream_from_position`): uncompressed files of
a format that seeks, read deterministically.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from tfr_hooks.task import current_task
from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.passes import record_passes
from tfr_hooks.tfrecord.pipelines.seek import stream_from_position

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind
    from tfr_hooks.tfrecord.pipelines.plan import Plan
    from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = ["FileOrder"]


class FileOrder(Order):
    """The records in file order (``shuffle`` off)."""

    name = "file"
    held = True

    @property
    def seed(self) -> int | None:
        """Nothing is drawn: ``None``."""
        return None

    def enters(self, plan: Plan, kind: PipelineKind) -> bool:
        """In memory; streamed, files of one example a record, undamaged, uncompressed, seekable.

        Read deterministically; under several workers, sharded by data (``shard``
        ``"auto"`` or ``"data"``: every worker reads the one sequence).
        """
        from tfr_hooks.tfrecord.pipelines.options import PipelineKind

        if kind.in_memory:
            return True
        config = self.options.config
        return (
            kind is PipelineKind.STREAMED
            and plan.per_record == 1
            and plan.damage is None
            and plan.records.format.seekable(plan.compression)
            and config.deterministic
            and (current_task().num_workers == 1 or config.shard in ("auto", "data"))
        )

    def records(
        self, plan: Plan, *, reads: int, position: ReadPosition | None = None
    ) -> tf.data.Dataset:
        """The interleaved records; from ``position`` when given."""
        options = self.options
        deterministic = options.config.deterministic
        if position is not None:
            return stream_from_position(
                plan.records, reads=reads, deterministic=deterministic, position=position
            )
        records, _ = record_passes(
            plan.records,
            reads=reads,
            deterministic=deterministic,
            buffer=0,
            seed=options.seed,
            num_epochs=options.num_epochs,
            served=options.service is not None,
        )
        return records
