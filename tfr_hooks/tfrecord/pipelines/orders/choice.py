"""The order a reader's options choose: the one place that maps ``shuffle`` to an order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.orders.buffer import BufferOrder
from tfr_hooks.tfrecord.pipelines.orders.file import FileOrder
from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalShuffleOrder
from tfr_hooks.tfrecord.pipelines.orders.mixture import MixtureShuffleOrder

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import ReadOptions

__all__ = ["order_class", "order_for", "order_of"]


def order_class(options: ReadOptions) -> type[Order]:
    """The :class:`~.base.Order` the options choose.

    ``weights=``: a mixture of named sources; ``shuffle="global"``: the global order;
    ``shuffle=N``: a buffer; ``None``: the file order.
    """
    if options.weights is not None:
        return MixtureShuffleOrder
    if options.shuffle == "global":
        return GlobalShuffleOrder
    return FileOrder if options.shuffle is None else BufferOrder


def order_of(options: ReadOptions) -> Order:
    """The order of a read with ``options`` (see :func:`order_class`)."""
    return order_class(options)(options)


def order_for(options: ReadOptions, *, queue: bool = False) -> type[Order]:
    """The order the options choose, checked: raise for what it refuses.

    The readers call it once, after checking their arguments.

    Args:
        options: The reader's checked options.
        queue: Whether a queue pipeline reads (``pipeline="queue"``).

    Raises:
        ValueError: The order cannot be read with these options
            (:meth:`~.base.Order.refuse`, :meth:`~.base.Order.refuse_queue`).
    """
    chosen = order_class(options)
    chosen.refuse(options)
    if queue:
        chosen.refuse_queue(options)
    return chosen
