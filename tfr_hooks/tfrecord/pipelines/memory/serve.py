"""Serving held arrays as batches: each pass's order of indices, gathered by index.

:func:`memory_dataset` draws each pass's order of the held examples (the stored order, a
buffer shuffle of their indices, or a fresh permutation: ``shuffle`` as the readers
take it), cuts it into slices and gathers them (a whole
pass at once for small dense data), :func:`single_device_map` keeps the gather out of
Grappler at each new iterator, and :func:`fresh_randomness` lets the random ops of a
function draw new values every epoch (:mod:`tfr_hooks.tfrecord.pipelines.memory`).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.tf_private import single_device_map
from tfr_hooks.tfrecord.pipelines.memory.loading import Held, aligned
from tfr_hooks.tfrecord.pipelines.passes import pass_seed
from tfr_hooks.tfrecord.pipelines.position import ReadPosition, at_most
from tfr_hooks.tfrecord.pipelines.ragged import RaggedArray, batch_examples

__all__ = [
    "memory_dataset",
    "single_device_map",
    "fresh_randomness",
    "GATHER_EXAMPLES",
    "GATHER_BYTES",
    "WHOLE_PASS_BYTES",
    "BATCH_PREFETCH",
    "PARALLEL_CALLS",
]

logger = logging.getLogger(__name__)

#: Examples gathered by one element of the pipeline at most (then cut into batches).
GATHER_EXAMPLES = 4096
#: Bytes gathered by one element at most: large examples (images) are gathered a batch
#: at a time, as cutting a big gathered chunk into batches copies the data twice. It is
#: above glibc's mmap threshold (128 KiB), so each thread that gathers keeps about one
#: element's buffer resident in its arena once freed; gathered under it (a batch of
#: digits an element), the TF2 pipeline alone read 0.64x as fast (finding 19).
GATHER_BYTES = 1 << 20
#: Batches prefetched by ``prefetch=tf.data.AUTOTUNE`` when a pass is gathered in parts,
#: and after a map of each batch (``batch_map_fn``, padding after decoding), whose
#: batches are no longer slices of a pass gathered ahead.
#: Gathered whole, nothing is prefetched a batch (the pass is): on 30,000 digits held
#: in memory (23 MB, 2 cores, TF 2.21), read in a ``tf.function`` loop, the pipeline
#: took 76 us of CPU a batch of 128 with a prefetch of 2 batches and 41 us without it.
BATCH_PREFETCH = 2
#: Bytes held at most for a pass to be gathered whole: one function call a pass, the
#: permutation and the gather of every example at once, then cut into batches. Each
#: function a pass runs costs milliseconds to start at every new iterator, the cost that
#: dominates a pass over a small data set; the whole pass costs its bytes once more.
WHOLE_PASS_BYTES = 32 << 20
#: Parallel calls of the pipelines' per-batch maps: one per core, at most 8.
PARALLEL_CALLS = max(1, min(os.cpu_count() or 1, 8))


def memory_dataset(
    arrays: Mapping[str, Held],
    batch_size: int,
    *,
    shuffle: int | str | None,
    seed: int | None,
    drop_remainder: bool,
    num_epochs: int | None,
    prefetch: int | None,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    buckets: np.ndarray | None = None,
    batch_fn: Callable[[dict[str, Any]], Any] | None = None,
    select: Callable[[dict[str, Any]], Any] | None = None,
    widen: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    position: ReadPosition | None = None,
) -> tf.data.Dataset:
    """Batches gathered from in-memory arrays, in the order ``shuffle`` names, every pass.

    Each pass (epoch) ends with its own final batch (smaller, or dropped with
    ``drop_remainder``). Shuffled passes follow a sequence of orders fixed by
    ``seed``: a new iterator (or, in graph mode, each initialization of the iterator)
    starts the next pass of that sequence.

    A :class:`RaggedArray` (a feature of varying length) is gathered as ragged rows.
    With ``buckets``, each batch holds examples of one bucket: a pass takes its
    permutation, keeps each bucket's examples in that order, cuts every bucket into
    batches (each with its own final, smaller batch) and serves those batches in a
    random order. The number of batches of a pass is the same every pass.

    Args:
        arrays: Feature name to array (or :class:`RaggedArray`), all of the same length.
        batch_size: Examples per batch.
        shuffle: The order of each pass, as the readers' ``shuffle``: ``None`` the
            stored order; ``N`` (a positive int) the indices ``0, 1, ...`` through a
            ``tf.data`` shuffle buffer of ``N``, anew each pass (``1``: the stored
            order); ``"global"`` a fresh permutation of all the examples each pass.
        seed: Seed of the sequence of permutations.
        drop_remainder: Whether to drop each pass's (each bucket's) final, smaller batch.
        num_epochs: Passes; ``None`` for endless.
        prefetch: Batches to prefetch (0 or ``None`` for none); ``tf.data.AUTOTUNE``
            for the pipeline's choice: none when each pass is gathered whole (its
            batches are slices of a pass already gathered ahead, on the pass's own
            prefetch thread: a per-batch prefetch would only add a thread handoff a
            batch, about a third of the pipeline's CPU time, see :data:`BATCH_PREFETCH`),
            2 batches otherwise.
        map_fn: Applied to each gathered example, in parallel, before batching (the
            arrays then hold encoded examples that ``map_fn`` decodes every pass).
        buckets: The bucket of each example (``int64``), or ``None``.
        batch_fn: Applied to each gathered batch in the same parallel step as the
            gather (padding), when there is no ``map_fn``.
        select: Applied last to each batch (a dict): the features ``as_tuple`` names.
            It must select features, not compute: it runs on a whole pass at once when
            the pass is gathered whole.
        widen: Applied first to each gathered batch (a dict): features held narrower
            than they are served (``uint8`` images that ``map_fn`` cast to float, see
            :mod:`tfr_hooks.tfrecord.pipelines.memory.narrow`) made what ``map_fn`` returned.
        position: Where each pass starts (one pass an iterator, no ``buckets``, no
            buffer: ``shuffle`` ``None`` or ``"global"``): the pass's permutation is
            drawn from ``(seed, epoch)`` and served from the
            record the position holds when the iterator starts.

    Returns:
        A dataset of dicts of batch tensors (or what ``select`` returns), of exact
        known cardinality.

    Raises:
        ValueError: If ``drop_remainder`` leaves no batch, or ``shuffle`` is not one of
            the three.
    """
    buffer = isinstance(shuffle, int) and not isinstance(shuffle, bool) and shuffle > 0
    if not (buffer or shuffle is None or shuffle == "global"):
        raise ValueError(expected("shuffle", "None, a positive int or 'global'", shuffle))
    if buffer and position is not None:
        raise ValueError("Expected no `position` with a buffer shuffle (entered by replay)")
    gather = _Gather(arrays, batch_size, shuffle, drop_remainder, buckets)
    if batch_fn is not None and map_fn is not None:
        raise ValueError("Expected `batch_fn` without `map_fn` (apply it to the batches)")
    if widen is not None and map_fn is not None:
        raise ValueError("Expected `widen` without `map_fn` (held decoded features)")
    gather.map_fn, gather.batch_fn, gather.select = map_fn, batch_fn, select
    gather.widen = widen
    if position is not None:
        base = tf.constant([seed if seed is not None else secrets.randbits(62), 0], tf.int64)
        salts = position.start().map(lambda epoch, start: (_salt(base, epoch), start))
    elif tf.executing_eagerly():
        salts = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
    else:
        start = pass_seed(seed)
        salts = single_device_map(
            tf.data.Dataset.random(seed=seed), lambda s: tf.bitwise.bitwise_xor(s, start)
        )
    if num_epochs is not None:
        salts = salts.take(num_epochs)
    if gather.whole:  # the next pass gathered while this one is consumed, if there is one
        batches = gather.whole_passes(salts, overlap=num_epochs != 1, one_pass=position is not None)
    else:
        batches = salts.flat_map(gather.one_pass)
    total = tf.data.INFINITE_CARDINALITY if num_epochs is None else num_epochs * gather.per_pass
    if position is None:
        batches = batches.apply(tf.data.experimental.assert_cardinality(total))
    else:  # entered at a position, a pass holds fewer batches
        batches = at_most(batches, total)
    if prefetch == tf.data.AUTOTUNE:
        prefetch = None if gather.whole else BATCH_PREFETCH
    if prefetch:
        batches = batches.prefetch(prefetch)
    if select is not None and not gather.whole:  # gathered whole, selected with the gather
        # after the prefetch, as the structure map was before: selecting on the prefetch
        # thread halved the TF2 in-memory input-alone rate (input_memory_tf2, 60,000 digits)
        batches = batches.map(select)
    if gather.whole:  # a new iterator would rewrite the graph (4 ms, and copy the held data)
        options = tf.data.Options()
        options.experimental_optimization.apply_default_optimizations = False
        batches = batches.with_options(options)
    return batches


def _salt(base: Any, epoch: Any) -> Any:
    """The salt of pass ``epoch``'s permutation: drawn from ``(seed, epoch)``, stateless."""
    key = tf.random.experimental.stateless_fold_in(base, epoch)
    return tf.random.stateless_uniform([], key, minval=None, maxval=None, dtype=tf.int64)


