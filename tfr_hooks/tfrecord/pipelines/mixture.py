"""The order of a mixture: named sources at chosen weights, each with its own epochs.

A mixture reads several named sources (``{"web": ..., "books": ..., "code": ...}``) at
chosen weights. Its order says, for every **global position** ``k = 0, 1, 2, ...`` of
the mixed stream, which source the example comes from and which draw of that source it
is. It is pure integer arithmetic on ``k``, with no random draw and no buffer:

1. **Integer weights.** The weights are scaled to integers ``w_i`` summing to at most
   :data:`RESOLUTION` (largest remainders, every positive weight at least 1, then
   divided by their greatest common divisor); ``W = sum(w_i)`` is the **period**.
2. **A low-discrepancy interleave.** Within a period, source ``i`` owns the ``w_i``
   instants ``(j + 1/2) / w_i`` (``j < w_i``) of ``[0, 1)``; all ``W`` instants, sorted
   (ties by source), give the period's sequence of sources. Position ``k`` is the
   ``k mod W``-th of that sequence. Among the first ``k`` positions, source ``i`` has
   ``(k // W) * w_i + prefix_i[k mod W]`` draws: a constant-time count (two table
   reads), which strays from ``k * w_i / W`` by at most ``(n + 1) / 2`` for ``n``
   sources (measured on random weights: 1 for 3 sources, about 2 for 8). So in every
   window of 10,000 positions a source's share is within 0.005 of its weight, and
   within 0.05 in every batch of 256.
3. **Each source has its own epochs.** Draw ``n`` of source ``i`` (of ``N_i`` records)
   is position ``n mod N_i`` of the source's epoch ``n // N_i``. The source's order
   within an epoch is drawn from ``(seed, source, epoch)`` (:func:`source_seed` folds
   the source's *name* into the seed, so adding or removing another source leaves its
   order alone): every record comes once per epoch of its source, in a new order each
   epoch, and a small source cycles while a large one is still in its first epoch.
   For a random-access source the order is the stateless permutation
   ``tf.random.experimental.index_shuffle(n mod N_i, [source_seed, epoch], N_i - 1)``
   (:meth:`MixtureOrder.records`); a streamed TFRecord source may use its global order
   (:class:`~tfr_hooks.tfrecord.pipelines.orders.global_order.GlobalOrder` seeded with
   :func:`source_seed`) instead: then ``n mod N_i`` is a position in that epoch
   (:mod:`tfr_hooks.tfrecord.pipelines.mixture_streams` reads them so).
4. **Weights changeable at a checkpoint.** The state (:class:`MixtureState`) is a list
   of **stretches**: each holds its start position and, per source, its integer weight,
   its draws before the stretch and its size. Position ``k`` of a stretch takes draw
   ``draws_i + (draws of i within the stretch before k)``. A new stretch
   (:meth:`MixtureState.reweighted`) starts every kept source at the draws it reached,
   so no record repeats within its source's epoch; an added source starts at 0 (or
   where it stopped, if an earlier stretch read it), and a removed source is dropped.
   Earlier positions stay reproducible: the state keeps every stretch's weights. The
   state is a few integers a source (:meth:`MixtureState.to_bytes`: about 100 bytes for
   3 sources), never a buffer.
5. **Any number of workers.** The sequence does not depend on the worker count. Under
   ``MultiWorkerMirroredStrategy`` every worker reads it and keeps its part of each
   global batch (tf.data's data sharding, as the other seeking reads): the parts are
   disjoint and cover the batch, so a run saved with ``J`` workers resumes with any
   other count.

**The epoch of a mixture** is a fixed number ``E`` of global positions:
``steps_per_epoch`` global batches when given, else the sum of the sizes of the sources
being drawn (:attr:`MixtureOrder.epoch_size`, those of the last stretch). Epoch ``e`` is
positions ``[e*E, (e+1)*E)``; each source's own epochs run through it independently (a
small source may finish several, a large one part of one), so a mixture's epoch is a
unit of steps for ``num_epochs``, the loops' epochs and their reports, not a pass over
every record. A run whose weights change at a checkpoint keeps counting global positions
from there. ``num_epochs=None`` never ends: the positions go on forever.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "RESOLUTION",
    "Interleave",
    "MixtureOrder",
    "MixtureState",
    "Stretch",
    "integer_weights",
    "source_seed",
]

#: The sum of the integer weights before reduction: shares are exact to ``1 / RESOLUTION``.
RESOLUTION = 10_000
# ``tf.random.experimental.index_shuffle`` pads a seed of shape [2] to the raw op's [3]
# with this constant; padding the same way gives one permutation a seed, batched or not.
_SEED_PAD = 498247692
_MASK63 = (1 << 63) - 1


def _check_weights(weights: Any) -> dict[str, float]:
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(
            "Expected `weights` to be a non-empty mapping of source names to weights. "
            f"Received: weights={weights!r}"
        )
    checked: dict[str, float] = {}
    for name, weight in weights.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"Expected source names as strings. Received: weights={weights!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float, np.integer, np.floating))
            or not math.isfinite(float(weight))
            or weight < 0
        ):
            raise ValueError(
                f"Expected every weight to be a finite number >= 0. Received: weights={weights!r}"
            )
        checked[name] = float(weight)
    if not any(checked.values()):
        raise ValueError(f"Expected a weight above 0. Received: weights={weights!r}")
    return checked


def integer_weights(weights: Mapping[str, float], resolution: int = RESOLUTION) -> dict[str, int]:
    """The weights as integers, their shares exact to ``1 / resolution``.

    Largest remainders of the weights scaled to ``resolution`` (ties by order), every
    positive weight at least 1, then all divided by their greatest common divisor.
    A weight of 0 stays 0 (the source is kept but not drawn).

    Raises:
        ValueError: The weights are not a mapping of names to numbers >= 0, or all are 0.
    """
    checked = _check_weights(weights)
    names = list(checked)
    values = np.array([checked[name] for name in names], np.float64)
    scaled = values / values.sum() * resolution
    ints = np.floor(scaled).astype(np.int64)
    order = np.argsort(-(scaled - ints), kind="stable")
    ints[order[: resolution - int(ints.sum())]] += 1
    for i in np.flatnonzero((values > 0) & (ints == 0)):
        ints[i] = 1
        ints[int(np.argmax(ints))] -= 1
    divisor = math.gcd(*(int(v) for v in ints))
    return {name: int(v) // divisor for name, v in zip(names, ints, strict=True)}


def source_seed(seed: int, name: str) -> int:
    """The seed of source ``name``'s orders: ``seed`` with the name's CRC-32 folded in.

    A pure function of the two (no process-dependent hash), so every worker and every
    restart draws the same orders; a source keeps its orders when others change.
    """
    return (int(seed) * 0x9E3779B97F4A7C15 + zlib.crc32(name.encode("utf-8"))) & _MASK63


class Interleave:
    """The period of sources drawn at integer weights, and the counts in it.

    Args:
        weights: Integer weights >= 0 of the sources ``0 .. n-1`` (at least one above 0).

    Attributes:
        period: ``sum(weights)``: the sequence repeats every ``period`` positions.
        table: The source of each position of a period (``int64``, ``period`` long).
        prefix: ``prefix[i, r]``: draws of source ``i`` among a period's first ``r``
            positions (``int64``, ``(n, period + 1)``).
    """

    def __init__(self, weights: Sequence[int]) -> None:
        w = np.asarray(weights, np.int64)
        if w.ndim != 1 or not len(w) or (w < 0).any() or not w.sum():
            raise ValueError(
                f"Expected integer weights >= 0, one above 0. Received: weights={weights!r}"
            )
        self.weights = w
        self.period = int(w.sum())
        sources = np.repeat(np.arange(len(w), dtype=np.int64), w)
        starts = np.concatenate(([0], np.cumsum(w)[:-1]))
        draws = np.arange(self.period, dtype=np.int64) - np.repeat(starts, w)
        # the instant (2j + 1) / (2 w_i): equal fractions give equal floats (a
        # correctly rounded division of the same real), so ties fall to the source
        instants = (2 * draws + 1) / (2.0 * w[sources])
        self.table = sources[np.lexsort((sources, instants))]
        hits = self.table[None, :] == np.arange(len(w))[:, None]
        zero = np.zeros((len(w), 1), np.int64)
        self.prefix = np.concatenate([zero, np.cumsum(hits, axis=1)], axis=1).astype(np.int64)

    def source_at(self, position: Any) -> np.ndarray:
        """The source of each position (numpy)."""
        return self.table[np.asarray(position, np.int64) % self.period]

    def counts_before(self, position: int) -> np.ndarray:
        """Draws of each source among positions ``[0, position)``: constant time."""
        q, r = divmod(int(position), self.period)
        return q * self.weights + self.prefix[:, r]


@dataclasses.dataclass(frozen=True)
class Stretch:
    """A run of positions at one set of weights.

    Attributes:
        start: Its first global position.
        names: Its sources, in a fixed order.
        weights: Their integer weights.
        draws: Their draws made before ``start`` (where each continues).
        sizes: Their records (an epoch of each).
    """

    start: int
    names: tuple[str, ...]
    weights: tuple[int, ...]
    draws: tuple[int, ...]
    sizes: tuple[int, ...]


def _check_sizes(sizes: Any, names: Sequence[str]) -> dict[str, int]:
    if not isinstance(sizes, Mapping):
        raise ValueError(f"Expected `sizes` to be a mapping. Received: sizes={sizes!r}")
    missing = [name for name in names if name not in sizes]
    if missing:
        raise ValueError(
            f"Expected a size for every weighted source; missing {missing}. Received: "
            f"sizes={dict(sizes)!r}"
        )
    out = {}
    for name in names:
        size = sizes[name]
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(
                f"Expected every source to hold at least 1 record. Received: sizes={dict(sizes)!r}"
            )
        out[name] = int(size)
    return out


class MixtureState:
    """The whole state of a mixture's order: its stretches (see the module).

    A few integers a source a stretch; :meth:`to_bytes` and :meth:`from_bytes` save and
    restore it (with the checkpoint's position, a resumed run needs nothing else).

    Args:
        stretches: The stretches, by increasing ``start``, the first at 0.

    Attributes:
        stretches: The stretches, as given.
        interleaves: Each stretch's :class:`Interleave` of its weights, in the same order.
    """

    def __init__(self, stretches: Sequence[Stretch]) -> None:
        stretches = list(stretches)
        if not stretches or stretches[0].start != 0:
            raise ValueError(
                f"Expected stretches, the first at position 0. Received: stretches={stretches!r}"
            )
        if any(b.start <= a.start for a, b in itertools.pairwise(stretches)):
            raise ValueError(
                f"Expected stretches by increasing start. Received: stretches={stretches!r}"
            )
        self.stretches = stretches
        self.interleaves = [Interleave(s.weights) for s in stretches]

    @classmethod
    def initial(cls, weights: Mapping[str, float], sizes: Mapping[str, int]) -> MixtureState:
        """The state of a new mixture: one stretch from position 0, no draws yet.

        Args:
            weights: Each source's weight (scaled by :func:`integer_weights`).
            sizes: Each source's records.
        """
        ints = integer_weights(weights)
        names = tuple(ints)
        checked = _check_sizes(sizes, names)
        stretch = Stretch(
            0,
            names,
            tuple(ints[n] for n in names),
            (0,) * len(names),
            tuple(checked[n] for n in names),
        )
        return cls([stretch])

    def stretch_at(self, position: int) -> int:
        """The stretch that holds ``position``."""
        starts = [s.start for s in self.stretches]
        return int(np.searchsorted(starts, int(position), side="right")) - 1

    def draws_before(self, position: int) -> dict[str, int]:
        """Each source's draws among positions ``[0, position)`` (constant time a stretch).

        Sources of earlier stretches only keep the draws they reached.
        """
        if (
            isinstance(position, bool)
            or not isinstance(position, (int, np.integer))
            or position < 0
        ):
            raise ValueError(f"Expected a position >= 0. Received: position={position!r}")
        at = self.stretch_at(position)
        reached: dict[str, int] = {}
        for s, (stretch, inter) in enumerate(zip(self.stretches, self.interleaves, strict=True)):
            if s > at:
                break
            end = int(position) if s == at else self.stretches[s + 1].start
            counts = inter.counts_before(end - stretch.start)
            for name, base, count in zip(stretch.names, stretch.draws, counts, strict=True):
                reached[name] = base + int(count)
        return reached

    def reweighted(
        self, position: int, weights: Mapping[str, float], sizes: Mapping[str, int]
    ) -> MixtureState:
        """The state with new weights from ``position`` on (a checkpoint's position).

        Stretches that start at or after ``position`` are replaced. Every source keeps
        the draws it reached; a new one starts at 0; one left out of ``weights`` is
        dropped from here on.

        Raises:
            ValueError: A kept source's size changed (its epochs would not be its own).
        """
        ints = integer_weights(weights)
        names = tuple(ints)
        checked = _check_sizes(sizes, names)
        reached = self.draws_before(position)
        known: dict[str, int] = {}
        for stretch in self.stretches:
            known.update(zip(stretch.names, stretch.sizes, strict=True))
        changed = {
            n: (known[n], checked[n]) for n in names if known.get(n, checked[n]) != checked[n]
        }
        if changed:
            raise ValueError(
                "Expected each kept source to hold the records it held (old, new): "
                f"{changed}. Received: sizes={dict(sizes)!r}"
            )
        stretch = Stretch(
            int(position),
            names,
            tuple(ints[n] for n in names),
            tuple(reached.get(n, 0) for n in names),
            tuple(checked[n] for n in names),
        )
        kept = [s for s in self.stretches if s.start < position]
        return MixtureState([*kept, stretch])

    def to_bytes(self) -> bytes:
        """The state as compact JSON bytes."""
        rows = [
            [
                s.start,
                [
                    [n, w, d, z]
                    for n, w, d, z in zip(s.names, s.weights, s.draws, s.sizes, strict=True)
                ],
            ]
            for s in self.stretches
        ]
        return json.dumps(rows, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> MixtureState:
        """The state :meth:`to_bytes` saved."""
        rows = json.loads(data.decode("utf-8"))
        return cls(
            [
                Stretch(
                    int(start),
                    tuple(str(r[0]) for r in sources),
                    tuple(int(r[1]) for r in sources),
                    tuple(int(r[2]) for r in sources),
                    tuple(int(r[3]) for r in sources),
                )
                for start, sources in rows
            ]
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureState) and self.stretches == other.stretches

    def __repr__(self) -> str:
        return f"MixtureState({self.stretches!r})"


class MixtureOrder:
    """The draws of every global position of a mixture, in numpy and in TensorFlow ops.

    Args:
        state: The stretches (:meth:`MixtureState.initial` for a new mixture).
        seed: The seed of every source's orders (folded with its name: :func:`source_seed`).

    Attributes:
        names: Every source of the state, in the order they first appear: a draw's
            ``source`` is an index into it.

    Examples:
        >>> state = MixtureState.initial({"a": 0.7, "b": 0.3}, {"a": 100, "b": 5})
        >>> order = MixtureOrder(state, seed=3)
        >>> source, epoch, at = order.draws_numpy(range(10))
        >>> [order.names[s] for s in source]
        ['a', 'b', 'a', 'a', 'a', 'b', 'a', 'a', 'b', 'a']
    """

    def __init__(self, state: MixtureState, *, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"Expected `seed` to be an integer. Received: seed={seed!r}")
        self.state = state
        self.seed = int(seed)
        names: list[str] = []
        sizes: dict[str, int] = {}
        for stretch in state.stretches:
            for name, size in zip(stretch.names, stretch.sizes, strict=True):
                if name not in sizes:
                    names.append(name)
                sizes[name] = size
        self.names = tuple(names)
        self.sizes = np.array([sizes[n] for n in names], np.int64)
        self.seeds = np.array([source_seed(self.seed, n) for n in names], np.int64)
        self._flatten()

    def _flatten(self) -> None:
        """Every stretch's tables in flat arrays, with each stretch's offsets into them."""
        stretches, inters = self.state.stretches, self.state.interleaves
        self._starts = np.array([s.start for s in stretches], np.int64)
        self._periods = np.array([i.period for i in inters], np.int64)
        slots = np.array([len(s.names) for s in stretches], np.int64)
        self._slot_base = np.concatenate(([0], np.cumsum(slots)[:-1])).astype(np.int64)
        self._table_base = np.concatenate(([0], np.cumsum(self._periods)[:-1])).astype(np.int64)
        prefix_sizes = slots * (self._periods + 1)
        self._prefix_base = np.concatenate(([0], np.cumsum(prefix_sizes)[:-1])).astype(np.int64)
        self._table = np.concatenate([i.table for i in inters]).astype(np.int64)
        self._prefix = np.concatenate([i.prefix.ravel() for i in inters]).astype(np.int64)
        ids = {name: i for i, name in enumerate(self.names)}
        self._slot_source = np.array([ids[n] for s in stretches for n in s.names], np.int64)
        self._slot_weight = np.array([w for s in stretches for w in s.weights], np.int64)
        self._slot_draws = np.array([d for s in stretches for d in s.draws], np.int64)

    @property
    def epoch_size(self) -> int:
        """Positions in an epoch of the mixture: the sum of the last stretch's sizes."""
        return int(sum(self.state.stretches[-1].sizes))

    def draws_numpy(self, positions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`draws` in numpy: ``(source, epoch, position in its epoch)``."""
        k = np.asarray(positions, np.int64).reshape(-1)
        s = np.searchsorted(self._starts, k, side="right") - 1
        local = k - self._starts[s]
        q, r = local // self._periods[s], local % self._periods[s]
        slot = self._table[self._table_base[s] + r]
        flat = self._slot_base[s] + slot
        before = self._prefix[self._prefix_base[s] + slot * (self._periods[s] + 1) + r]
        n = self._slot_draws[flat] + q * self._slot_weight[flat] + before
        source = self._slot_source[flat]
        size = self.sizes[source]
        return source, n // size, n % size

    def draws(self, positions: Any) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The draw of each global position, in TensorFlow ops (eager or in a graph).

        Args:
            positions: An ``int64`` scalar or vector of global positions (>= 0).

        Returns:
            ``(source, epoch, at)``: the source (an index into :attr:`names`), the
            source's epoch, and the position in that epoch's order (``int64``, the
            shape of ``positions``).
        """
        source, n = self.draw_numbers(positions)
        size = tf.gather(tf.constant(self.sizes, tf.int64), source)
        return source, n // size, n % size

    def draw_numbers(self, positions: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """``(source, n)`` of each position: it is draw ``n`` of its source (``int64``)."""
        k = tf.cast(positions, tf.int64)
        const = lambda a: tf.constant(a, tf.int64)  # noqa: E731
        s = tf.searchsorted(const(self._starts), tf.reshape(k, [-1]), side="right") - 1
        s = tf.reshape(tf.cast(s, tf.int64), tf.shape(k))
        period = tf.gather(const(self._periods), s)
        local = k - tf.gather(const(self._starts), s)
        q, r = local // period, local % period
        slot = tf.gather(const(self._table), tf.gather(const(self._table_base), s) + r)
        flat = tf.gather(const(self._slot_base), s) + slot
        at_prefix = tf.gather(const(self._prefix_base), s) + slot * (period + 1) + r
        n = (
            tf.gather(const(self._slot_draws), flat)
            + q * tf.gather(const(self._slot_weight), flat)
            + tf.gather(const(self._prefix), at_prefix)
        )
        return tf.gather(const(self._slot_source), flat), n

    def records(self, source: Any, epoch: Any, at: Any) -> tf.Tensor:
        """The record of each draw in its source's permutation for ``(seed, source, epoch)``.

        ``tf.random.experimental.index_shuffle(at, [source_seed, epoch], size - 1)``,
        computed for a whole vector at once (each element with its own seed): the order
        of a random-access source. Each record comes once per epoch of its source.
        """
        source = tf.reshape(tf.cast(source, tf.int64), [-1])
        epoch = tf.reshape(tf.cast(epoch, tf.int64), [-1])
        at = tf.reshape(tf.cast(at, tf.int64), [-1])
        seed = tf.stack(
            [
                tf.fill(tf.shape(source), tf.constant(_SEED_PAD, tf.int64)),
                tf.gather(tf.constant(self.seeds, tf.int64), source),
                epoch,
            ],
            axis=1,
        )
        size = tf.gather(tf.constant(self.sizes, tf.int64), source)
        return tf.raw_ops.RandomIndexShuffle(index=at, seed=seed, max_index=size - 1, rounds=4)

    def positions(
        self, start: Any = 0, stop: Any = None, *, batch_size: int | None = None
    ) -> tf.data.Dataset:
        """``Dataset.range(start, stop)`` mapped to ``(source, epoch, at, record)``.

        ``stop=None`` never ends. ``start`` may be an ``int64`` scalar tensor (read
        when a pass starts): entering at a position costs the same wherever it is.
        With ``batch_size`` each element is a vector of that many positions (the
        last may be short), computed in one call.
        """
        stop = (1 << 62) if stop is None else stop
        positions = tf.data.Dataset.range(start, stop)
        if batch_size is not None:
            positions = positions.batch(batch_size)

        def draw(k: tf.Tensor) -> tuple[tf.Tensor, ...]:
            source, epoch, at = self.draws(k)
            record = tf.reshape(self.records(source, epoch, at), tf.shape(k))
            return source, epoch, at, record

        return positions.map(draw)

    def draws_before(self, position: int) -> np.ndarray:
        """Each source's draws among ``[0, position)`` (an ``int64`` vector by :attr:`names`)."""
        reached = self.state.draws_before(position)
        return np.array([reached.get(n, 0) for n in self.names], np.int64)

    def source_epochs(self, position: int) -> dict[str, int]:
        """Each source's epochs completed before ``position`` (what the reports show)."""
        draws = self.draws_before(position)
        return {n: int(d // z) for n, d, z in zip(self.names, draws, self.sizes, strict=True)}

    def batch_counts(self, start: int, batch_size: int) -> np.ndarray:
        """Draws of each source in each batch from ``start``, over one cycle of batches.

        ``start`` must be in the last stretch, where the counts repeat every
        ``period / gcd(period, batch_size)`` batches: an ``int64`` array of that many
        rows, one column a source of :attr:`names` (0 for a source no longer drawn).
        """
        last, inter = self.state.stretches[-1], self.state.interleaves[-1]
        if start < last.start:
            raise ValueError(
                f"Expected a start in the last stretch (>= {last.start}). Received: start={start}"
            )
        cycle = inter.period // math.gcd(inter.period, batch_size)
        local = start - last.start + np.arange(cycle + 1, dtype=np.int64) * batch_size
        q, r = local // inter.period, local % inter.period
        before = q[:, None] * inter.weights[None, :] + inter.prefix[:, r].T
        counts = np.zeros((cycle, len(self.names)), np.int64)
        ids = [self.names.index(n) for n in last.names]
        counts[:, ids] = np.diff(before, axis=0)
        return counts

    def stream_start(self, position: int) -> list[tuple[int, int]]:
        """Where each source's stream starts for a read from ``position``: ``(epoch, at)``."""
        draws = self.draws_before(position)
        return [(int(d // z), int(d % z)) for d, z in zip(draws, self.sizes, strict=True)]
