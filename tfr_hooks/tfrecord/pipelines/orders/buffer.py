"""Buffer shuffle: the files in a new order every pass, the records through a buffer.

``shuffle=N``: the files are shuffled, then their records in a buffer of ``N``
(:func:`~tfr_hooks.tfrecord.pipelines.passes.record_passes`), every pass anew; packed
shards shuffle windows of whole blocks
(:func:`~tfr_hooks.tfrecord.pipelines.packed_batches.packed_dataset`). A buffer's state
is the records it held, so a pass is never entered at a position: a resumed run
replays. In memory, the held examples' indices go through a buffer of ``N``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tensorflow as tf

from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.packed_batches import packed_dataset
from tfr_hooks.tfrecord.pipelines.passes import record_passes

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import ReadOptions
    from tfr_hooks.tfrecord.pipelines.plan import Plan
    from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = ["BufferOrder"]


class BufferOrder(Order):
    """The records through a shuffle buffer of ``shuffle=N`` records."""

    def held_order(self) -> int | str | None:
        """A buffer of ``N`` over the held examples."""
        return self.options.shuffle

    name = "buffer"
    held = True
    shuffles = True

    def records(
        self, plan: Plan, *, reads: int, position: ReadPosition | None = None
    ) -> tf.data.Dataset:
        """The shuffled records (never from a position)."""
        del position
        options = self.options
        records, _ = record_passes(
            plan.records,
            reads=reads,
            deterministic=options.config.deterministic,
            buffer=options.shuffle_buffer,
            seed=options.seed,
            num_epochs=options.num_epochs,
            served=options.service is not None,
        )
        return records

    def packed(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """Windows of whole blocks shuffled together, unpacked in an order drawn per window."""
        del calls, position
        return packed_dataset(
            plan.records,
            plan.schema,
            plan.per_record,
            options.batch_size,
            shuffle_buffer=options.shuffle_buffer,
            seed=options.seed,
            num_parallel_reads=reads,
            drop_remainder=options.drop_remainder,
            num_epochs=options.num_epochs,
            prefetch=None,
            deterministic=options.config.deterministic,
            served=options.service is not None,
        )
