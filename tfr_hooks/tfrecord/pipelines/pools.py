"""Batching by length from pools of batches: the streamed and packed ``bucket_boundaries``.

Streamed data cannot be grouped by length ahead of time, and grouping it one example at
a time (``tf.data``'s ``group_by_window``, under ``bucket_by_sequence_length``) costs a
key function call, a lock and a window dataset per example. Instead the reader takes a
*pool* of ``bucket_pool`` x ``batch_size`` examples at once (parsed as one batch: one
parse per pool), and for each pool, in one vectorized step:

1. orders its rows by the length of the ``bucket_by`` feature (one stable argsort;
   rows of equal length keep a seeded random order when shuffling),
2. cuts that order into batches of ``batch_size`` consecutive rows, so each batch holds
   rows of neighbouring lengths and padding to its longest wastes little,
3. shuffles the order of those batches (when the reader shuffles), and
4. gathers each batch's rows from the pool.

Every batch comes from one sorted pool. The boundaries do not cut the pool: a batch
may hold rows on both sides of a boundary, where the pool's sorted order crosses it (at
most one batch per boundary and pool); ``bucket_boundaries`` turns this batching on (in
memory, where the whole data is at hand, every batch still comes from one bucket).

Every full pool gives ``bucket_pool`` full batches; only the data's last pool can be
shorter, and only its last batch partial (kept, or dropped with ``drop_remainder``), so
an epoch has as many batches as without bucketing and each example comes once.

**Determinism per pool.** The random draws of a pool depend on nothing but

    pool_seed(seed, salt) = [seed, salt]

where ``seed`` is the reader's ``seed`` (0 when ``None``) and ``salt`` a fingerprint of
the pool's ``bucket_by`` values. The pool's contents are the records of positions
``index * pool_examples`` to ``(index + 1) * pool_examples`` of the pass (the pass's
order being a function of ``seed`` and the epoch, see
:func:`~tfr_hooks.tfrecord.pipelines.passes.record_passes` and
:mod:`~tfr_hooks.tfrecord.pipelines.orders.global_order`), so a pool's batches are a function of
``(seed, epoch, index)``: reading the same records again gives the same batches, and a
pass entered at a pool's start (a resumed run's seek, see
:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`'s ``grain``) gives the
pool's batches of a whole pass, needing no count of the pools before it. No second
dataset source feeds the draws (a multi-worker strategy's file sharding needs a single
one).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["DEFAULT_POOL", "pool_seed", "pool_order", "batch_pools"]

#: Batches a pool holds by default (``ReadOptions.bucket_pool``). A larger pool sorts
#: more rows together (batches of closer lengths, less padding) but shuffles the epoch's
#: order less freely (a batch's rows are drawn from one pool) and takes longer to fill
#: before its first batch.
DEFAULT_POOL = 32


def pool_seed(seed: Any, salt: Any) -> Any:
    """The ``int64`` stateless seed pair of a pool: ``[seed, salt]``.

    Args:
        seed: The reader's seed (an ``int64`` scalar; 0 for none).
        salt: The pool's fingerprint (an ``int64`` scalar, see :func:`_salt`).
    """
    return tf.stack([seed, salt])


def _salt(value: Any) -> Any:
    """An ``int64`` fingerprint of a pool's ``bucket_by`` feature (values and lengths)."""
    if isinstance(value, tf.RaggedTensor):
        parts = [tf.reshape(value.flat_values, [-1]), *value.nested_row_splits]
    else:
        parts = [tf.reshape(value, [-1])]
    salt = tf.constant(0, tf.int64)
    for part in parts:
        prints = tf.fingerprint(tf.reshape(tf.fingerprint(tf.reshape(part, [-1, 1])), [1, -1]))
        salt = tf.bitwise.bitwise_xor(salt, tf.bitcast(prints, tf.int64)[0])
    return salt


def _lengths(value: Any) -> Any:
    """Each row's length (``int64``): its values, or frames for a feature list."""
    if isinstance(value, tf.RaggedTensor):
        return value.row_lengths()
    shape = tf.shape(value, out_type=tf.int64)
    length = shape[1] if value.shape.rank is not None and value.shape.rank > 1 else 1
    return tf.fill(shape[:1], tf.cast(length, tf.int64))


