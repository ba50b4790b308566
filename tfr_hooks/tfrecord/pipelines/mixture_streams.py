"""A mixture read from its sources' streams: TFRecord sources in their global orders.

:mod:`~tfr_hooks.tfrecord.pipelines.mixture` says which draw of which source each global
position holds; this module reads them. Each source is a stream of its draws in order
(its epochs one after another, each in the source's global order seeded with
:func:`~tfr_hooks.tfrecord.pipelines.mixture.source_seed`, entered at the draws it made
before the read's start: its window re-read, nothing before it), and the streams are
mixed by the closed-form source of each position:

- :func:`interleave`: a record at a time (``choose_from_datasets``), from any position;
- :func:`mixed_batches`: a batch at a time, each source's vectors cut into the batches'
  counts (``rebatch``, the counts repeating every few batches) and put in order by one
  gather, with no per-record step; from a position in the last stretch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.formats.index import RecordIndex
from tfr_hooks.tfrecord.pipelines.mixture import MixtureOrder, source_seed
from tfr_hooks.tfrecord.pipelines.orders.global_order import DEFAULT_WINDOW, GlobalOrder

__all__ = [
    "CHUNK",
    "choices",
    "global_streams",
    "interleave",
    "mixed_batches",
    "source_stream",
    "source_windows",
]

#: Positions a mixed read assembles at once: enough to share the per-chunk work.
CHUNK = 4096


def choices(order: MixtureOrder, start: Any = 0, stop: Any = None) -> tf.data.Dataset:
    """The source of each position from ``start`` (for ``choose_from_datasets``)."""
    stop = (1 << 62) if stop is None else stop
    return tf.data.Dataset.range(start, stop).batch(1024).map(lambda k: order.draws(k)[0]).unbatch()


def interleave(
    order: MixtureOrder, streams: Sequence[tf.data.Dataset], start: int = 0, stop: Any = None
) -> tf.data.Dataset:
    """The mixed stream from ``start``: each position's element from its source's stream.

    Args:
        order: The mixture's order.
        streams: One dataset a source of :attr:`MixtureOrder.names`, each holding that source's
            draws from :meth:`MixtureOrder.draws_before` ``(start)`` on, in order (a source's
            epochs one after another; see :meth:`MixtureOrder.stream_start`).
        start: The global position to start at.
        stop: The position to stop at (``None``: never).
    """
    if len(streams) != len(order.names):
        raise ValueError(
            f"Expected one stream a source of {list(order.names)}. Received: streams={len(streams)}"
        )
    return tf.data.Dataset.choose_from_datasets(
        list(streams), choices(order, start, stop), stop_on_empty_dataset=True
    )


def mixed_batches(
    order: MixtureOrder,
    vectors: Sequence[tf.data.Dataset],
    start: int,
    batch_size: int,
    *,
    chunk: int = CHUNK,
) -> tf.data.Dataset:
    """The mixed stream from ``start`` in batches of ``batch_size``, a batch at a time.

    The positions are taken in chunks of about ``chunk`` (whole batches): each source's
    stream of record vectors is cut into the chunks' counts (``Dataset.rebatch`` with
    the cycle of :meth:`MixtureOrder.batch_counts`), each chunk put in its positions'
    order by one gather, and the chunks cut into batches: no per-record step, and the
    per-chunk work shared by its batches. The same elements as
    ``interleave(...).batch(batch_size)``, much faster.

    Args:
        order: The mixture's order.
        vectors: One dataset a source of :attr:`MixtureOrder.names`, each holding vectors of that
            source's draws from :meth:`MixtureOrder.draws_before` ``(start)`` on, in order
            (:func:`source_windows`); a source the last stretch does not draw is
            not read.
        start: The global position to start at, in the last stretch.
        batch_size: Positions a batch.
        chunk: Positions assembled at once (rounded down to whole batches).
    """
    size = batch_size * max(1, chunk // batch_size)
    counts = order.batch_counts(start, size)
    drawn = [i for i in range(len(order.names)) if counts[:, i].any()]
    # each source cut and read ahead on its own, so the sources are read in parallel
    cut = tuple(vectors[i].rebatch(tf.constant(counts[:, i], tf.int64)).prefetch(2) for i in drawn)
    firsts = tf.data.Dataset.range(start, 1 << 62, size)
    n_sources = len(order.names)

    def assemble(first: tf.Tensor, *parts: tf.Tensor) -> tf.Tensor:
        source, n = order.draw_numbers(first + tf.range(size, dtype=tf.int64))
        base = tf.math.unsorted_segment_min(n, source, n_sources)
        sizes = tf.math.bincount(source, minlength=n_sources, dtype=tf.int64)
        offsets = tf.cumsum(sizes, exclusive=True)
        index = tf.gather(offsets, source) + n - tf.gather(base, source)
        return tf.gather(tf.concat(parts, 0), index)

    chunks = tf.data.Dataset.zip((firsts, *cut)).map(assemble)
    return chunks if size == batch_size else chunks.rebatch(batch_size)


def source_windows(order: GlobalOrder, epoch: int, at: int) -> tf.data.Dataset:
    """A source's records in its global order from position ``at`` of ``epoch`` on.

    As vectors: its windows, the first from ``at``.

    Its epochs follow one another, each in its own order; the stream never ends.
    """
    first = order.windows_of(epoch, start=at)
    later = tf.data.Dataset.range(epoch + 1, 1 << 62)
    return first.concatenate(later.flat_map(lambda e: order.windows_of(e)))


def source_stream(order: GlobalOrder, epoch: int, at: int) -> tf.data.Dataset:
    """:func:`source_windows`, a record at a time."""
    return source_windows(order, epoch, at).unbatch()


def global_streams(
    mixture: MixtureOrder,
    indexes: Mapping[str, Sequence[RecordIndex]],
    start: int = 0,
    *,
    window: int = DEFAULT_WINDOW,
    vectors: bool = False,
) -> list[tf.data.Dataset]:
    """Each source's stream for a mixed read from ``start``, in the source's global order.

    Source ``name`` is read by a :class:`GlobalOrder` over its files seeded with
    :func:`source_seed` ``(seed, name)``, entered at the draws it made before
    ``start`` (its window re-read, nothing before it): pass the result to
    :func:`interleave`. A source that no stretch from ``start`` on draws
    gets an empty stream.

    Args:
        mixture: The mixture's order.
        indexes: The record indexes of each drawn source's files.
        start: The global position to start at.
        window: Records a window of each source's global order.
        vectors: Streams of vectors (:func:`source_windows`, for
            :meth:`MixtureOrder.batches`) instead of records.

    Raises:
        ValueError: A source's files hold another number of records than its size.
    """
    streams = []
    later = mixture.state.stretches[mixture.state.stretch_at(start) :]
    drawn = {name for stretch in later for name in stretch.names}
    for name, (epoch, at), size in zip(
        mixture.names, mixture.stream_start(start), mixture.sizes, strict=True
    ):
        if name not in drawn:
            empty = tf.data.Dataset.from_tensors(tf.constant([b""])).take(0)
            streams.append(empty if vectors else empty.unbatch())
            continue
        order = GlobalOrder(
            list(indexes[name]), seed=source_seed(mixture.seed, name), window=window
        )
        if order.total != size:
            raise ValueError(
                f"Expected source {name!r} to hold {size} records (its size in the state). "
                f"Received: records={order.total}"
            )
        streams.append((source_windows if vectors else source_stream)(order, epoch, at))
    return streams
