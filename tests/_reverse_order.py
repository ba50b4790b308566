"""An order only the tests know: the files last to first, each file's records in order.

It proves the seam of :mod:`tfr_hooks.tfrecord.pipelines.orders`: the package knows
nothing of this order, and the pipeline composes it (batch, parse, ``map_fn``, padding,
finish; packed shards unpacked) through :class:`~tfr_hooks.tfrecord.pipelines.orders.base.Order`
alone. It cannot be entered at a position (a resumed run replays) and the in-memory
pipeline cannot serve it (``held`` is ``None``: ``in_memory=True`` is refused).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.orders.base import Order

__all__ = ["ReverseFileOrder"]


class ReverseFileOrder(Order):
    """The files in reverse order, one after the other, every pass."""

    name = "reverse file"

    def records(self, plan: Any, *, reads: int, position: Any = None) -> tf.data.Dataset:
        del reads, position
        files = RecordFiles(tuple(reversed(plan.files)), plan.compression, plan.damage)
        records = files.records()  # through the files' format
        epochs = self.options.num_epochs
        return records if epochs == 1 else records.repeat(epochs)
