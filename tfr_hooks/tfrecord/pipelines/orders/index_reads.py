"""The global order over a format read by index: a window's order, read a piece at a time.

For a random-access format (ArrayRecord:
:attr:`~tfr_hooks.tfrecord.formats.records.RecordFormat.by_index`) a window's order
(:class:`~tfr_hooks.tfrecord.pipelines.orders.global_order.GlobalOrder`) is an order of
record numbers, computed before anything is read. So instead of reading a
window's blocks and then mixing them, the window's records are read in their order,
``piece`` records a call by their numbers
(:meth:`~tfr_hooks.tfrecord.formats.records.RecordFormat.records_at`, one batch read),
several calls in flight:

- the first batch of a pass is served after one read, not after a window's;
- a pass entered at a position reads the window's records from that position on, and
  nothing before it (the global order over TFRecord files reads its window again);
- memory holds the calls in flight, not two windows.

The records, and their order, are those of ``GlobalOrder.windows_of``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

#: A :class:`~tfr_hooks.tfrecord.pipelines.orders.global_order.GlobalOrder` (which
#: imports this module: not imported here, even for typing, to keep the modules acyclic).
GlobalOrder = Any

__all__ = ["PIECE_READS", "read_pieces", "window_entries", "window_keys"]

#: Calls of a piece each in flight (their reads release the GIL).
PIECE_READS = 4


def window_keys(
    order: GlobalOrder, window: Any, epoch: Any, begin: Any = 0
) -> tuple[tf.Tensor, tf.Tensor]:
    """The records of window ``window`` of ``epoch`` in its order, from place ``begin``.

    Returns:
        The file (a place in ``order.indexes``) and the record number of each, as
        ``int64`` vectors: computed from the window's blocks, nothing read.
    """
    files, offsets, counts, _ = order.plan(window, epoch)
    rows = tf.repeat(tf.range(tf.size(counts, out_type=tf.int64)), counts)
    within = tf.range(tf.reduce_sum(counts)) - tf.gather(tf.cumsum(counts, exclusive=True), rows)
    places = order.window_order(window, epoch, tf.reduce_sum(counts), begin)
    rows, within = tf.gather(rows, places), tf.gather(within, places)
    return tf.gather(files, rows), tf.gather(offsets, rows) + within


def window_entries(order: GlobalOrder, epoch: Any = 0, start: Any = 0) -> tf.data.Dataset:
    """The windows ``order`` reads of ``epoch`` from position ``start``.

    Returns:
        ``(epoch, window, begin)`` triples (``int64`` scalars): each window from the one
        holding ``start``, the first from ``start``'s place in it, the others whole;
        none past the epoch's end.
    """
    entry = order.entry(start)
    if entry is None:  # past the epoch's end: no window
        entry = tf.constant(order.windows, tf.int64), tf.constant(0, tf.int64)
    window, begin = entry
    epoch = tf.cast(epoch, tf.int64)
    return tf.data.Dataset.range(window, order.windows).map(
        tf.autograph.experimental.do_not_convert(
            lambda w: (epoch, w, tf.where(tf.equal(w, window), begin, 0))
        )
    )


def read_pieces(order: GlobalOrder, entries: tf.data.Dataset, *, piece: int) -> tf.data.Dataset:
    """The records of the windows ``entries`` names, in their order: vectors of ``piece``.

    One function a stage, instantiated once (not a dataset a window): each window's
    keys (:func:`window_keys`), cut into pieces of ``piece`` records across the windows
    (and epochs), each piece read with one call, :data:`PIECE_READS` calls in flight.

    Args:
        order: A global order over files of a format read by index.
        entries: ``(epoch, window, begin)`` triples (:func:`window_entries`).
        piece: Records a call reads (the last one reads what is left).
    """
    keys = entries.map(
        tf.autograph.experimental.do_not_convert(lambda e, w, b: window_keys(order, w, e, b))
    ).rebatch(piece)
    names, reading = [index.file for index in order.indexes], order.reading
    return keys.map(
        tf.autograph.experimental.do_not_convert(
            lambda files, records: reading.records_at(names, files, records)
        ),
        num_parallel_calls=PIECE_READS,
        deterministic=True,
    ).prefetch(PIECE_READS)