class _Gather:
    """The passes of :func:`memory_dataset`: slices of a permutation, gathered in batches.

    Each gathered element is one batch when rows vary in length or batches follow
    buckets, else several batches' worth (up to :data:`GATHER_BYTES`), cut into batches.
    """

    def __init__(
        self,
        arrays: Mapping[str, Held],
        batch_size: int,
        shuffle: int | str | None,
        drop_remainder: bool,
        buckets: np.ndarray | None,
    ) -> None:
        self.names = list(arrays)
        # TensorFlow copies an unaligned buffer at every hand-over (0.1 ms a MB): copy once
        self.held: list[Held] = [
            RaggedArray(
                aligned(value.values),
                aligned(value.row_splits),
                tuple(aligned(splits) for splits in value.inner_splits),
            )
            if isinstance(value, RaggedArray)
            else aligned(value)
            for value in (arrays[name] for name in self.names)
        ]
        self.flat: list[np.ndarray] = []
        for value in self.held:
            if isinstance(value, RaggedArray):
                self.flat.extend([value.values, value.row_splits, *value.inner_splits])
            else:
                self.flat.append(value)
        self.bucketed = buckets is not None
        if buckets is not None:
            self.flat.append(aligned(np.ascontiguousarray(buckets, np.int64)))
        self.count = count = len(self.held[0])
        self.batch_size, self.drop_remainder = batch_size, drop_remainder
        self.order = shuffle  # None, a buffer's size or "global"
        self.shuffle = shuffle is not None  # bucketed: the batches' order shuffled
        self.plan = _batch_plan(count, batch_size, drop_remainder, buckets)
        self.per_pass = (
            len(self.plan[0])
            if self.plan is not None
            else (count // batch_size if drop_remainder else math.ceil(count / batch_size))
        )
        if self.per_pass == 0:
            raise ValueError(
                f"Expected at least `batch_size` examples with `drop_remainder`. Received: "
                f"batch_size={batch_size} for {count} examples"
            )
        self.dtypes = [
            tf.string if v.dtype.kind in "OSU" else tf.as_dtype(v.dtype) for v in self.flat
        ]
        per_example = max(1, sum(v.nbytes for v in self.flat) // max(1, count))
        gather = min(GATHER_EXAMPLES, GATHER_BYTES // per_example)
        ragged = any(isinstance(value, RaggedArray) for value in self.held)
        self.chunk = batch_size if ragged else batch_size * max(1, gather // batch_size)
        self.full = count // self.chunk
        self.map_fn: Callable[[dict[str, Any]], Any] | None = None
        self.batch_fn: Callable[[dict[str, Any]], Any] | None = None
        self.select: Callable[[dict[str, Any]], Any] | None = None
        self.widen: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.small = not ragged and sum(v.nbytes for v in self.flat) <= WHOLE_PASS_BYTES
        self.small = self.small and all(v.dtype.kind not in "OSU" for v in self.flat)

    @property
    def whole(self) -> bool:
        """Whether each pass is gathered whole (small dense data, no buckets or functions)."""
        return self.small and self.plan is None and self.map_fn is None and self.batch_fn is None

    def whole_passes(
        self, salts: tf.data.Dataset, overlap: bool, one_pass: bool = False
    ) -> tf.data.Dataset:
        """The batches of the passes ``salts`` shuffle, each pass gathered whole.

        One function a pass (hand the arrays over, permute, gather every example, and
        ``select``), then cut into the batches :meth:`one_pass` gives: the same
        examples in the same order. With ``overlap``, the next pass is gathered while
        this one is consumed (a thread started at each new iterator: for one pass an
        iterator, it would only add to the start).
        """
        full = self.count // self.batch_size
        sizes = [self.batch_size] * full
        if self.count % self.batch_size and not self.drop_remainder:
            sizes.append(self.count % self.batch_size)
        kept = sum(sizes)

        # eager: tensors made once, inputs of the function (no Python call a new iterator)
        held = [tf.convert_to_tensor(v) for v in self.flat] if tf.executing_eagerly() else None

        widen, select = self.widen, self.select

        def gather_all(salt: Any, start: Any = 0) -> dict[str, Any]:
            _, *data = self.columns(held)
            order = self.permutation(salt)[start:kept]
            if not self.drop_remainder:  # the batches' size unknown, whatever the count
                order = unknown_rows(order)
            gathered = {name: tf.gather(t, order) for name, t in zip(self.names, data, strict=True)}
            return gathered if select is None or widen is not None else select(gathered)

        passes = single_device_map(salts, gather_all)
        if overlap:
            passes = passes.prefetch(1)
        if one_pass:  # its batches cut from its start (a multiple of the batch) on
            batches = passes.rebatch(self.batch_size, drop_remainder=self.drop_remainder)
        else:
            batches = passes.rebatch(sizes if len(set(sizes)) > 1 else sizes[0])
        if widen is None:
            return batches

        def widened(batch: dict[str, Any]) -> Any:  # a batch at a time: no pass of floats
            wide = widen(batch)
            return wide if select is None else select(wide)

        # a single-device function, as the gather: a parallel map's function is optimized
        # anew at each iterator (milliseconds a pass: 0.63x `.cache()` against 1.17x)
        return single_device_map(batches, widened)

    @property
    def fused(self) -> bool:
        """Whether ``batch_fn`` runs with the gather (each gathered element is a batch)."""
        return self.map_fn is None and (self.chunk == self.batch_size or self.plan is not None)

    def source(self) -> list[np.ndarray]:
        return self.flat

    def columns(self, held: list[Any] | None = None) -> list[Any]:
        """The buckets (or ``None``), then the held features, as tensors of this pass.

        Args:
            held: The flat arrays as eager tensors, if made already (else a
                ``numpy_function`` hands them over, evaluated once per pass).
        """
        # the numpy_function hands numpy's (aligned) buffers over without a copy
        data = held
        if data is None:
            data = tf.numpy_function(
                self.source, [], self.dtypes, stateful=True, name="in_memory_data"
            )
        for tensor, array in zip(data, self.flat, strict=True):
            tensor.set_shape(array.shape)
        out: list[Any] = [data[-1] if self.bucketed else None]  # the buckets first
        position = 0
        for value in self.held:
            if isinstance(value, RaggedArray):
                levels = 1 + len(value.inner_splits)
                splits = list(data[position + 1 : position + 1 + levels])
                out.append(
                    tf.RaggedTensor.from_nested_row_splits(data[position], splits, validate=False)
                )
                position += 1 + levels
            else:
                out.append(data[position])
                position += 1
        return out

    def permutation(self, salt: Any) -> Any:
        """The indices of the held examples in pass ``salt``'s order (``shuffle``)."""
        if isinstance(self.order, int) and self.order > 1:  # a buffer (of 1: stored order)
            # the index stream through tf.data's own shuffle: what a streamed buffer does,
            # seeded by the salt alone (a graph seed of 0 would test the salt for 0)
            graph = tf.compat.v1.get_default_graph()
            graph_seed, graph.seed = graph.seed, None
            try:
                stream = tf.data.Dataset.range(self.count).shuffle(
                    self.order, seed=salt, reshuffle_each_iteration=False
                )
            finally:
                graph.seed = graph_seed
            return stream.batch(self.count).get_single_element()
        order = tf.range(self.count, dtype=tf.int64)
        if self.order == "global":
            order = tf.random.experimental.stateless_shuffle(
                order, seed=tf.stack([salt, tf.constant(7, tf.int64)])
            )
        return order

    def slices_of(self, salt: Any, bucket: Any, start: Any = 0) -> tf.data.Dataset:
        """The index slices of a pass from ``start`` on: one per gathered element."""
        order = self.permutation(salt)
        if self.plan is not None:
            starts, sizes = (tf.constant(a) for a in self.plan)
            by_bucket = tf.gather(order, tf.argsort(tf.gather(bucket, order), stable=True))
            batch_order = tf.range(self.per_pass, dtype=tf.int64)
            if self.shuffle:
                batch_order = tf.random.experimental.stateless_shuffle(
                    batch_order, seed=tf.stack([salt, tf.constant(11, tf.int64)])
                )
            bounds = tf.data.Dataset.from_tensor_slices(
                (tf.gather(starts, batch_order), tf.gather(sizes, batch_order))
            )
            if self.drop_remainder:  # every batch full: its size known, as tf.data's
                return bounds.map(
                    lambda start, size: tf.ensure_shape(
                        by_bucket[start : start + size], [self.batch_size]
                    )
                )
            return bounds.map(lambda start, size: by_bucket[start : start + size])
        full, chunk = self.full, self.chunk
        if not (isinstance(start, int) and start == 0):  # entered at a position
            return self._slices_from(order[start:])
        chunks = tf.reshape(order[: full * chunk], [full, chunk])
        if not self.drop_remainder:  # the batches' size unknown, whatever the count
            chunks = unknown_rows(chunks, dims=2)
        slices = tf.data.Dataset.from_tensor_slices(chunks)
        if self.count % chunk:
            slices = slices.concatenate(tf.data.Dataset.from_tensors(order[full * chunk :]))
        return slices

    def _slices_from(self, order: Any) -> tf.data.Dataset:
        """:meth:`slices_of` for the rest of a permutation (entered at a batch's start)."""
        chunk = self.chunk
        full = tf.size(order, out_type=tf.int64) // chunk
        chunks = tf.reshape(order[: full * chunk], [-1, chunk])
        if not self.drop_remainder:
            chunks = unknown_rows(chunks, dims=2)
        slices = tf.data.Dataset.from_tensor_slices(chunks)
        if self.drop_remainder and chunk == self.batch_size:  # a short rest is dropped
            return slices
        rest = tf.data.Dataset.from_tensors(order[full * chunk :])
        return slices.concatenate(rest.filter(lambda r: tf.size(r) > 0))

    def one_pass(self, salt: Any, start: Any = 0) -> tf.data.Dataset:
        """The batches of the pass that ``salt`` shuffles, from example ``start`` on."""
        bucket, *data = self.columns()
        batch_fn, widen = self.batch_fn if self.fused else None, self.widen

        def gather(index: Any) -> dict[str, Any]:
            batch = {
                name: known_rows(tf.gather(t, index), index.shape[0])
                for name, t in zip(self.names, data, strict=True)
            }
            batch = widen(batch) if widen is not None else batch
            return batch_fn(batch) if batch_fn is not None else batch

        gathered = self.slices_of(salt, bucket, start).map(
            gather, num_parallel_calls=PARALLEL_CALLS, deterministic=True
        )
        if self.map_fn is not None:  # encoded examples: decode each pass, in parallel
            return self._decoded(gathered, self.map_fn)
        whole = self.chunk == self.batch_size
        if whole and self.plan is None and self.drop_remainder and self.count % self.chunk:
            return gathered.take(self.full)
        if whole or self.plan is not None:
            return gathered
        batches = gathered.rebatch(self.batch_size, drop_remainder=self.drop_remainder)
        return batches if self.batch_fn is None else batches.map(self.batch_fn)

    def _decoded(
        self, gathered: tf.data.Dataset, map_fn: Callable[[dict[str, Any]], Any]
    ) -> tf.data.Dataset:
        """Gathered encoded examples through ``map_fn``, in parallel, then batched."""
        if self.plan is not None:  # each gathered element is a whole batch of one bucket
            return gathered.flat_map(
                lambda batch: batch_examples(
                    tf.data.Dataset.from_tensor_slices(batch).map(
                        map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
                    ),
                    self.batch_size,
                    drop_remainder=self.drop_remainder,  # only full batches are planned then
                )
            )
        examples = gathered.unbatch().map(
            map_fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        return batch_examples(examples, self.batch_size, self.drop_remainder)


def unknown_rows(index: Any, dims: int = 1) -> Any:
    """``index`` with its first dimension unknown when the graph is built.

    A batch's size is then unknown too, whatever the number of examples: as in tf.data,
    only ``drop_remainder=True`` makes it static. Were it known because the batch size
    divides the count, ``tf.shape(x)[0]`` of a batch would fold to a constant, and a
    graph-mode counter built on it would count the batch that ends the data.
    """
    return tf.compat.v1.placeholder_with_default(index, [None] * dims)


def known_rows(value: Any, rows: int | None) -> Any:
    """``value`` gathered by an index of ``rows`` rows: a ragged one's rows told too."""
    if rows is not None and isinstance(value, tf.RaggedTensor):
        value.row_splits.set_shape([rows + 1])
    return value


def _batch_plan(
    count: int, batch_size: int, drop_remainder: bool, buckets: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and size of every batch of a pass over examples sorted by bucket."""
    if buckets is None:
        return None
    if len(buckets) != count:
        raise ValueError(f"Expected a bucket for each of the {count} examples")
    per_bucket = np.bincount(buckets) if count else np.zeros([0], np.int64)
    starts: list[int] = []
    sizes: list[int] = []
    offset = 0
    for size in per_bucket.tolist():
        for first in range(0, size, batch_size):
            taken = min(batch_size, size - first)
            if taken == batch_size or not drop_remainder:
                starts.append(offset + first)
                sizes.append(taken)
        offset += size
    return np.asarray(starts, np.int64), np.asarray(sizes, np.int64)


def fresh_randomness(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` traced with no graph-level seed, so its random ops draw anew every epoch.

    A ``tf.data`` function is instantiated again at each new iterator (each epoch in
    ``FunctionLoop``, each initialization in graph mode); a stateful random op seeded from
    ``tf.random.set_seed`` (or the graph's seed) would then repeat the same values every
    epoch. Traced without the graph-level seed, an op with no seed of its own starts
    from a new random state at each instantiation.
    """

    def traced(*args: Any) -> Any:
        graph = tf.compat.v1.get_default_graph()
        seed = graph.seed
        graph.seed = None
        try:
            return fn(*args)
        finally:
            graph.seed = seed

    return traced
