"""Graph-mode batch tensors from TFRecord files: :func:`read_batches` and its :class:`Batches`.

``pipeline="dataset"`` builds the ``tf.data`` pipeline :func:`~tfr_hooks.tfrecord.dataset`
builds, behind an initializable iterator; ``pipeline="queue"`` builds queue runners
(:mod:`tfr_hooks.tfrecord.queue`). The :class:`Batches` carry what a loop needs to run
them, and what the reader knows of them (``Batches.facts``, the input contract of
:mod:`tfr_hooks.tfrecord.contract`), for ``SessionLoop(data=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.tfrecord.contract import ReadFacts
from tfr_hooks.tfrecord.damage import CorruptRecord
from tfr_hooks.tfrecord.files import Files
from tfr_hooks.tfrecord.options import PipelineKind, ReadOptions, queue_capacity, read_options
from tfr_hooks.tfrecord.pipeline import build_pipeline, choose_kind, serve
from tfr_hooks.tfrecord.plan import Plan, make_plan
from tfr_hooks.tfrecord.queue import check_queue_plan, queue_batches
from tfr_hooks.tfrecord.ragged import PadTo
from tfr_hooks.tfrecord.schema import Schema
from tfr_hooks.tfrecord.sources.base import SchemaLike

__all__ = ["Batches", "read_batches", "PIPELINES"]


#: The pipelines :func:`read_batches` can build.
PIPELINES = ("dataset", "queue")


@dataclass
class Batches:
    """Graph-mode batch tensors and what a loop needs to run them.

    Attributes:
        tensors: A dict of named batch tensors, or a tuple of them when ``as_tuple`` was
            given.
        initializers: Ops to run at the start of each epoch: the iterator's initializer
            for the ``"dataset"`` pipeline, none for ``"queue"``.
        files: The files read.
        schema: The schema parsed with (only the features returned).
        kind: The :class:`~tfr_hooks.tfrecord.options.PipelineKind` built: streamed,
            packed, in memory (decoded or encoded) or queue.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        batch_size: A scalar ``int32`` tensor: the size of the current batch (for
            ``SessionLoop(batch_size=...)``). Running it takes the next batch, also
            when the batch dimension is static.
        num_examples: Examples in one pass over the files, when known (from
            ``schema.json``, or loaded into memory).
        examples_per_record: Examples stored in each record (more than 1 for packed
            shards).
        num_epochs: The ``num_epochs`` the pipeline was built with: passes per
            initialization for ``"dataset"``, in the one stream for ``"queue"``
            (``None``: endless).
        service: The tf.data service dispatcher whose workers run the pipeline
            (``"grpc://HOST:PORT"``), or ``None`` when it runs in this process.
            ``kind`` is then what the workers build (streamed or packed).
        batch_examples: The ``batch_size`` the reader was given (an int).
        drop_remainder: Whether each pass drops its final, smaller batch.
        corrupt_records: The damaged records skipped (``max_corrupt_records`` above 0),
            or ``None`` when the reader did not look for them (0, the default).
    """

    tensors: Any
    initializers: list[Any]
    files: list[str]
    schema: Schema
    kind: PipelineKind
    compression: str
    batch_size: Any = field(default=None)
    num_examples: int | None = None
    examples_per_record: int = 1
    num_epochs: int | None = None
    service: str | None = None
    batch_examples: int | None = None
    drop_remainder: bool = False
    corrupt_records: tuple[CorruptRecord, ...] | None = None

    @property
    def pipeline(self) -> str:
        """``"dataset"`` or ``"queue"``: the ``pipeline`` that built the batches."""
        return self.kind.pipeline

    @property
    def in_memory(self) -> bool:
        """Whether the data is held in memory (``in_memory=True``, or ``"auto"`` chose it)."""
        return self.kind.in_memory

    @property
    def facts(self) -> ReadFacts:
        """What the reader knows of these batches, as the loops take it (the input contract).

        See :class:`~tfr_hooks.tfrecord.contract.ReadFacts`.
        """
        return ReadFacts(
            kind=self.kind,
            files=tuple(self.files),
            schema=self.schema,
            compression=self.compression,
            batch_size=self.batch_examples,
            drop_remainder=self.drop_remainder,
            num_epochs=self.num_epochs,
            examples=self.num_examples,
            steps=None
            if self.service
            else _steps_of(
                self.num_examples, self.batch_examples, self.num_epochs, self.drop_remainder
            ),
            examples_per_record=self.examples_per_record,
            service=self.service,
            corrupt_records=self.corrupt_records,
        )


def read_batches(
    files: Files,
    batch_size: int,
    *,
    schema: SchemaLike = None,
    pipeline: str = "dataset",
    shuffle_buffer: int = 0,
    seed: int | None = None,
    num_parallel_reads: int | None = None,
    drop_remainder: bool = False,
    num_epochs: int | None = 1,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    batch_map_fn: Callable[[Any], Any] | None = None,
    in_memory: bool | str = False,
    memory_budget: int | None = None,
    capacity: int | None = None,
    as_tuple: Sequence[str] | None = None,
    compression: str | None = None,
    name: str = "tfrecord_input",
    decode: Mapping[str, Any] | None = None,
    pad_to: PadTo = None,
    padding_values: Any = None,
    bucket_boundaries: Sequence[int] | None = None,
    bucket_by: str | None = None,
    service: str | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
) -> Batches:
    """Graph-mode batch tensors from TFRecord files, through ``tf.data`` or queues.

    Call inside a graph (``with tf.Graph().as_default():`` or after
    ``tf.compat.v1.disable_eager_execution()``). Every pipeline parses whole batches and
    returns tensors of static shape except, without ``drop_remainder``, the batch
    dimension; ``tf_keras.layers.Input(tensor=...)`` accepts them. The arguments it
    shares with :func:`dataset` have the same names, meanings and defaults.

    * ``pipeline="dataset"``: an initializable iterator over the pipeline
      :func:`dataset` builds; ``Batches.initializers`` holds its initializer, to run at
      each epoch start. One initialization reads ``num_epochs`` passes, then
      ``OutOfRangeError`` (never with ``num_epochs=None``). With ``shuffle_buffer``,
      every pass has its own order (each initialization draws the next seed of a
      sequence that ``seed`` fixes), the same sequence in a new graph built alike.
    * ``pipeline="dataset", in_memory=True``: every shard is read and decoded once,
      here; batches are gathered from memory (:mod:`tfr_hooks.tfrecord.memory`) through
      an initializable iterator as above. Each initialization reads ``num_epochs``
      passes, each along a fresh permutation of all the examples when
      ``shuffle_buffer > 0``; each pass ends with its own final batch. The data reaches
      the graph through a ``tf.numpy_function``, never as a constant.
    * ``pipeline="queue"``: ``string_input_producer(num_epochs=...)``, one
      ``TFRecordReader`` per reader thread, and ``shuffle_batch_join`` (``batch_join``
      when ``shuffle_buffer`` is 0). Queue runners land in the graph's ``QUEUE_RUNNERS``
      collection; start them (``SessionLoop`` does) and run
      ``tf.compat.v1.local_variables_initializer()`` when ``num_epochs`` is set.
      ``OutOfRangeError`` comes after ``num_epochs`` passes (never when ``None``).
      ``SessionLoop(data=...)`` splits this one stream into epochs of ``num_examples``
      examples when the count is known (see :class:`~tfr_hooks.SessionLoop`).

    Either way, give the :class:`Batches` to ``SessionLoop(data=...)`` (or
    ``hooked_session(data=...)``): the loop runs its initializers, weighs by its batch
    size and turns read errors into messages naming the file. Running
    ``Batches.batch_size`` takes a batch even when the batch dimension is static, so each
    step of the loop takes one and every epoch ends, whatever the train op reads. An op
    that reads no batch (a step counter) also runs in the ``session.run`` that finds the
    end of the data: it counts one run more per pass than there are batches.

    Args:
        files: Paths, directories (the shards of their ``schema.json``) or glob patterns.
        batch_size: Examples per batch.
        schema: A :class:`~tfr_hooks.tfrecord.Schema`, the path of a ``schema.json``, or
            ``None`` to use the stored sidecar or infer it.
        pipeline: ``"dataset"`` (``tf.data``) or ``"queue"`` (queue runners).
        shuffle_buffer: Examples to shuffle among; 0 (the default) keeps the stored
            order. For ``"dataset"``, the ``tf.data`` shuffle buffer as in
            :func:`dataset` (the order of the files is shuffled too; every pass, every
            initialization, reshuffles); in memory, any
            value above 0 gives each pass a fresh permutation of all the examples; for
            ``"queue"``, the ``min_after_dequeue`` of ``shuffle_batch_join`` (and the
            file names are shuffled).
        seed: Seed for the shuffles: the sequence of the passes' orders.
        num_parallel_reads: Files read at once; ``None`` for ``min(files, 4)`` as in
            :func:`dataset`. For ``"queue"`` it is the number of reader threads (one
            ``TFRecordReader`` each, taking the next file name from the queue);
            ``None`` for 2. The meaning differs because a queue pipeline has no
            ``tf.data`` parallelism: its readers are threads of the queue runner, each
            reading a whole file at a time.
        drop_remainder: Whether to drop the final, smaller batch (the batch dimension is
            then static).
        num_epochs: Passes over the data; ``None`` repeats without end.
        map_fn: As for :func:`dataset`: the per-example (decoding) function, run once
            per example in memory. Only with ``pipeline="dataset"``.
        batch_map_fn: As for :func:`dataset`: applied to every batch, every epoch (for
            ``"queue"``, to the batch tensors).
        in_memory: As for :func:`dataset`: ``True`` decodes every shard once (through
            ``map_fn`` when given) and gathers batches from memory; ``"auto"`` does so
            when the decoded data fits ``memory_budget``, else holds the encoded records
            when they fit, else streams, and logs its choice. Only with
            ``pipeline="dataset"``.
        memory_budget: Bytes the decoded data may take for ``in_memory="auto"``;
            ``None`` for half of the memory available at the call.
        capacity: ``"queue"`` only: the queue's capacity; default ``shuffle_buffer +
            (num_parallel_reads + 2) * batch_size``.
        as_tuple: Feature names to return as a tuple, e.g. ``("x", "y")``; with
            ``map_fn`` or ``batch_map_fn``, the names of the last one's outputs.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        name: Name scope of the ops.
        decode: Changes to the schema, as for :func:`dataset`.
        pad_to: As for :func:`dataset`: ``None`` keeps features of varying length
            ragged, ``"longest"`` pads to the batch's longest row, an integer pads or
            cuts to that length (frames, for a feature list); a dict per feature.
        padding_values: As for :func:`dataset`: the value padding adds.
        bucket_boundaries: As for :func:`dataset`: batches of one length bucket each.
            Only with ``pipeline="dataset"`` (a queue batches records before they are
            parsed, so it cannot group them by length).
        bucket_by: As for :func:`dataset`: the feature whose length picks the bucket.
        service: As for :func:`dataset`: a tf.data service dispatcher whose workers run
            the pipeline, in mode ``"distributed_epoch"``; each initialization of the
            iterator is a new epoch, each example once. The ``element_spec`` the
            service needs in graph mode is the local pipeline's. Only with
            ``pipeline="dataset"`` and ``in_memory=False``.
        max_corrupt_records: As for :func:`dataset`: the damaged records skipped (each
            logged, counted in ``Batches.corrupt_records``); past it, the named error.
            Every pipeline (queue included) reads only the whole records.
        split: As for :func:`dataset`: the split of a TensorFlow Datasets directory.

    Returns:
        A :class:`Batches`.

    Raises:
        RuntimeError: If called eagerly.
        ValueError: For a bad argument, or ``in_memory`` or ``service`` with
            ``pipeline="queue"``, or ``in_memory`` with ``service``.
        ConnectionError: If no tf.data service dispatcher answers at ``service``.
        TFRecordError: As :func:`dataset`, for files and schema.

    Examples:
        >>> with tf.Graph().as_default():  # doctest: +SKIP
        ...     batches = tfrecord.read_batches("data/mnist", 128, pipeline="queue",
        ...                                     shuffle_buffer=512, num_epochs=5,
        ...                                     as_tuple=("image", "label"))
        ...     x, y = batches.tensors
        ...     loop = tfr_hooks.SessionLoop(train_op, fetches={"loss": loss},
        ...                                  data=batches)
    """
    _check_graph_mode()
    if pipeline not in PIPELINES:
        raise ValueError(expected("pipeline", "'dataset' or 'queue'", pipeline))
    options = read_options(
        batch_size,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        num_parallel_reads=num_parallel_reads,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        map_fn=map_fn,
        batch_map_fn=batch_map_fn,
        in_memory=in_memory,
        memory_budget=memory_budget,
        pad_to=pad_to,
        padding_values=padding_values,
        bucket_boundaries=bucket_boundaries,
        bucket_by=bucket_by,
        prefetch=1,
        service=service,
        max_corrupt_records=max_corrupt_records,
    )
    queue = pipeline == "queue"
    capacity = _pipeline_capacity(queue, options, capacity)
    plan = make_plan(
        files,
        schema,
        compression,
        as_tuple,
        select=not options.renamed,
        decode=decode,
        max_corrupt_records=options.max_corrupt_records,
        split=split,
    )
    if queue:
        check_queue_plan(plan)
    kind = choose_kind(plan, options, queue=queue)
    with tf.name_scope(name):
        tensors, initializers, num_examples = _graph_batches(plan, options, kind, capacity)
        first = tensors[0] if isinstance(tensors, tuple) else next(iter(tensors.values()))
        size = _batch_size_of(first)
    return Batches(
        tensors,
        initializers,
        plan.files,
        plan.schema,
        kind,
        plan.compression,
        size,
        num_examples,
        plan.per_record,
        num_epochs,
        options.service,
        batch_size,
        drop_remainder,
        None if plan.damage is None else plan.damage.corrupt,
    )


def _check_graph_mode() -> None:
    if tf.executing_eagerly():
        raise RuntimeError(
            "read_batches builds graph-mode tensors: call it inside "
            "`with tf.Graph().as_default():` or after tf.compat.v1.disable_eager_execution()"
            ", or use tfrecord.dataset(...) in eager code."
        )


def _pipeline_capacity(queue: bool, options: ReadOptions, capacity: int | None) -> int | None:
    """The queue's capacity, checked, for ``pipeline="queue"``; else check none is given.

    Raises:
        ValueError: ``capacity`` with ``"dataset"``; ``service`` or options a queue cannot
            build with ``"queue"``.
    """
    if not queue:
        if capacity is not None:
            raise ValueError(
                expected("capacity", "None with pipeline='dataset' (a queue's capacity)", capacity)
            )
        return None
    if options.service is not None:
        raise ValueError(
            expected(
                "pipeline",
                "'dataset' with service= (the service's workers run tf.data pipelines)",
                "queue",
            )
        )
    return queue_capacity(options, capacity)


def _graph_batches(
    plan: Plan, options: ReadOptions, kind: PipelineKind, capacity: int | None
) -> tuple[Any, list[Any], int | None]:
    """The batch tensors of ``kind``, their initializers, and the examples of a pass."""
    if kind is PipelineKind.QUEUE:
        return queue_batches(plan, options, capacity or 0), [], plan.examples
    data, num_examples = build_pipeline(plan, options, kind)
    if options.service is not None:
        data = serve(data, options.service)
    iterator = tf.compat.v1.data.make_initializable_iterator(data)
    return iterator.get_next(), [iterator.initializer], num_examples


def _batch_size_of(tensor: Any) -> Any:
    """The size of the batch ``tensor`` is part of, a tensor that takes the batch.

    Running it takes the next batch from the input (the iterator's ``get_next``, the
    queue's dequeue), as running any batch tensor does. A batch dimension known when the
    graph is built (``drop_remainder=True``, or an in-memory pass the batch size divides)
    makes ``tf.shape(tensor)[0]`` a constant: a loop fetching only it with a train op that
    reads no batch (a counter) would never reach the end of the data. The control
    dependency on the batch's op keeps the read in every run that fetches the size.
    """
    ops = [tensor.flat_values.op if isinstance(tensor, tf.RaggedTensor) else tensor.op]
    with tf.control_dependencies(ops):
        if isinstance(tensor, tf.RaggedTensor):
            return tf.identity(tensor.nrows(out_type=tf.int32))
        return tf.identity(tf.shape(tensor)[0])


def _steps_of(
    examples: int | None, batch_size: int | None, num_epochs: int | None, drop_remainder: bool
) -> int | None:
    """The batches of one initialization of a graph-mode pipeline, when known."""
    if examples is None or batch_size is None or num_epochs is None:
        return None
    total = examples * num_epochs
    return total // batch_size if drop_remainder else -(-total // batch_size)
