"""The ``tf.data`` pipeline both readers build: streamed, packed, or held in memory.

:func:`choose_kind` decides once, from the :class:`~tfr_hooks.tfrecord.pipelines.plan.Plan` and
the :class:`~tfr_hooks.tfrecord.pipelines.options.ReadOptions`, which
:class:`~tfr_hooks.tfrecord.pipelines.options.PipelineKind` to build (with ``in_memory="auto"``
it logs its choice and why); :func:`build_pipeline` builds it.
:func:`~tfr_hooks.tfrecord.dataset` returns that pipeline (sharded among a strategy's
workers) and :func:`~tfr_hooks.tfrecord.read_batches` wraps it in an initializable
iterator for graph mode.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.service.address import check_dispatcher
from tfr_hooks.task import current_task
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.formats.reading import format_of
from tfr_hooks.tfrecord.pipelines.contract import epoch_steps
from tfr_hooks.tfrecord.pipelines.memory.build import memory_kind, memory_pipeline
from tfr_hooks.tfrecord.pipelines.memory.serve import PARALLEL_CALLS
from tfr_hooks.tfrecord.pipelines.mixture_sources import mixture_plan
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
from tfr_hooks.tfrecord.pipelines.orders.base import Order, position_of
from tfr_hooks.tfrecord.pipelines.orders.choice import order_of
from tfr_hooks.tfrecord.pipelines.plan import Plan, plan_with
from tfr_hooks.tfrecord.pipelines.pools import batch_pools
from tfr_hooks.tfrecord.pipelines.position import ReadPosition, at_most
from tfr_hooks.tfrecord.pipelines.ragged import Shaping, batch_examples, bucket_key, pad_batch
from tfr_hooks.tfrecord.pipelines.stages import as_dict, finish, map_batches

__all__ = ["plan_of", "choose_kind", "build_pipeline", "serve"]

logger = logging.getLogger(__name__)


def plan_of(files: Files, options: ReadOptions) -> Plan:
    """What a reader reads for ``options``: the files, their compression and the schema.

    See :func:`~tfr_hooks.tfrecord.pipelines.plan.make_plan`; a mapping of named sources
    (a mixture, ``weights=``): :func:`~tfr_hooks.tfrecord.pipelines.mixture_sources.mixture_plan`.
    """
    if isinstance(files, Mapping) or options.weights is not None:
        return mixture_plan(files, options)
    return plan_with(files, options)


def choose_kind(plan: Plan, options: ReadOptions, *, queue: bool = False) -> PipelineKind:
    """The kind of pipeline to build for ``plan`` and ``options`` (``queue``: queues).

    With ``in_memory="auto"`` this measures the data against ``memory_budget``, lets
    :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` choose what to hold in memory, and logs the
    choice at INFO level. Otherwise it reads the files it has: packed shards as
    :attr:`~PipelineKind.PACKED`, others as :attr:`~PipelineKind.STREAMED` (it cannot
    repack files of one example a record; the remedy and ``tfr-hooks measure`` advise it).
    """
    if queue:
        return PipelineKind.QUEUE
    held = memory_kind(plan, options, order_of(options)) if options.in_memory else None
    if held is not None:
        return held
    return PipelineKind.PACKED if plan.per_record > 1 else PipelineKind.STREAMED


def build_pipeline(
    plan: Plan,
    options: ReadOptions,
    kind: PipelineKind,
    *,
    seekable: bool = False,
    order: Order | None = None,
) -> tuple[tf.data.Dataset, int | None, ReadPosition | None]:
    """The ``tf.data`` pipeline of ``kind``, the examples of a pass, and its position.

    The examples are ``None`` when unknown; the position (see
    :func:`~tfr_hooks.tfrecord.pipelines.orders.base.position_of`) is ``None`` when the
    pipeline cannot start a pass anywhere, or when not ``seekable`` (asked by the readers,
    whose facts carry it: a pass entered at a position is shorter, so the dataset
    declares its cardinality without asserting it). Its
    elements are what the reader returns: dicts of batch tensors, or tuples when
    ``as_tuple`` names the features. ``order`` is the order of the passes
    (:mod:`~tfr_hooks.tfrecord.pipelines.orders`), by default the one ``options``
    choose.

    Raises:
        ValueError: ``kind`` holds the data in memory, and ``order`` cannot be held.
    """
    if kind is PipelineKind.QUEUE:
        raise ValueError("Expected a tf.data kind of pipeline; a queue is built by queue.py")
    if options.service is not None:  # each file's format (a mixture's may differ)
        for path in plan.files:
            reading = format_of(path)
            if not reading.servable:
                raise ValueError(
                    f"Expected files a tf.data service worker can read: {reading.name} files "
                    "are read through tf.numpy_function, which the service cannot run (read "
                    f"them without service=). Received: service={options.service!r}, "
                    f"file={path!r}"
                )
    if order is None:
        order = order_of(options)  # the one place the order is chosen
    position = position_of(plan, options, kind, order) if seekable else None
    if kind.in_memory:  # as_tuple applied there
        if not order.held:
            raise ValueError(
                f"Expected an order the in-memory pipeline can serve with kind={kind.name}. "
                f"Received: order={order!r}"
            )
        data, examples = memory_pipeline(plan, options, kind, order, position)
        finished = finish(data, None, prefetch=None, autotune=options.config.autotune)
        return finished, examples, position
    return _build_dataset(plan, options, order, position), plan.examples, position


def _build_dataset(
    plan: Plan, options: ReadOptions, order: Order, position: ReadPosition | None = None
) -> tf.data.Dataset:
    """The streamed pipeline: from shards of one example a record, or packed shards.

    ``order`` gives the parsed batches (:meth:`~.orders.base.Order.batches`, or
    :meth:`~.orders.base.Order.packed` for packed shards); then ``map_fn``, pools or
    padding, ``batch_map_fn`` and the last stages follow, whatever the order.

    Bucketed (``bucket_boundaries``), it reads pools of ``bucket_pool`` batches, parsed
    as one batch each, and cuts each pool into batches by length (see
    :mod:`tfr_hooks.tfrecord.pipelines.pools`).
    """
    batch_size, shaping, config = options.batch_size, options.shaping, options.config
    autotune = config.autotune
    reads = config.num_parallel_reads or min(len(plan.files), 4)
    calls = tf.data.AUTOTUNE if autotune else PARALLEL_CALLS
    prefetch = config.prefetch
    if prefetch == tf.data.AUTOTUNE and not autotune:
        prefetch = 2
    bucketed = shaping.bucket_boundaries is not None
    read = (  # bucketed: whole pools, read and parsed as one batch each
        dataclasses.replace(
            options, batch_size=batch_size * config.bucket_pool, drop_remainder=False
        )
        if bucketed
        else options
    )
    of_order = order.packed if plan.per_record > 1 else order.batches
    parsed = of_order(plan, read, reads=reads, calls=calls, position=position)
    if callable(options.map_fn):  # a mapping by source name: mapped by the order
        examples = parsed.unbatch().map(
            as_dict(options.map_fn, plan.names),
            num_parallel_calls=calls,
            deterministic=config.deterministic,
        )
        parsed = batch_examples(examples, read.batch_size, read.drop_remainder)
    if bucketed:
        parsed = batch_pools(
            parsed,
            key=_batch_key(shaping, parsed.element_spec),
            batch_size=batch_size,
            drop_remainder=options.drop_remainder,
            seed=options.seed,
            shuffle=order.shuffles,
            deterministic=config.deterministic,
            calls=calls,
        )
    if shaping.pads:
        parsed = parsed.map(
            lambda batch: pad_batch(batch, shaping), num_parallel_calls=calls, deterministic=True
        )
    if options.batch_map_fn is not None:
        parsed = map_batches(parsed, options.batch_map_fn)
    # served, the batches of an epoch depend on how the workers split the files (each
    # worker batches its own share); bucketed, each full pool gives whole batches
    if options.service is None and order.knows_length(current_task().num_workers):
        parsed = _with_cardinality(parsed, plan, options, position)
    return finish(parsed, plan.names, prefetch=prefetch, autotune=autotune)


def serve(data: tf.data.Dataset, service: str, *, job_name: str | None = None) -> tf.data.Dataset:
    """``data``, run by the workers of the tf.data service at ``service``.

    Mode ``"distributed_epoch"`` (``ShardingPolicy.DYNAMIC``): the dispatcher hands the
    splits of the pipeline's first source to the workers one at a time, so that an
    epoch (an iteration) visits every split once, split over the workers. ``data`` must
    be built for it (``ReadOptions.service`` set): its source is then ranges of index
    blocks of the files, or whole files when compressed (see
    :mod:`tfr_hooks.tfrecord.pipelines.splits`), never a shuffled file list, which
    would give every worker every file. Each worker runs the whole pipeline (read,
    shuffle, parse, ``map_fn``, batch, pad, bucket, ``batch_map_fn``) on its splits and
    sends batches. Each new iteration (in graph mode,
    each initialization of the iterator) is a new epoch. ``distribute`` takes the
    ``element_spec`` from ``data``, so graph mode needs none given. Batches are sent
    uncompressed (``compression=None``): decoded pixels and parsed numbers compress
    little, and compressing costs every worker and trainer CPU time for each batch
    (TensorFlow's default, ``"AUTO"``, slowed the benchmark's pinned-core service rows).

    Its cardinality is unknown: the loops end an epoch at the data's end.

    Args:
        data: The pipeline built locally, as without the service.
        service: The dispatcher's address, ``"grpc://HOST:PORT"``.
        job_name: A job the trainers share (each gets a part of every epoch), or
            ``None`` for a job of this iterator alone.

    Raises:
        ConnectionError: No dispatcher answers at ``service`` (at once, naming it).
    """
    check_dispatcher(service)
    service_api = tf.data.experimental.service
    return data.apply(
        service_api.distribute(
            processing_mode=service_api.ShardingPolicy.DYNAMIC,
            service=service,
            job_name=job_name,
            compression=None,
        )
    )


def _batch_key(shaping: Shaping, spec: Any) -> str:
    """The feature of batches ``spec`` whose length orders a pool (only ragged ones vary)."""
    if not isinstance(spec, dict):
        raise ValueError(expected("map_fn", "a dict of features to bucket its output", spec))
    fixed = tf.TensorSpec([])  # a dense batch feature: one length for all its rows
    return bucket_key(
        shaping, {k: s if isinstance(s, tf.RaggedTensorSpec) else fixed for k, s in spec.items()}
    )


def _with_cardinality(
    data: tf.data.Dataset, plan: Plan, options: ReadOptions, position: ReadPosition | None
) -> tf.data.Dataset:
    """Tell the dataset its length when ``schema.json`` gives every file's examples.

    Asserted; with a ``position``, declared only (a pass entered there is shorter).
    """
    batches = epoch_steps(plan.examples, options)
    if batches is None or position is not None:
        return data if batches is None else at_most(data, batches)
    return data.apply(tf.data.experimental.assert_cardinality(batches))
