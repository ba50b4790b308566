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

from typing import TYPE_CHECKING, Any

import tensorflow as tf

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalOrder

__all__ = ["PIECE_READS", "index_pieces", "window_keys"]

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


def index_pieces(
    order: GlobalOrder, epoch: Any = 0, *, start: Any = 0, piece: int
) -> tf.data.Dataset:
    """``order``'s records of ``epoch`` from position ``start``: vectors of ``piece``.

    Args:
        order: A global order over files of a format read by index.
        epoch: The epoch (an integer or an ``int64`` scalar tensor).
        start: The position in the epoch (an integer or an ``int64`` scalar tensor).
        piece: Records a call reads (the last of a window reads what is left).
    """
    entry = order.entry(start)
    if entry is None:
        return tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))
    window, begin = entry

    def keys_of(w: Any) -> tf.data.Dataset:
        files, records = window_keys(order, w, epoch, tf.where(tf.equal(w, window), begin, 0))
        at = tf.data.Dataset.range(0, tf.size(files, out_type=tf.int64), piece)
        return at.map(lambda i: (files[i : i + piece], records[i : i + piece]))

    keys = tf.data.Dataset.range(window, order.windows).flat_map(keys_of)
    names, reading = [index.file for index in order.indexes], order.reading
    return keys.map(
        lambda files, records: reading.records_at(names, files, records),
        num_parallel_calls=PIECE_READS,
        deterministic=True,
    ).prefetch(PIECE_READS)
