"""The order of a mixture: named sources at chosen weights (``weights=``), one global stream.

``files`` a mapping of named sources and ``weights=`` over their names
(:mod:`~tfr_hooks.tfrecord.pipelines.mixture_sources` resolves them). Which source each
global position comes from, and which draw of it, is the closed-form interleave of
:mod:`~tfr_hooks.tfrecord.pipelines.mixture`; each source is read in its own global order
(seeded with its name), its epochs one after another
(:func:`~tfr_hooks.tfrecord.pipelines.mixture_streams.source_windows`), and the streams are
mixed a chunk of positions at a time by one stitch
(:func:`~tfr_hooks.tfrecord.pipelines.mixture_streams.mixed_from`).

**An epoch of a mixture** is ``E`` global positions, the sum of its sources' records
(:attr:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureOrder.epoch_size`): ``num_epochs``
counts them, as the loops' epochs and ``steps_per_epoch`` do. Pass ``p`` of an iterator
(each new iterator; in graph mode each initialization) reads positions
``[p * num_epochs * E, (p + 1) * num_epochs * E)``, so each source's draws go on from
pass to pass: a small source cycles and reshuffles while a large one is in its first
epoch. ``num_epochs=None`` never ends.

A pass is entered at a position by arithmetic: a resumed run seeks there (its sources'
streams each re-read at most their window). Its position
(:class:`~tfr_hooks.tfrecord.pipelines.mixture_position.MixturePosition`) also holds the
stretch the passes read: a run restarted from a checkpoint with other ``weights=`` goes
on where each source stopped, at the new weights.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.task import current_task
from tfr_hooks.tfrecord.pipelines.memory.serve import PARALLEL_CALLS
from tfr_hooks.tfrecord.pipelines.mixture import MixtureOrder, MixtureState, source_seed
from tfr_hooks.tfrecord.pipelines.mixture_position import MixturePosition
from tfr_hooks.tfrecord.pipelines.mixture_sources import initial_state, source_map_fns
from tfr_hooks.tfrecord.pipelines.mixture_streams import mixed_from, source_windows
from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.orders.global_order import DEFAULT_WINDOW, GlobalOrder
from tfr_hooks.tfrecord.pipelines.sharding import SHARED_SEED
from tfr_hooks.tfrecord.pipelines.splits import file_indexes
from tfr_hooks.tfrecord.pipelines.stages import as_dict

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
    from tfr_hooks.tfrecord.pipelines.plan import Plan
    from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = ["MixtureShuffleOrder", "mixture_order"]

logger = logging.getLogger(__name__)

#: Positions between the starts of the passes of ``num_epochs=None`` (each never ends).
_ENDLESS = 1 << 38


def mixture_order(
    plan: Plan, options: ReadOptions, state: MixtureState | None = None
) -> MixtureOrder:
    """The :class:`MixtureOrder` of a mixture's plan: its weights, sources' sizes and seed.

    Args:
        plan: The mixture's plan (its ``parts``, each with its records counted).
        options: Its ``weights`` and ``seed`` (``None``: one drawn, logged).
        state: The stretches to read by (a run restarted with other weights); ``None``
            for one stretch from position 0 at the plan's weights.
    """
    seed = options.seed
    if seed is None:
        seed = SHARED_SEED if current_task().num_workers > 1 else secrets.randbits(62)
        logger.info("A mixture with seed %d (pass `seed` to repeat this order).", seed)
    state = initial_state(plan, options) if state is None else state
    if state is None:
        raise ValueError(expected("weights", "a mapping over the plan's sources", options.weights))
    return MixtureOrder(state, seed=seed)


class MixtureShuffleOrder(Order):
    """``weights=`` over named sources, read with ``shuffle="global"`` (see the module)."""

    name = "mixture"
    held = False
    shuffles = True
    enters_any_num_epochs = True

    @classmethod
    def refuse(cls, options: ReadOptions) -> None:
        """Refuse another ``shuffle``, ``in_memory``, ``service`` and damaged records."""
        super().refuse(options)
        reason = (
            "a mixture reads each source in its global order, entered at the draw a "
            "position holds, and mixes the streams by arithmetic"
        )
        if options.shuffle != "global":
            raise ValueError(
                expected("shuffle", f"'global' with weights= ({reason})", options.shuffle)
            )
        for name, off in (("in_memory", False), ("service", None), ("max_corrupt_records", 0)):
            if getattr(options, name) != off:
                raise ValueError(
                    expected(name, f"{off!r} with weights= ({reason})", getattr(options, name))
                )

    @classmethod
    def refuse_queue(cls, options: ReadOptions) -> None:
        """A queue cannot read a global order."""
        raise ValueError(
            expected(
                "pipeline", "'dataset' with weights= (a queue reads files as streams)", "queue"
            )
        )

    def knows_length(self, workers: int) -> bool:
        """One worker only: under several, the strategy keeps a part of each global batch."""
        return workers == 1

    def enters(self, plan: Plan, kind: PipelineKind) -> bool:
        """Streamed: every position is entered by arithmetic."""
        from tfr_hooks.tfrecord.pipelines.options import PipelineKind

        return kind is PipelineKind.STREAMED

    def new_position(
        self, plan: Plan, *, batch_size: int, workers: int, grain: int
    ) -> MixturePosition:
        """A :class:`MixturePosition`: the pass's epoch and records, and its stretch."""
        del grain  # a mixture is not bucketed
        weights = self.options.weights
        if weights is None:
            raise ValueError(expected("weights", "a mapping over the plan's sources", weights))
        sizes = {name: sum(c or 0 for c in part.counts) for name, part in plan.parts.items()}
        epochs = self.options.num_epochs
        return MixturePosition(
            batch_size,
            weights={name: float(weights[name]) for name in plan.parts},
            sizes=sizes,
            span=_ENDLESS if epochs is None else epochs * sum(sizes.values()),
            workers=workers,
            seed=self.seed,
        )

    def _streams(self, plan: Plan, order: MixtureOrder, options: ReadOptions, calls: int) -> Any:
        """``streams(name, epoch, at, count)`` for :func:`mixed_from`: parsed, mapped when asked.

        Each source's windows are parsed (and mapped) by a map of ``calls`` parallel
        calls, in order: the next windows are parsed while the mix reads the last one,
        as the single-source global read parses its windows, instead of the mix waiting
        for a window's parse each time a source's window ends.
        """
        orders = {
            name: GlobalOrder(
                file_indexes(part.records),
                seed=source_seed(order.seed, name),
                window=DEFAULT_WINDOW,
                reading=part.records.format,
            )
            for name, part in plan.parts.items()
        }
        map_fns = source_map_fns(options)

        def stream(name: str, epoch: Any, at: Any, count: Any) -> tf.data.Dataset:
            part = plan.parts[name]
            windows = source_windows(orders[name], epoch, at, count).map(
                part.parse_batch, num_parallel_calls=calls, deterministic=True
            )
            if map_fns is None:
                return windows
            mapped = windows.unbatch().map(
                as_dict(map_fns[name], part.names), num_parallel_calls=calls, deterministic=True
            )
            return mapped.batch(DEFAULT_WINDOW)

        return stream

    def _passes(self, order: MixtureOrder, position: ReadPosition | None) -> tf.data.Dataset:
        """``(start, stop)`` of each new iterator's pass."""
        epochs = self.options.num_epochs
        span = _ENDLESS if epochs is None else epochs * order.epoch_size
        if isinstance(position, MixturePosition):  # one loop epoch a pass, in its stretch
            # global positions: the loop's (epoch, records) and the stretch's offset
            span = position.span
            return position.start().map(
                lambda e, r, s: (e * span + r + s[0], (e + 1) * span + s[0], s[1], s[2:])
            )
        if tf.executing_eagerly():
            with tf.init_scope():
                counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="mixture_passes")
            passes = tf.data.Dataset.from_tensors(tf.constant(1, tf.int64)).map(
                lambda one: counter.assign_add(one) - one
            )
        else:  # an initializable iterator re-runs this at each initialization
            passes = tf.data.Dataset.from_tensors(
                tf.random.uniform([], maxval=1 << 22, dtype=tf.int64, seed=order.seed)
            )
        # the stop of an endless pass is never read (mixed_from is given None)
        draws = tf.zeros([len(order.names)], tf.int64)
        return passes.map(lambda p: (p * span, (p + 1) * span, tf.constant(0, tf.int64), draws))

    def mixed(
        self,
        plan: Plan,
        options: ReadOptions,
        position: ReadPosition | None = None,
        *,
        calls: int = PARALLEL_CALLS,
    ) -> tf.data.Dataset:
        """The mixed batches of ``options.batch_size`` (parsed, mapped per source when asked).

        ``calls``: the parallel calls of each source's parse (and ``map_fn``).
        """
        order = mixture_order(plan, options)
        streams = self._streams(plan, order, options, calls)
        endless = options.num_epochs is None and position is None

        def one_pass(
            start: tf.Tensor, stop: tf.Tensor, first: tf.Tensor, draws: tf.Tensor
        ) -> tf.data.Dataset:
            # positions in the stretch that starts at global position ``first``, where
            # its sources had made ``draws`` (0 and none for a read that starts afresh)
            return mixed_from(
                order,
                streams,
                start - first,
                None if endless else stop - first,
                options.batch_size,
                drop_remainder=options.drop_remainder,
                calls=calls,
                base=draws,
            )

        return self._passes(order, position).flat_map(one_pass)

    def records(
        self, plan: Plan, *, reads: int, position: ReadPosition | None = None
    ) -> tf.data.Dataset:
        """The mixed examples, one at a time, parsed rather than serialized.

        Each source is parsed by its own schema (and ``map_fn``) before the mix; the
        pipeline reads :meth:`batches`.
        """
        del reads
        return self.mixed(plan, self.options, position).unbatch()

    def batches(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """The mixed batches, each source parsed (and mapped) before the mix."""
        del reads
        return self.mixed(plan, options, position, calls=calls)
