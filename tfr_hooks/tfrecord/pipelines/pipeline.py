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
import functools
import json
import logging
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.checks import expected
from tfr_hooks.service.address import check_dispatcher
from tfr_hooks.task import TaskInfo, current_task
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.formats.packed import unpack
from tfr_hooks.tfrecord.pipelines.contract import epoch_steps
from tfr_hooks.tfrecord.pipelines.decide import DataFacts, decide
from tfr_hooks.tfrecord.pipelines.memory.estimate import (
    count_examples,
    default_memory_budget,
    mapped_sample_nbytes,
    records_nbytes,
)
from tfr_hooks.tfrecord.pipelines.memory.loading import Held, load, load_mapped
from tfr_hooks.tfrecord.pipelines.memory.narrow import Widen, narrowing
from tfr_hooks.tfrecord.pipelines.memory.serve import (
    PARALLEL_CALLS,
    fresh_randomness,
    memory_dataset,
)
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
from tfr_hooks.tfrecord.pipelines.order import DEFAULT_WINDOW, GlobalOrder
from tfr_hooks.tfrecord.pipelines.packed_batches import packed_dataset, window_salt
from tfr_hooks.tfrecord.pipelines.passes import record_passes
from tfr_hooks.tfrecord.pipelines.plan import Plan, make_plan
from tfr_hooks.tfrecord.pipelines.pools import batch_pools
from tfr_hooks.tfrecord.pipelines.position import ReadPosition, at_most, position_of
from tfr_hooks.tfrecord.pipelines.ragged import (
    RaggedArray,
    Shaping,
    batch_examples,
    bucket_key,
    bucket_of,
    pad_batch,
)
from tfr_hooks.tfrecord.pipelines.seek import stream_from_position
from tfr_hooks.tfrecord.pipelines.sharding import SHARED_SEED
from tfr_hooks.tfrecord.pipelines.splits import file_indexes

__all__ = [
    "plan_of",
    "choose_kind",
    "build_pipeline",
    "global_record_batches",
    "global_windows",
    "worker_index",
    "serve",
    "finish",
    "structure",
]

logger = logging.getLogger(__name__)


def plan_of(files: Files, options: ReadOptions) -> Plan:
    """What a reader reads for ``options``: the files, their compression and the schema.

    See :func:`~tfr_hooks.tfrecord.pipelines.plan.make_plan`.
    """
    config = options.config
    return make_plan(
        files,
        options.schema,
        config.compression,
        options.as_tuple,
        select=not options.renamed,
        decode=config.decode,
        max_corrupt_records=options.max_corrupt_records,
        split=options.split,
    )


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
    held = _memory_kind(plan, options) if options.in_memory else None
    if held is not None:
        return held
    return PipelineKind.PACKED if plan.per_record > 1 else PipelineKind.STREAMED


def build_pipeline(
    plan: Plan, options: ReadOptions, kind: PipelineKind, *, seekable: bool = False
) -> tuple[tf.data.Dataset, int | None, ReadPosition | None]:
    """The ``tf.data`` pipeline of ``kind``, the examples of a pass, and its position.

    The examples are ``None`` when unknown; the position (see
    :func:`~tfr_hooks.tfrecord.pipelines.position.position_of`) is ``None`` when the
    pipeline cannot start a pass anywhere, or when not ``seekable`` (asked by the readers,
    whose facts carry it: a pass entered at a position is shorter, so the dataset
    declares its cardinality without asserting it). Its
    elements are what the reader returns: dicts of batch tensors, or tuples when
    ``as_tuple`` names the features.
    """
    if kind is PipelineKind.QUEUE:
        raise ValueError("Expected a tf.data kind of pipeline; a queue is built by queue.py")
    position = position_of(plan, options, kind) if seekable else None
    if kind.in_memory:
        data, examples = _memory_data(plan, options, kind, position)  # as_tuple applied there
        finished = finish(data, None, prefetch=None, autotune=options.config.autotune)
        return finished, examples, position
    return _build_dataset(plan, options, position), plan.examples, position


