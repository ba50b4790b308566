"""Graph-mode batch tensors from TFRecord files: :func:`read_batches` and its :class:`Batches`.

``pipeline="dataset"`` builds the ``tf.data`` pipeline :func:`~tfr_hooks.tfrecord.dataset`
builds, behind an initializable iterator; ``pipeline="queue"`` builds queue runners
(:mod:`tfr_hooks.tfrecord.pipelines.queue`). The :class:`Batches` carry what a loop needs to run
them, and what the reader knows of them (``Batches.facts``, the input contract of
:mod:`tfr_hooks.tfrecord.pipelines.contract`), for ``SessionLoop(data=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.pipelines.contract import (
    ReadFacts,
    epoch_steps,
    facts_of_dataset,
    position_of_source,
)
from tfr_hooks.tfrecord.pipelines.options import (
    PipelineKind,
    ReadArgs,
    ReadOptions,
    Unpack,
    queue_capacity,
    read_options,
)
from tfr_hooks.tfrecord.pipelines.orders.choice import order_for
from tfr_hooks.tfrecord.pipelines.pipeline import build_pipeline, choose_kind, plan_of, serve
from tfr_hooks.tfrecord.pipelines.plan import Plan
from tfr_hooks.tfrecord.pipelines.position import ReadPosition
from tfr_hooks.tfrecord.pipelines.queue import check_queue_plan, queue_batches

__all__ = ["Batches", "batches_of", "read_batches", "PIPELINES"]


#: The pipelines :func:`read_batches` can build.
PIPELINES = ("dataset", "queue")


@dataclass(frozen=True)
class Batches:
    """Graph-mode batch tensors, what a loop needs to run them, and what the reader knows.

    Attributes:
        tensors: A dict of named batch tensors, or a tuple of them when ``as_tuple`` was
            given.
        initializers: Ops to run at the start of each epoch: the iterator's initializer
            for the ``"dataset"`` pipeline, none for ``"queue"``.
        batch_size: A scalar ``int32`` tensor: the size of the current batch (for
            ``SessionLoop(batch_size=...)``). Running it takes the next batch.
        facts: What the reader knows of these batches
            (:class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts`, the input contract): the
            pipeline ``kind``, the ``files``, ``schema`` and ``compression`` read, the
            ``examples`` of one pass, the ``num_epochs`` of one initialization, the
            ``service``, the ``corrupt_records`` skipped.
        position: Where the next pass starts, when the pipeline can start a pass anywhere
            (a :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`, whose
            variables live in the graph), else ``None``: a resumed run then replays.
    """

    tensors: Any
    initializers: list[Any]
    batch_size: Any
    facts: ReadFacts
    position: ReadPosition | None = None


def read_batches(
    files: Files, batch_size: int, *, pipeline: str = "dataset", **options: Unpack[ReadArgs]
) -> Batches:
    """Graph-mode batch tensors from TFRecord files, through ``tf.data`` or queues.

    Call inside a graph (``with tf.Graph().as_default():`` or after
    ``tf.compat.v1.disable_eager_execution()``). Every pipeline parses whole batches and
    returns tensors of static shape except, without ``drop_remainder``, the batch
    dimension; ``tf_keras.layers.Input(tensor=...)`` accepts them. It takes the options
    :func:`~tfr_hooks.tfrecord.dataset` takes, with the same meanings and defaults.

    * ``pipeline="dataset"``: an initializable iterator over the pipeline
      :func:`~tfr_hooks.tfrecord.dataset` builds; ``Batches.initializers`` holds its
      initializer, to run at each epoch start. One initialization reads ``num_epochs``
      passes, then ``OutOfRangeError`` (never with ``num_epochs=None``). With
      ``shuffle``, every pass has its own order (each initialization draws the
      next seed of a sequence that ``seed`` fixes), the same sequence in a new graph
      built alike.
    * ``pipeline="dataset", in_memory=True``: every shard is read and decoded once,
      here; batches are gathered from memory (:mod:`tfr_hooks.tfrecord.pipelines.memory`) through
      an initializable iterator as above. The data reaches the graph through a
      ``tf.numpy_function``, never as a constant.
    * ``pipeline="queue"``: ``string_input_producer(num_epochs=...)``, one
      ``TFRecordReader`` per reader thread, and ``shuffle_batch_join`` (``batch_join``
      with ``shuffle=None``). Queue runners land in the graph's ``QUEUE_RUNNERS``
      collection; start them (``SessionLoop`` does) and run
      ``tf.compat.v1.local_variables_initializer()`` when ``num_epochs`` is set.
      ``OutOfRangeError`` comes after ``num_epochs`` passes (never when ``None``).
      ``SessionLoop(data=...)`` splits this one stream into epochs of
      ``facts.examples`` examples when the count is known (see
      :class:`~tfr_hooks.SessionLoop`). It cannot bucket, map examples, hold the data
      in memory or be served.

    Either way, give the :class:`Batches` to ``SessionLoop(data=...)`` (or
    ``hooked_session(data=...)``): the loop runs its initializers, weighs by its batch
    size and turns read errors into messages naming the file. Running
    ``Batches.batch_size`` takes a batch, so each step of the loop takes one and every
    epoch ends, whatever the train op reads. An op that reads no batch (a step counter)
    also runs in the ``session.run`` that finds the end of the data: it counts one run
    more per pass than there are batches.

    Args:
        files: Paths, directories (the shards of their ``schema.json``) or glob patterns.
        batch_size: Examples per batch.
        pipeline: ``"dataset"`` (``tf.data``) or ``"queue"`` (queue runners).
        **options: The readers' options, by keyword, as for
            :func:`~tfr_hooks.tfrecord.dataset`: see
            :class:`~tfr_hooks.tfrecord.ReadArgs` and
            :class:`~tfr_hooks.tfrecord.ReadConfig` (whose ``capacity`` and ``name``
            only this reader reads, and ``shard`` only the others).

    Returns:
        A :class:`Batches`.

    Raises:
        RuntimeError: If called eagerly.
        TypeError: As :func:`~tfr_hooks.tfrecord.dataset`, for a keyword.
        ValueError: For a bad argument, or ``in_memory``, ``map_fn``,
            ``bucket_boundaries`` or ``service`` with ``pipeline="queue"``, or
            ``in_memory`` with ``service``.
        ConnectionError: If no tf.data service dispatcher answers at ``service``.
        TFRecordError: As :func:`~tfr_hooks.tfrecord.dataset`, for files and schema.

    Examples:
        >>> with tf.Graph().as_default():  # doctest: +SKIP
        ...     batches = tfrecord.read_batches("data/mnist", 128, pipeline="queue",
        ...                                     shuffle=512, num_epochs=5,
        ...                                     as_tuple=("image", "label"))
        ...     x, y = batches.tensors
        ...     loop = tfr_hooks.SessionLoop(train_op, fetches={"loss": loss},
        ...                                  data=batches)
    """
    _check_graph_mode()
    if pipeline not in PIPELINES:
        raise ValueError(expected("pipeline", "'dataset' or 'queue'", pipeline))
    checked = read_options("read_batches", batch_size, options)
    queue = pipeline == "queue"
    order_for(checked, queue=queue)  # what the order refuses
    capacity = _pipeline_capacity(queue, checked)
    plan = plan_of(files, checked)
    if queue:
        check_queue_plan(plan)
    kind = choose_kind(plan, checked, queue=queue)
    with tf.name_scope(checked.config.name):
        tensors, initializers, examples, position = _graph_batches(plan, checked, kind, capacity)
        first = tensors[0] if isinstance(tensors, tuple) else next(iter(tensors.values()))
        size = _batch_size_of(first)
    bucketed = checked.shaping.bucket_boundaries is not None and not kind.in_memory
    steps = None if bucketed else epoch_steps(examples, checked)
    facts = ReadFacts.of_read(plan, checked, kind, examples, steps)
    position = None if checked.service is not None else position
    return Batches(tensors, initializers, size, facts, position)


def batches_of(data: tf.data.Dataset) -> Batches:
    """Graph-mode batch tensors of a dataset built in the graph, for ``SessionLoop(data=...)``.

    An initializable iterator over ``data``, as ``read_batches(pipeline="dataset")``
    builds over its own pipeline, with the facts found for ``data``
    (:func:`~tfr_hooks.tfrecord.pipelines.contract.facts_of_dataset`): a
    :func:`~tfr_hooks.tfrecord.dataset` built in the graph, alone or followed by
    ``.map()``, ``.prefetch()`` or ``.with_options()``, has its reader's, so a run
    resumed by ``EpochCheckpoint`` seeks where ``read_batches`` would; any other dataset
    has the steps of its cardinality, and its resumed runs replay.

    Args:
        data: A dataset of batches (dicts or tuples of tensors) built in the current
            graph.

    Returns:
        A :class:`Batches`.

    Raises:
        RuntimeError: If called eagerly.
        TypeError: If ``data`` is not a ``tf.data.Dataset``.

    Examples:
        >>> with tf.Graph().as_default():  # doctest: +SKIP
        ...     train = tfrecord.dataset("data/train", 128, shuffle="global", seed=1)
        ...     batches = tfrecord.batches_of(train.map(augment))
        ...     loop = tfr_hooks.SessionLoop(train_op, data=batches,
        ...                                  hooks=[tfr_hooks.EpochCheckpoint("ckpt")])
    """
    _check_graph_mode()
    if not isinstance(data, tf.data.Dataset):
        raise TypeError(expected("data", "a tf.data.Dataset built in the graph", data))
    facts = facts_of_dataset(data, why="training data")
    position = position_of_source(data)
    iterator = tf.compat.v1.data.make_initializable_iterator(data)
    tensors = iterator.get_next()
    first = tensors[0] if isinstance(tensors, tuple) else next(iter(tensors.values()))
    return Batches(tensors, [iterator.initializer], _batch_size_of(first), facts, position)


def _check_graph_mode() -> None:
    if tf.executing_eagerly():
        raise RuntimeError(
            "read_batches builds graph-mode tensors: call it inside "
            "`with tf.Graph().as_default():` or after tf.compat.v1.disable_eager_execution()"
            ", or use tfrecord.dataset(...) in eager code."
        )


def _pipeline_capacity(queue: bool, options: ReadOptions) -> int | None:
    """The queue's capacity, checked, for ``pipeline="queue"``; else check none is given.

    Raises:
        ValueError: ``capacity`` with ``"dataset"``; ``service`` or options a queue cannot
            build with ``"queue"``.
    """
    capacity = options.config.capacity
    if not queue:
        if capacity is not None:
            raise ValueError(
                expected(
                    "read_config.capacity",
                    "None with pipeline='dataset' (a queue's capacity)",
                    capacity,
                )
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
    return queue_capacity(options)


def _graph_batches(
    plan: Plan, options: ReadOptions, kind: PipelineKind, capacity: int | None
) -> tuple[Any, list[Any], int | None, ReadPosition | None]:
    """The batch tensors of ``kind``, their initializers, a pass's examples, the position.

    The position is where the next initialization starts, when the pipeline can seek.
    """
    if kind is PipelineKind.QUEUE:
        return queue_batches(plan, options, capacity or 0), [], plan.examples, None
    data, num_examples, position = build_pipeline(plan, options, kind, seekable=True)
    if options.service is not None:
        data = serve(data, options.service)
    iterator = tf.compat.v1.data.make_initializable_iterator(data)
    # a position readies its own variables where the pass reads them (ReadPosition.start);
    # a second "initialize if not yet" here would race with that read in the same run (no
    # order between the two) and could put a counted pass back to 0: the same order twice
    return iterator.get_next(), [iterator.initializer], num_examples, position


def _batch_size_of(tensor: Any) -> Any:
    """The size of the batch ``tensor`` is part of, a tensor that takes the batch.

    Running it takes the next batch from the input (the iterator's ``get_next``, the
    queue's dequeue), as running any batch tensor does. A batch dimension known when the
    graph is built (``drop_remainder=True``) makes ``tf.shape(tensor)[0]`` a constant: a
    loop fetching only it with a train op that reads no batch (a counter) would never
    reach the end of the data. The control
    dependency on the batch's op keeps the read in every run that fetches the size.
    """
    ops = [tensor.flat_values.op if isinstance(tensor, tf.RaggedTensor) else tensor.op]
    with tf.control_dependencies(ops):
        if isinstance(tensor, tf.RaggedTensor):
            return tf.identity(tensor.nrows(out_type=tf.int32))
        return tf.identity(tf.shape(tensor)[0])
