"""What an order is: the records of a pass, whether a pass can be entered, what it refuses.

An :class:`Order` turns the records of a plan's files (read through their format,
:mod:`tfr_hooks.tfrecord.formats.records`) into the stream of serialized records of the
reader's passes, and says whether a pass can be entered at a position (a resumed run
then seeks instead of replaying) and which options it cannot read with. The pipeline
(:mod:`tfr_hooks.tfrecord.pipelines.pipeline`) composes order, batch, parse, map, pools
or padding and finish, and asks the order nothing else: a new order is one module.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

import tensorflow as tf

from tfr_hooks.task import current_task
from tfr_hooks.tfrecord.formats.packed import unpack
from tfr_hooks.tfrecord.pipelines.position import ReadPosition

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
    from tfr_hooks.tfrecord.pipelines.plan import Plan

__all__ = ["Order", "position_of"]


class Order(abc.ABC):
    """The order of a reader's passes over its records (one subclass a module).

    A subclass gives :meth:`records`; the pipeline batches, parses and maps what it
    returns (:meth:`batches`, :meth:`packed`). An order that can enter a pass at a
    position by arithmetic (records by their place in the pass) says so in
    :meth:`enters` and reads from ``position.start()`` in :meth:`records`.

    Args:
        options: The reader's options (its ``shuffle``, ``seed``, ``num_epochs``, ...).

    Examples:
        An order reading the files last to first (``tests/_reverse_order.py``)::

            class ReverseFileOrder(Order):
                name = "reverse file"

                def records(self, plan, *, reads, position=None):
                    files = RecordFiles(tuple(reversed(plan.files)), plan.compression)
                    return files.records().repeat(self.options.num_epochs)

        read by ``build_pipeline(plan, options, kind, order=ReverseFileOrder(options))``.
    """

    #: The order's name, in messages.
    name: ClassVar[str] = ""
    #: Whether the in-memory pipeline serves this order (:meth:`held_order`); when not,
    #: ``in_memory=True`` is refused and ``"auto"`` streams.
    held: ClassVar[bool] = False
    #: Whether the batches of a pass come in a drawn order (a bucketed read then shuffles
    #: the batches it cuts from each pool).
    shuffles: ClassVar[bool] = False
    #: Whether a pass of any ``num_epochs`` (not only 1) is entered at a position: its
    #: records are numbered through the pass's epochs by arithmetic (a mixture's).
    enters_any_num_epochs: ClassVar[bool] = False

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    @classmethod
    def refuse(cls, options: ReadOptions) -> None:
        """Raise ``ValueError`` for options this order cannot be read with.

        The base refuses ``in_memory=True`` when the order cannot be held in memory.
        """
        if not cls.held and options.in_memory is True:
            raise ValueError(
                f"Expected in_memory=False with the {cls.name} order (the in-memory "
                f"pipeline cannot serve it). Received: in_memory={options.in_memory!r}"
            )

    @classmethod
    def refuse_queue(cls, options: ReadOptions) -> None:
        """Raise ``ValueError`` when a queue pipeline (``pipeline="queue"``) cannot read it."""
        del options

    def held_order(self) -> int | str | None:
        """The order the in-memory pipeline serves, as the readers' ``shuffle`` says it.

        ``None`` the stored order, ``N`` a buffer of ``N`` over the held examples,
        ``"global"`` a fresh permutation each pass
        (:func:`~tfr_hooks.tfrecord.pipelines.memory.serve.memory_dataset`).
        """
        return None

    @property
    def seed(self) -> int | None:
        """The seed a position records (``None``: the order draws nothing)."""
        return self.options.seed

    def knows_length(self, workers: int) -> bool:
        """Whether a worker's pass has the length of the whole pass (its cardinality).

        Served batches (``service``) never do; the base order's always do otherwise.
        """
        del workers
        return True

    def enters(self, plan: Plan, kind: PipelineKind) -> bool:
        """Whether a pass of ``kind`` can be entered at a position (else it is replayed).

        In memory, the held examples are entered by the memory pipeline's arithmetic
        where the order is a permutation or the stored order.
        """
        del plan, kind
        return False

    def new_position(
        self, plan: Plan, *, batch_size: int, workers: int, grain: int
    ) -> ReadPosition:
        """The position of a read that :meth:`enters` its passes (streamed or packed).

        A :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`; an order whose
        passes depend on more than the epoch and records (a mixture's stretches of
        weights) returns its own.
        """
        del plan
        return ReadPosition(batch_size, workers=workers, seed=self.seed, grain=grain)

    @abc.abstractmethod
    def records(
        self, plan: Plan, *, reads: int, position: ReadPosition | None = None
    ) -> tf.data.Dataset:
        """The serialized records of the passes (``num_epochs`` of them), in this order.

        Args:
            plan: The files, their format, compression and damage.
            reads: Files read at once.
            position: Where each new iterator starts (only when :meth:`enters`).
        """

    def batches(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """Parsed batches of ``options.batch_size`` (files of one example a record)."""
        records = self.records(plan, reads=reads, position=position)
        batches = records.batch(options.batch_size, drop_remainder=options.drop_remainder)
        return batches.map(
            plan.parse_batch,
            num_parallel_calls=calls,
            deterministic=options.config.deterministic,
        )

    def packed(
        self,
        plan: Plan,
        options: ReadOptions,
        *,
        reads: int,
        calls: int,
        position: ReadPosition | None = None,
    ) -> tf.data.Dataset:
        """Batches of examples from packed shards: windows of blocks, unpacked in order."""
        from tfr_hooks.tfrecord.pipelines.packed_batches import window_blocks

        del calls
        blocks = self.records(plan, reads=reads, position=position)
        per_record = plan.per_record
        examples = blocks.batch(window_blocks(options.batch_size, per_record, 0)).map(
            lambda serialized: unpack(plan.schema, serialized, per_record),
            num_parallel_calls=2,
            deterministic=options.config.deterministic,
        )
        return examples.rebatch(options.batch_size, drop_remainder=options.drop_remainder)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def position_of(
    plan: Plan, options: ReadOptions, kind: PipelineKind, order: Order
) -> ReadPosition | None:
    """A :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition` when the pipeline can seek.

    One pass an iterator (``num_epochs=1``, or any for an order that
    :attr:`~Order.enters_any_num_epochs`; in graph mode, an initialization), read in
    this process (no service). Streamed or on packed shards, where ``order`` says a pass
    can be entered (:meth:`~tfr_hooks.tfrecord.pipelines.orders.base.Order.enters`: the
    global order, an unshuffled stream read in a fixed order); on one undamaged worker
    the in-memory pipelines (the stored order or a permutation, not bucketed). Streamed bucketing
    (pools sorted by length) seeks too, to a pool's start (``grain``: the pool's
    batches). Under ``MultiWorkerMirroredStrategy`` the streams read one global
    sequence split by data (see the module), so their position holds on any worker
    count. A graph-mode cluster (asynchronous workers, no global batch) has none. Else
    ``None``: a resumed run replays.
    """
    if options.service is not None:
        return None
    if options.num_epochs != 1 and not order.enters_any_num_epochs:
        return None
    bucketed = options.shaping.bucket_boundaries is not None
    if bucketed and kind.in_memory:
        return None  # in memory, buckets drawn per pass
    # bucketed, the batches are cut from pools: a pass is entered at a pool's start
    grain = options.config.bucket_pool if bucketed else 1
    workers = current_task().num_workers
    if workers > 1 and not tf.executing_eagerly():
        return None  # a graph-mode cluster: each worker at its own pace, restored by the chief
    if kind.in_memory:
        if workers > 1 or plan.damage is not None or not order.enters(plan, kind):
            return None  # a buffer's order is a stream: entered by replay, as streamed
        return ReadPosition(options.batch_size, seed=options.seed)
    if not order.enters(plan, kind):
        return None
    return order.new_position(plan, batch_size=options.batch_size, workers=workers, grain=grain)
