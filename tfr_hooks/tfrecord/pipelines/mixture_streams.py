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
  ``tf.dynamic_stitch`` a feature, with no per-record step; from a position in the last
  stretch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.index import RecordIndex
from tfr_hooks.tfrecord.pipelines.mixture import MixtureOrder, source_seed
from tfr_hooks.tfrecord.pipelines.orders.global_order import DEFAULT_WINDOW, GlobalOrder

__all__ = [
    "CHUNK",
    "choices",
    "interleave",
    "last_counts",
    "last_draws",
    "mixed_from",
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
    order by one stitch, and the chunks cut into batches: no per-record step, and the
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
    assemble = _stitcher(order, size, 1 << 62, drawn)
    chunks = tf.data.Dataset.zip((firsts, *cut)).map(assemble)
    return chunks if size == batch_size else chunks.rebatch(batch_size)


def _stitcher(order: MixtureOrder, size: int, end: Any, drawn: Sequence[int]) -> Callable[..., Any]:
    """The map putting a chunk's parts (one a source of ``drawn``) in its positions' order.

    A chunk of ``size`` positions from ``first`` (in the last stretch) takes its draws
    of source ``drawn[j]`` from part ``j``, in order. Which source each position holds
    repeats every period of the last stretch's interleave: one gather from its table,
    then each source's positions (``tf.where``) and one ``tf.dynamic_stitch`` a
    feature, a single copy (a ragged or sparse feature: one gather from the parts put
    end to end). The chunk is cut at ``end``, and each part at the draws it gives
    before it.
    """
    last, inter = order.state.stretches[-1], order.state.interleaves[-1]
    ids = np.array([order.names.index(name) for name in last.names], np.int64)
    table = ids[inter.table]  # the source (an index of ``order.names``) of a period's positions

    def assemble(first: tf.Tensor, *parts: Any) -> Any:
        keep = tf.minimum(tf.cast(end, tf.int64) - first, size)
        local = (first - last.start + tf.range(keep, dtype=tf.int64)) % inter.period
        source = tf.gather(tf.constant(table, tf.int64), local)
        where = [tf.cast(tf.where(tf.equal(source, i))[:, 0], tf.int32) for i in drawn]
        drawn_here = [tf.size(w) for w in where]  # a part may hold more (a chunk cut at `end`)

        def stitch(*xs: Any) -> Any:
            xs = tuple(x[:n] for x, n in zip(xs, drawn_here, strict=True))
            if all(isinstance(x, tf.Tensor) for x in xs):
                return tf.dynamic_stitch(where, list(xs))
            # the position of each part's elements once the parts are put end to end
            ends = tf.split(tf.range(tf.cast(keep, tf.int32)), drawn_here)
            index = tf.dynamic_stitch(where, ends)
            return tf.gather(tf.concat(xs, 0), index)

        return tf.nest.map_structure(stitch, *parts)

    return assemble


def source_windows(order: GlobalOrder, epoch: Any, at: Any, count: Any = None) -> tf.data.Dataset:
    """A source's records in its global order from position ``at`` of ``epoch`` on.

    As vectors: its windows, the first from ``at``. Its epochs follow one another, each
    in its own order. With ``count`` (draws, an ``int64`` tensor or an integer) the
    stream ends one window after the window holding the ``count``-th draw, so that a
    bounded read (a pass that stops) reads and parses no window far past its end; else
    it never ends. ``epoch``, ``at`` and ``count`` may be tensors.
    """
    first = order.windows_of(epoch, start=at)
    later = tf.data.Dataset.range(epoch + 1, 1 << 62)
    windows = first.concatenate(later.flat_map(lambda e: order.windows_of(e)))
    if count is None:
        return windows
    begin = tf.cast(epoch, tf.int64) * order.total + tf.cast(at, tf.int64)
    end = begin + tf.maximum(tf.cast(count, tf.int64), 1) - 1  # the last draw needed

    def window(draw: tf.Tensor) -> tf.Tensor:  # the window's number in the whole stream
        return (draw // order.total) * order.windows + order.locate_tensor(draw % order.total)[0]

    # one window more: a stream never ends inside the chunk holding its last draw
    return windows.take(window(end) - window(begin) + 2)


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


def last_draws(order: MixtureOrder, start: Any) -> tf.Tensor:
    """Draws of each source of the last stretch before ``start`` (in it), in ops.

    ``start`` may be an ``int64`` scalar tensor (read when a pass starts): constant time
    wherever it is.
    """
    last, inter = order.state.stretches[-1], order.state.interleaves[-1]
    local = tf.cast(start, tf.int64) - last.start
    q, r = local // inter.period, local % inter.period
    prefix = tf.constant(inter.prefix, tf.int64)
    weights = tf.constant(inter.weights, tf.int64)
    return tf.constant(last.draws, tf.int64) + q * weights + tf.gather(prefix, r, axis=1)


def last_counts(order: MixtureOrder, start: Any, size: int) -> tf.Tensor:
    """:meth:`MixtureOrder.batch_counts` of the last stretch's sources, in ops.

    ``(cycle, sources of the last stretch)``: the draws of each in each chunk of ``size``
    positions from ``start`` (a tensor or an integer in the last stretch).
    """
    last, inter = order.state.stretches[-1], order.state.interleaves[-1]
    cycle = inter.period // math.gcd(inter.period, size)
    local = tf.cast(start, tf.int64) - last.start + tf.range(cycle + 1, dtype=tf.int64) * size
    q, r = local // inter.period, local % inter.period
    prefix = tf.constant(inter.prefix, tf.int64)
    before = q[:, None] * tf.constant(inter.weights, tf.int64)[None, :] + tf.transpose(
        tf.gather(prefix, r, axis=1)
    )
    return before[1:] - before[:-1]


def mixed_from(
    order: MixtureOrder,
    streams: Callable[[str, Any, Any, Any], tf.data.Dataset],
    start: Any,
    stop: Any,
    batch_size: int,
    *,
    drop_remainder: bool = False,
    chunk: int = CHUNK,
    calls: int = 1,
    base: Any = None,
) -> tf.data.Dataset:
    """The mixed stream of positions ``[start, stop)`` in batches, from a tensor start.

    :func:`mixed_batches` for a ``start`` (and ``stop``) that may be ``int64`` scalar
    tensors, read when a pass starts (a resumed run's position, the pass of an
    iterator), in the last stretch. Each source's stream is ``streams(name, epoch, at,
    count)``: vectors of the source's draws from position ``at`` of its ``epoch`` on
    (serialized records, or any structure of tensors with a batch dimension: a source's
    parsed and mapped examples), holding at least the ``count`` draws the pass makes of
    it and ending soon after (:func:`source_windows`; ``None``: never ending), mixed by
    one stitch a chunk of about ``chunk`` positions (``calls`` chunks at once, in
    order).

    Args:
        order: The mixture's order.
        streams: A source's stream of vectors from ``(epoch, at)``, of at least ``count``
            draws.
        start: The first global position (in the last stretch).
        stop: The position to stop at (``None``: never).
        batch_size: Positions a batch.
        drop_remainder: Whether to drop a last batch shorter than ``batch_size``.
        chunk: Positions assembled at once (rounded down to whole batches).
        calls: Chunks assembled in parallel (in order).
        base: Draws each source of the last stretch made before it, added to its own
            (an ``int64`` vector, or ``None``: those of the state): a stretch whose
            start and draws are read when the pass starts (a mixture reweighted at a
            checkpoint, :class:`~tfr_hooks.tfrecord.pipelines.mixture_position.MixturePosition`),
            given with ``start`` and ``stop`` relative to it.
    """
    size = batch_size * max(1, chunk // batch_size)
    last, inter = order.state.stretches[-1], order.state.interleaves[-1]
    # in the order of the sources' ids (:attr:`MixtureOrder.names`), as the gather's offsets
    drawn = sorted(
        (j for j, weight in enumerate(inter.weights) if weight > 0),
        key=lambda j: order.names.index(last.names[j]),
    )
    draws, counts = last_draws(order, start), last_counts(order, start, size)
    # a pass that stops reads each source up to the draws it makes before the stop
    needed = None if stop is None else last_draws(order, stop) - draws
    if base is not None:  # a draw's number within a chunk is relative: only the streams move
        draws = draws + tf.cast(base, tf.int64)
    sizes = tf.constant(last.sizes, tf.int64)
    cut = tuple(
        streams(
            last.names[j],
            draws[j] // sizes[j],
            draws[j] % sizes[j],
            None if needed is None else needed[j],
        )
        .rebatch(counts[:, j])
        .prefetch(2)
        for j in drawn
    )
    end = (1 << 62) if stop is None else stop
    firsts = tf.data.Dataset.range(start, end, size)
    ids = [order.names.index(last.names[j]) for j in drawn]
    chunks = tf.data.Dataset.zip((firsts, *cut)).map(
        _stitcher(order, size, end, ids), num_parallel_calls=calls, deterministic=True
    )
    return chunks.rebatch(batch_size, drop_remainder=drop_remainder)