def pool_order(lengths: Any, batch_size: int, *, seed: Any | None) -> tuple[Any, Any]:
    """The rows of a pool, as full batches in serving order and the rest.

    Args:
        lengths: Each row's length (``int64``, ``[n]``).
        batch_size: Rows a batch.
        seed: The pool's stateless seed pair (:func:`pool_seed`), or ``None`` to keep the
            pool's order among equal lengths and serve the batches shortest first.

    Returns:
        ``(full, rest)``: ``[n // batch_size, batch_size]`` row indices, one line a
        batch (rows of neighbouring lengths), lines in serving order; and the
        ``n % batch_size`` rows left, the longest (the pool's partial batch).
    """
    n = tf.shape(lengths, out_type=tf.int64)[0]
    rows = tf.range(n)
    if seed is not None:  # ties keep a random order: shuffle, then sort stably
        rows = tf.random.experimental.stateless_shuffle(rows, seed=seed)
    rows = tf.gather(rows, tf.argsort(tf.gather(lengths, rows), stable=True))
    batches = n // batch_size
    full = tf.reshape(rows[: batches * batch_size], [-1, batch_size])
    if seed is not None:
        order = tf.random.experimental.stateless_shuffle(
            tf.range(batches), seed=tf.random.experimental.stateless_fold_in(seed, 1)
        )
        full = tf.gather(full, order)
    return full, rows[batches * batch_size :]


def _cut(value: Any, rows: Any) -> Any:
    """``value``'s ``rows`` (one line of indices a batch) as a batch of batches.

    ``rows`` is a dense ``[batches, batch_size]`` (every batch full: the batch dimension
    stays static) or ragged ``[batches, (rows)]`` (a partial batch last).
    """
    if isinstance(rows, tf.RaggedTensor):
        return tf.RaggedTensor.from_row_splits(
            tf.gather(value, rows.flat_values), rows.row_splits, validate=False
        )
    batches, width = tf.shape(rows, out_type=tf.int64)[0], rows.shape[1]
    taken = tf.gather(value, tf.reshape(rows, [-1]))
    if isinstance(taken, tf.RaggedTensor):
        return tf.RaggedTensor.from_uniform_row_length(taken, width, nrows=batches, validate=False)
    return tf.reshape(
        taken, tf.concat([[batches, width], tf.shape(taken, out_type=tf.int64)[1:]], 0)
    )


def batch_pools(
    pools: tf.data.Dataset,
    *,
    key: str,
    batch_size: int,
    drop_remainder: bool,
    seed: int | None,
    shuffle: bool,
    deterministic: bool = True,
    calls: int = 2,
) -> tf.data.Dataset:
    """Batches of rows of neighbouring lengths, from ``pools`` (dicts of pool tensors).

    Args:
        pools: Pools: dicts of tensors (ragged for lists of varying length) whose first
            dimension is the pool's rows.
        key: The feature whose length orders the rows (``bucket_by``).
        batch_size: Rows a batch.
        drop_remainder: Whether to drop a pool's partial batch (only the data's last
            pool has one).
        seed: The reader's seed (``None``: 0; the pool's salt still varies).
        shuffle: Whether to shuffle each pool's batches (and ties); otherwise a pool's
            batches come shortest first.
        deterministic: Whether the pools' parallel sorting keeps their order.
        calls: Pools sorted at once.

    Returns:
        The batches, each pool's batches one after the other.
    """
    base = tf.constant(0 if seed is None else int(seed), tf.int64)

    def arrange(pool: dict[str, Any]) -> dict[str, Any]:
        value = pool[key]
        pool_key = pool_seed(base, _salt(value)) if shuffle else None
        full, rest = pool_order(_lengths(value), batch_size, seed=pool_key)
        if drop_remainder:
            rows = full
        else:  # the partial batch (in the data's last pool only) goes last
            flat = tf.concat([tf.reshape(full, [-1]), rest], 0)
            sizes = tf.concat([tf.fill(tf.shape(full)[:1], batch_size), tf.shape(rest)], 0)
            rows = tf.RaggedTensor.from_row_lengths(flat, tf.cast(sizes[sizes > 0], tf.int64))
        return {name: _cut(v, rows) for name, v in pool.items()}

    arranged = pools.map(
        arrange,
        num_parallel_calls=calls,
        deterministic=deterministic,
    )
    batches = arranged.unbatch()
    if any(_uniform_ragged(spec) for spec in tf.nest.flatten(batches.element_spec)):
        # a dense feature cut by ragged rows (a partial batch last) unbatches with a
        # ragged spec of no ragged dimension: declared dense again, as without bucketing
        # (a multi-worker strategy's iterator compares it with the dense spec it expects)
        batches = batches.map(lambda batch: batch)
    return batches


def _uniform_ragged(spec: Any) -> bool:
    """Whether ``spec`` is a ``RaggedTensorSpec`` without a ragged dimension."""
    return isinstance(spec, tf.RaggedTensorSpec) and spec.ragged_rank == 0