def _build_dataset(
    plan: Plan, options: ReadOptions, position: ReadPosition | None = None
) -> tf.data.Dataset:
    """The streamed pipeline: from shards of one example a record, or packed shards.

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
    if plan.per_record > 1 and options.shuffle == "global":
        parsed = _global_packed(plan, read, calls, position)
    elif plan.per_record > 1:  # packed shards
        parsed = packed_dataset(
            plan.records,
            plan.schema,
            plan.per_record,
            read.batch_size,
            shuffle_buffer=options.shuffle_buffer,
            seed=options.seed,
            num_parallel_reads=reads,
            drop_remainder=read.drop_remainder,
            num_epochs=options.num_epochs,
            prefetch=None,
            deterministic=config.deterministic,
            served=options.service is not None,
        )
    else:
        parsed = _stream_batches(plan, read, reads=reads, calls=calls, position=position)
    if options.map_fn is not None:
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
            shuffle=options.shuffles,
            deterministic=config.deterministic,
            calls=calls,
        )
    if shaping.pads:
        parsed = parsed.map(
            lambda batch: pad_batch(batch, shaping), num_parallel_calls=calls, deterministic=True
        )
    if options.batch_map_fn is not None:
        parsed = _map_batches(parsed, options.batch_map_fn)
    # served, the batches of an epoch depend on how the workers split the files (each
    # worker batches its own share); bucketed, each full pool gives whole batches
    sharded = options.shuffle == "global" and current_task().num_workers > 1
    if options.service is None and not sharded:  # a worker's global share varies
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


def _stream_batches(
    plan: Plan,
    options: ReadOptions,
    *,
    reads: int,
    calls: int,
    position: ReadPosition | None = None,
) -> tf.data.Dataset:
    """Batches parsed from shards of one example a record.

    Shuffled, each pass gets its own order, in graph mode too (a seed drawn anew at every
    initialization, as for packed shards and in memory: see
    :func:`~tfr_hooks.tfrecord.pipelines.passes.record_passes`), reproducibly given ``seed``. With
    ``shuffle="global"``, the batches of :func:`global_record_batches`.
    """
    if options.shuffle == "global":  # parsed a window at once, then cut into batches
        windows = global_windows(plan, options, position=position).map(
            plan.schema.parse_batch,
            num_parallel_calls=calls,
            deterministic=options.config.deterministic,
        )
        return windows.rebatch(options.batch_size, drop_remainder=options.drop_remainder)
    if position is not None:  # unshuffled, entered where the position is
        records = stream_from_position(
            plan.files, reads=reads, deterministic=options.config.deterministic, position=position
        )
        batches = records.batch(options.batch_size, drop_remainder=options.drop_remainder)
        return batches.map(
            plan.schema.parse_batch,
            num_parallel_calls=calls,
            deterministic=options.config.deterministic,
        )
    records, _ = record_passes(
        plan.records,
        reads=reads,
        deterministic=options.config.deterministic,
        buffer=options.shuffle_buffer,
        seed=options.seed,
        num_epochs=options.num_epochs,
        served=options.service is not None,
    )
    batches = records.batch(options.batch_size, drop_remainder=options.drop_remainder)
    return batches.map(
        plan.schema.parse_batch,
        num_parallel_calls=calls,
        deterministic=options.config.deterministic,
    )


def global_record_batches(plan: Plan, options: ReadOptions) -> tf.data.Dataset:
    """Batches of serialized records in the global order (``shuffle="global"``).

    The windows of :func:`global_windows` cut into batches of ``batch_size``.
    """
    return global_windows(plan, options).rebatch(
        options.batch_size, drop_remainder=options.drop_remainder
    )


def global_windows(
    plan: Plan,
    options: ReadOptions,
    *,
    window: int = DEFAULT_WINDOW,
    position: ReadPosition | None = None,
) -> tf.data.Dataset:
    """Windows of serialized records in the global order (``shuffle="global"``): vectors.

    Every new iterator (in graph mode, every initialization of one) reads the next
    ``num_epochs`` epochs of :class:`~tfr_hooks.tfrecord.pipelines.order.GlobalOrder`: eagerly, a
    counter of the iterators made (a variable the dataset increments when an iterator
    starts) numbers them; in graph mode, where an initializable iterator re-runs the
    captured tensors at each initialization, a number drawn anew then from ``seed`` (as
    :func:`~tfr_hooks.tfrecord.pipelines.passes.pass_seed` does). ``seed=None`` draws one seed
    when the pipeline is built (logged at INFO level); under a multi-worker strategy
    every worker then uses the common seed of
    :func:`~tfr_hooks.tfrecord.pipelines.sharding.shared_seed` and reads the whole
    sequence, of which the strategy keeps its part of each global batch (the reader
    splits it by data: the sequence, and a position in it, do not depend on the worker
    count); in a graph-mode cluster worker ``i`` of ``n`` reads the share
    ``shard=(i, n)`` of every epoch. With ``max_corrupt_records``, a damaged file's runs
    of whole records are ordered as files of their own
    (:func:`~tfr_hooks.tfrecord.formats.index.index_runs`): the damage is never read.

    Args:
        plan: The files (uncompressed), and the damage found in them.
        options: The reader's options (``seed``, ``num_epochs``).
        window: Records a window (packed shards: records of ``per_record`` examples).
        position: Where each new iterator starts (one epoch an iterator): it reads the
            epoch and the records the position holds then, so a resumed run seeks there
            instead of replaying.

    Raises:
        ValueError: The files are compressed (naming ``shuffle``).
    """
    order = _global_order(plan, options, window)
    if position is not None:
        return position.start().flat_map(lambda e, r: order.windows_of(e, start=r))
    return _epoch_windows(order, options)


def _global_order(plan: Plan, options: ReadOptions, window: int) -> GlobalOrder:
    """The :class:`GlobalOrder` of ``plan`` for this worker (the seed drawn when ``None``)."""
    if plan.compression:
        raise ValueError(
            "Expected uncompressed files with shuffle='global' (a GZIP or ZLIB file "
            "cannot be entered at a record; decompress the files, or shuffle them with "
            f"shuffle=N, a buffer). Received: shuffle={options.shuffle!r}, "
            f"compression={plan.compression!r}"
        )
    task = current_task()
    seed = options.seed
    if seed is None:
        seed = SHARED_SEED if task.num_workers > 1 else secrets.randbits(62)
        logger.info("shuffle='global' with seed %d (pass `seed` to repeat this order).", seed)
    # under MultiWorkerMirroredStrategy every worker reads the one global sequence and
    # the strategy keeps its part of each global batch (split by data): the same
    # sequence for any worker count, so a position in it resumes on any; a graph-mode
    # cluster's workers (asynchronous, no global batch) each read a share of their own
    shard = (0, 1) if tf.executing_eagerly() else (worker_index(task), task.num_workers)
    return GlobalOrder(file_indexes(plan.records), seed=seed, window=window, shard=shard)


def _epoch_windows(order: GlobalOrder, options: ReadOptions) -> tf.data.Dataset:
    """The windows of ``num_epochs`` epochs of ``order`` each new iterator reads."""
    seed = order.seed
    num_epochs = options.num_epochs
    span = num_epochs if num_epochs is not None else 1 << 40
    if tf.executing_eagerly():
        with tf.init_scope():
            counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_passes")
        passes = tf.data.Dataset.from_tensors(tf.constant(1, tf.int64)).map(
            lambda one: counter.assign_add(one) - one
        )
    else:
        drawn = tf.random.uniform([], maxval=1 << 22, dtype=tf.int64, seed=seed)
        passes = tf.data.Dataset.from_tensors(drawn)
    epochs = passes.flat_map(lambda p: tf.data.Dataset.range(span).map(lambda k: p * span + k))
    return epochs.flat_map(order.windows_of)


def _global_packed(
    plan: Plan, options: ReadOptions, calls: int, position: ReadPosition | None = None
) -> tf.data.Dataset:
    """Batches of examples from packed shards in the global order (``shuffle="global"``).

    The global order runs over the records (each a block of ``per_record`` examples) in
    windows of about :data:`~tfr_hooks.tfrecord.pipelines.order.DEFAULT_WINDOW` examples; each
    window is unpacked at once and its examples put in an order drawn from its records
    (the window's one vectorized permutation, as a packed ``shuffle=N`` window),
    then cut into batches. With ``position`` (counting examples), each pass reads its
    epoch's windows from the one holding the position, and drops that window's examples
    before it: the same examples as the pass read from its start.
    """
    per_record = plan.per_record
    order = _global_order(plan, options, max(1, DEFAULT_WINDOW // per_record))
    deterministic = options.config.deterministic

    def unpack_window(serialized: Any) -> dict[str, Any]:
        salt = window_salt(serialized, 0)
        return unpack(plan.schema, serialized, per_record, order_seed=salt)

    def pass_from(epoch: Any, done: Any) -> tf.data.Dataset:
        counts = [int(c or 0) for c in plan.counts]
        window, begin = order.locate_examples(epoch, done, per_record, counts)
        windows = order.windows_of(epoch, start=order.window_start(window))
        unpacked = windows.map(
            unpack_window, num_parallel_calls=calls, deterministic=deterministic
        ).enumerate()
        return unpacked.map(  # the first window's examples from `begin`
            lambda i, ex: {k: v[tf.where(tf.equal(i, 0), begin, 0) :] for k, v in ex.items()}
        )

    if position is not None:
        examples = position.start().flat_map(pass_from)
    else:
        examples = _epoch_windows(order, options).map(
            unpack_window, num_parallel_calls=calls, deterministic=deterministic
        )
    return examples.rebatch(options.batch_size, drop_remainder=options.drop_remainder)


def worker_index(task: TaskInfo) -> int:
    """This task's place among the cluster's training tasks (chief first, then workers)."""
    if task.num_workers <= 1 or task.task_type in (None, "chief"):
        return 0
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return task.task_id + (1 if cluster.get("chief") else 0)


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


def finish(
    data: tf.data.Dataset, names: tuple[str, ...] | None, *, prefetch: int | None, autotune: bool
) -> tf.data.Dataset:
    """The last stages every TF2 pipeline shares: structure, prefetch, options."""
    if names is not None:
        data = data.map(lambda d: structure(d, names))
    if prefetch:
        data = data.prefetch(prefetch)
    if not autotune:
        options = tf.data.Options()
        options.autotune.enabled = False
        data = data.with_options(options)
    return data


def _memory_data(
    plan: Plan, options: ReadOptions, kind: PipelineKind, position: ReadPosition | None = None
) -> tuple[tf.data.Dataset, int]:
    """The in-memory pipeline of batches (dicts), and the examples of one pass."""
    arrays, decode_each_batch, widen = _held(plan, options, kind)
    shaping, batch_map_fn = options.shaping, options.batch_map_fn
    prefetch = bool(options.config.prefetch)
    buckets = None
    if shaping.bucket_boundaries is not None:
        if decode_each_batch is not None:
            raise ValueError(
                "Expected the decoded data to fit in memory to bucket it there (held "
                "encoded, an example's length is known only after map_fn). Received: "
                f"bucket_boundaries={list(shaping.bucket_boundaries)} with the encoded "
                "records held; raise memory_budget, or stream with in_memory=False"
            )
        buckets = _buckets(arrays, shaping, shaping.bucket_boundaries)
    pad = functools.partial(pad_batch, shaping=shaping) if shaping.pads else None
    pad_after = pad is not None and decode_each_batch is not None  # padded after decoding
    last = batch_map_fn is None and not pad_after  # memory_dataset's batches are returned
    names = plan.names
    data = memory_dataset(
        arrays,
        options.batch_size,
        shuffle=options.shuffle,
        seed=options.seed,
        drop_remainder=options.drop_remainder,
        num_epochs=options.num_epochs,
        prefetch=2 if prefetch and last else None,
        map_fn=decode_each_batch,
        buckets=buckets,
        batch_fn=pad if decode_each_batch is None else None,
        select=functools.partial(structure, names=names) if last and names else None,
        widen=widen or None,
        position=position,
    )
    if pad is not None and pad_after:
        data = data.map(pad, num_parallel_calls=PARALLEL_CALLS, deterministic=True)
    if batch_map_fn is not None:
        data = _map_batches(data, batch_map_fn)
    if not last and names is not None:
        data = data.map(lambda d: structure(d, names))
    if not last and prefetch:
        data = data.prefetch(2)
    return data, len(next(iter(arrays.values())))


def _held(
    plan: Plan, options: ReadOptions, kind: PipelineKind
) -> tuple[dict[str, Held], Callable[..., Any] | None, Widen | None]:
    """The held arrays, ``map_fn`` to run on every batch (if encoded), and the widening.

    The widening turns features held narrower than ``map_fn`` returns them back into
    its output, each batch (``uint8`` images it casts to float:
    :mod:`tfr_hooks.tfrecord.pipelines.memory.narrow`); ``None`` when nothing is narrowed.
    """
    map_fn = options.map_fn
    if kind is PipelineKind.MEMORY_DECODED and map_fn is not None:
        count = plan.examples
        if count is None and plan.per_record == 1:  # allocate once: memory of the output only
            count = count_examples(plan.files, plan.compression, plan.per_record)
        narrowed, widen = narrowing(as_dict(map_fn, plan.names))
        arrays = load_mapped(
            plan.records, plan.schema, narrowed, per_record=plan.per_record, count=count
        )
        return arrays, None, widen
    arrays = load(plan.records, plan.schema, per_record=plan.per_record, counts=plan.counts)
    return arrays, None if map_fn is None else as_dict(map_fn, plan.names), None


def _buckets(arrays: dict[str, Held], shaping: Shaping, boundaries: Sequence[int]) -> np.ndarray:
    """The length bucket of every example held."""
    key = bucket_key(shaping, {name: _spec_of(value) for name, value in arrays.items()})
    held = arrays[key]
    lengths = (
        held.lengths
        if isinstance(held, RaggedArray)
        else np.full(len(held), held.shape[1] if held.ndim > 1 else 1, np.int64)
    )
    return bucket_of(lengths, boundaries)


def _memory_kind(plan: Plan, options: ReadOptions) -> PipelineKind | None:
    """What to hold in memory: the decoded data, the encoded records, or nothing (``None``).

    ``in_memory=True`` holds the decoded data (``map_fn``'s output when given).
    ``"auto"`` states the sizes and lets :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` choose:
    the decoded data when it fits ``memory_budget`` (with a ``map_fn``, whose output size
    is unknown before it runs, estimated by decoding the first examples); else, with a
    ``map_fn``, the parsed records when they fit (``map_fn`` then runs on every batch);
    otherwise it streams. The choice and its sizes are logged at INFO level.
    """
    if options.in_memory is True:
        return PipelineKind.MEMORY_DECODED
    examples = plan.examples
    if examples is None:
        examples = count_examples(plan.files, plan.compression, plan.per_record)
    file_bytes = sum(tf.io.gfile.stat(path).length for path in plan.files)
    budget = options.config.memory_budget
    budget = default_memory_budget() if budget is None else budget
    if options.map_fn is None:
        size = _records_nbytes(plan, examples, file_bytes)
        facts = DataFacts(size, memory_budget=budget, examples_per_record=plan.per_record)
        chosen = decide(facts).kind is PipelineKind.MEMORY_DECODED
        logger.info(
            "in_memory='auto': %s (%d examples decode to %.1f MiB; memory_budget %.1f MiB).",
            "holding the data in memory" if chosen else "streaming from the files",
            examples,
            size / _MIB,
            budget / _MIB,
        )
        return PipelineKind.MEMORY_DECODED if chosen else None
    return _mapped_kind(plan, options.map_fn, examples, file_bytes, budget)


_MIB = 2**20


def _mapped_kind(
    plan: Plan, map_fn: Callable[..., Any], examples: int, file_bytes: int, budget: int
) -> PipelineKind | None:
    """``_memory_kind`` with a ``map_fn``: its output's size, then the records' if needed."""
    sample = mapped_sample_nbytes(plan.records, plan.schema, map_fn, per_record=plan.per_record)
    decoded = None if sample is None else sample[0] * examples // max(1, sample[1])
    why = (
        "map_fn's output is not of one fixed shape"
        if decoded is None
        else f"{examples} examples decode to about {decoded / _MIB:.1f} MiB through map_fn "
        f"(estimated from the first {sample[1] if sample else 0})"
    )
    facts = DataFacts(decoded, memory_budget=budget, examples_per_record=plan.per_record)
    kind = decide(facts).kind
    if kind is PipelineKind.MEMORY_DECODED:
        logger.info(
            "in_memory='auto': holding the decoded data (map_fn's output) in memory, as %s; "
            "memory_budget %.1f MiB.",
            why,
            budget / _MIB,
        )
        return kind
    encoded = _records_nbytes(plan, examples, file_bytes)  # only measured when needed
    kind = decide(dataclasses.replace(facts, encoded_nbytes=encoded)).kind
    if kind is PipelineKind.MEMORY_ENCODED:
        logger.info(
            "in_memory='auto': holding the encoded records in memory and running map_fn on "
            "every batch, as %s, more than memory_budget %.1f MiB, and the records take "
            "%.1f MiB.",
            why,
            budget / _MIB,
            encoded / _MIB,
        )
        return kind
    logger.info(
        "in_memory='auto': streaming from the files, as %s, and the records take "
        "%.1f MiB; memory_budget %.1f MiB.",
        why,
        encoded / _MIB,
        budget / _MIB,
    )
    return None


def _records_nbytes(plan: Plan, examples: int, file_bytes: int) -> int:
    """Bytes the parsed records take in memory; sampled when a feature varies in length."""
    return records_nbytes(plan.records, plan.schema, examples, file_bytes, plan.per_record)


def as_dict(map_fn: Callable[..., Any], names: tuple[str, ...] | None) -> Callable[..., Any]:
    """``map_fn``, returning a dict: a tuple it returns is named by ``as_tuple``."""

    def named(example: Any) -> Any:
        out = map_fn(example)
        if names is not None and isinstance(out, (tuple, list)) and len(out) == len(names):
            return dict(zip(names, out, strict=True))
        return out

    return named


def _spec_of(held: Any) -> Any:
    """A stand-in spec of one held feature: ragged for a :class:`RaggedArray`."""
    if isinstance(held, RaggedArray):
        inner = [None] * len(held.inner_splits)
        return tf.RaggedTensorSpec(
            [None, None, *inner, *held.values.shape[1:]],
            tf.as_dtype(held.values.dtype) if held.values.dtype.kind not in "OSU" else tf.string,
            ragged_rank=1 + len(inner),
        )
    return tf.TensorSpec(held.shape)


def _map_batches(data: tf.data.Dataset, batch_map_fn: Callable[..., Any]) -> tf.data.Dataset:
    """``batch_map_fn`` on every batch, its random ops drawing anew every epoch."""
    return data.map(
        fresh_randomness(batch_map_fn), num_parallel_calls=PARALLEL_CALLS, deterministic=True
    )


def structure(tensors: Any, names: tuple[str, ...] | None) -> Any:
    """``tensors`` (a dict) as the tuple ``as_tuple`` names, when it names one."""
    if names is None:
        return tensors
    if not isinstance(tensors, dict) or any(name not in tensors for name in names):
        found = sorted(tensors) if isinstance(tensors, dict) else type(tensors).__name__
        raise ValueError(
            "Expected `map_fn` (or `batch_map_fn`) to return a dict with the keys of "
            f"`as_tuple` {list(names)}. "
            f"Received: keys={found}"
        )
    return tuple(tensors[name] for name in names)
