"""Reading TFRecord files back as batch tensors: a ``tf.data`` and a queue pipeline.

Both pipelines batch the serialized records first and parse each batch with one
``tf.io.parse_example`` call, then decode raw bytes to the stored dtype and shape. Both
return the same structure: a dict of named tensors, or a tuple when ``as_tuple`` names
the features to return.

* :func:`dataset` returns a ``tf.data.Dataset`` (eager TF2, ``tf.function``, or graph).
* :func:`source` returns the same dataset with what the reader knows of it (a
  :class:`~tfr_hooks.tfrecord.contract.Source`), for ``FunctionLoop``.
* :func:`read_batches` (:mod:`tfr_hooks.tfrecord.batches`) builds graph-mode tensors
  with ``pipeline="dataset"`` (an initializable iterator, ``num_epochs`` passes per
  initialization; with
  ``in_memory=True`` the decoded data is held in memory, see
  :mod:`tfr_hooks.tfrecord.memory`) or ``pipeline="queue"`` (``string_input_producer``
  + ``TFRecordReader`` + ``shuffle_batch_join``). Its :class:`Batches` carry what a loop
  needs to run them (initializers, batch size, and the files and schema that explain a
  read error); give them to ``SessionLoop(data=...)``.

The two readers share one vocabulary: ``shuffle_buffer``, ``seed``, ``drop_remainder``,
``num_parallel_reads``, ``num_epochs``, ``in_memory``, ``memory_budget``, ``schema``,
``as_tuple``, ``compression``, ``decode``, ``map_fn``, ``batch_map_fn``, ``service``
(a tf.data service whose workers run the pipeline) and, for
features of varying length and the feature lists of ``tf.train.SequenceExample``
records (:mod:`tfr_hooks.tfrecord.ragged`), ``pad_to``,
``padding_values``, ``bucket_boundaries`` and ``bucket_by`` have the same names,
meanings and defaults in both (``num_parallel_reads`` counts reader threads for the
queue pipeline, which cannot bucket).

Both check their arguments once into a :class:`~tfr_hooks.tfrecord.options.ReadOptions`
(:mod:`tfr_hooks.tfrecord.options`), resolve what to read into a
:class:`~tfr_hooks.tfrecord.plan.Plan` (:mod:`tfr_hooks.tfrecord.plan`), decide the
:class:`~tfr_hooks.tfrecord.options.PipelineKind` once and build its ``tf.data``
pipeline (:mod:`tfr_hooks.tfrecord.pipeline`); the queue pipeline is built by
:mod:`tfr_hooks.tfrecord.queue`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import tensorflow as tf

from tfr_hooks.task import TaskInfo, current_task
from tfr_hooks.tfrecord import sharding
from tfr_hooks.tfrecord.batches import PIPELINES, Batches, read_batches
from tfr_hooks.tfrecord.contract import ReadFacts, Source
from tfr_hooks.tfrecord.files import Files
from tfr_hooks.tfrecord.options import PipelineKind, ReadOptions, read_options
from tfr_hooks.tfrecord.pipeline import build_pipeline, choose_kind, serve
from tfr_hooks.tfrecord.plan import Plan, make_plan
from tfr_hooks.tfrecord.ragged import PadTo
from tfr_hooks.tfrecord.sources.base import SchemaLike

__all__ = ["Batches", "dataset", "source", "read_batches", "PIPELINES", "PipelineKind"]


def dataset(
    files: Files,
    batch_size: int,
    *,
    schema: SchemaLike = None,
    shuffle_buffer: int = 0,
    seed: int | None = None,
    deterministic: bool = True,
    num_parallel_reads: int | None = None,
    drop_remainder: bool = False,
    num_epochs: int | None = 1,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    batch_map_fn: Callable[[Any], Any] | None = None,
    prefetch: int | None = tf.data.AUTOTUNE,
    as_tuple: Sequence[str] | None = None,
    compression: str | None = None,
    autotune: bool = False,
    decode: Mapping[str, Any] | None = None,
    in_memory: bool | str = False,
    memory_budget: int | None = None,
    pad_to: PadTo = None,
    padding_values: Any = None,
    bucket_boundaries: Sequence[int] | None = None,
    bucket_by: str | None = None,
    shard: str = "auto",
    service: str | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of parsed batches from TFRecord files.

    Shards are read in parallel (interleaved), shuffled with a buffer, batched, parsed
    with one ``tf.io.parse_example`` per batch, decoded to the stored dtypes and shapes,
    and prefetched. Files, compression and schema are checked here, so a missing file,
    a non-TFRecord file or a schema mismatch in the first records raises at once; errors
    found later while iterating can be explained with
    :func:`~tfr_hooks.tfrecord.explain_error`.

    Args:
        files: Paths, directories (the shards of their ``schema.json``) or glob patterns.
        batch_size: Examples per batch.
        schema: A :class:`~tfr_hooks.tfrecord.Schema`, the path of a ``schema.json``, or
            ``None`` to use the stored sidecar or infer the schema from the records.
        shuffle_buffer: Examples in the shuffle buffer; 0 does not shuffle. When
            shuffling, the order of the files is shuffled too, and every pass (every
            new iterator; in graph mode, every initialization of one) gets a new order.
        seed: Seed for the shuffles: the sequence of the passes' orders.
        deterministic: Whether parallel reads and parsing keep a fixed order.
        num_parallel_reads: Files read at once; ``None`` for ``min(files, 4)``.
        drop_remainder: Whether to drop the final, smaller batch (the batch dimension is
            then static).
        num_epochs: Passes over the data; ``None`` repeats forever.
        map_fn: Applied to each parsed example (a dict of tensors), in parallel, before
            re-batching: the decoding function (``tf.io.decode_jpeg``...). It returns a
            dict of tensors (or a tuple, named by ``as_tuple``). In memory it runs
            **once** per example, and its output is held in memory (see
            ``in_memory``); streamed, it runs every epoch. Put work that must differ
            every epoch (random crops, flips) in ``batch_map_fn``.
        batch_map_fn: Applied to every batch (the dict of batch tensors, before
            ``as_tuple``), vectorized, on every pipeline (streamed, packed, in memory),
            every epoch. Its random ops without an op seed draw anew every epoch, even
            under ``tf.random.set_seed`` (it is traced without the graph-level seed,
            which would otherwise repeat them at every new iterator).
        prefetch: Batches to prefetch; ``tf.data.AUTOTUNE``, or 0/``None`` for none.
        as_tuple: Feature names to return as a tuple, e.g. ``("image", "label")``;
            ``None`` returns a dict of all features. With ``map_fn`` or
            ``batch_map_fn``, the names of the last one's outputs.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        autotune: Let tf.data tune parallelism and prefetching while it runs. Off by
            default: with it on, starting a new iterator over the dataset (each epoch,
            when the data decides the epoch length) stalls for about 2 s now and then
            while tf.data's tuning thread winds down (measured on TensorFlow 2.21); off,
            parsing runs on one thread per core and ``prefetch=AUTOTUNE`` keeps 2
            batches.
        decode: Changes to the schema, as :meth:`~tfr_hooks.tfrecord.Schema.replace`
            takes them: ``{"image_raw": ("uint8", (28, 28, 1))}`` reads a raw bytes
            feature as an image, ``{"trip_seconds": {"default": 0.0}}`` an optional
            feature as a dense tensor; the other features keep their schema.
        in_memory: ``True`` reads and decodes every shard once, here, and serves the
            batches from memory by gathering (see :mod:`tfr_hooks.tfrecord.memory`):
            each epoch (each new iterator) follows a fresh permutation of all the
            examples when ``shuffle_buffer > 0`` (its size then no longer matters),
            the stored order when it is 0, and ends with its own final batch.
            With ``map_fn``, its output (dense tensors of one shape for all examples,
            or lists of varying length) is what is held. A feature of varying
            length is held as one flat array of values and row offsets; a feature
            list as its frames (``[total frames, *frame shape]``) and offsets.
            ``"auto"`` does so when the decoded data fits ``memory_budget`` (with a ``map_fn``,
            its size is estimated by decoding the first 16 examples; lists of varying
            length from the first 256); when it does not but the parsed records do, it
            holds the records and runs ``map_fn`` on every batch, in parallel;
            otherwise it streams. It logs its
            choice and why at INFO level. ``False`` (the default) streams from the
            files, in constant memory, as before: holding a whole data set in memory
            is a choice about the machine's resources that only the caller can make.
        memory_budget: Bytes the decoded data may take for ``in_memory="auto"``;
            ``None`` for half of the memory available at the call.
        pad_to: How features of varying length reach the batch: ``None`` (the
            default) as ``tf.RaggedTensor`` rows; ``"longest"`` padded to the batch's
            longest row (as ``padded_batch``); an integer ``L`` padded or cut to ``L``
            values (frames, for a feature list: ``[batch, L, *frame shape]``); or a
            dict of feature name -> one of these (features not named stay ragged).
            Applied to ``map_fn``'s outputs when given, before ``batch_map_fn``. See
            :mod:`tfr_hooks.tfrecord.ragged`.
        padding_values: The value padding adds: ``None`` for 0 (``b""`` for strings,
            ``False`` for bools), a scalar, or a dict of feature name -> scalar.
        bucket_boundaries: Batch examples of about the same length together, as
            ``tf.data.Dataset.bucket_by_sequence_length``: bucket ``i`` holds lengths
            from ``bucket_boundaries[i-1]`` (0 for the first) up to, not including,
            ``bucket_boundaries[i]`` (the last has no upper end); every batch comes
            from one bucket. In memory the number of batches per epoch is exact and
            each epoch serves them in a fresh random order; streamed, each bucket
            fills its batches in the order the examples come (the epoch's length is
            then learned at its end).
        bucket_by: The feature whose length picks the bucket; ``None`` for the only
            feature (or ``map_fn`` output) of varying length.
        shard: How a multi-worker strategy (``MultiWorkerMirroredStrategy``) splits the
            data among its workers: ``"auto"`` by file when there are at least as many
            files as workers, by data otherwise; ``"file"`` (an error with fewer files
            than workers), ``"data"``, or ``"off"`` (every worker reads everything).
            ``batch_size`` is then the global batch size. With more than one worker and
            ``shuffle_buffer`` but no ``seed``, a seed common to all workers is used, so
            that every example is read once per epoch (see
            :func:`tfr_hooks.tfrecord.sharding.shard_dataset`). With ``service``, the
            service splits the data instead, and neither ``shard`` nor the common seed
            is used.
        service: The address of a tf.data service dispatcher, ``"grpc://HOST:PORT"``
            (or ``"HOST:PORT"``), whose workers then run the whole pipeline (read,
            parse, ``map_fn``, padding, bucketing, ``batch_map_fn``) and send the
            batches; ``None`` (the default) runs it here. Mode ``"distributed_epoch"``:
            every epoch (every new iterator) is each example once, the files split
            over the workers (each batches its own files, so an epoch may end in
            several partial batches); at most once when a worker restarts. The order
            across workers is not fixed, and the dataset's cardinality is unknown
            (a loop learns the epoch's end from the data's end). Under a
            multi-worker strategy the trainers share one job, named from the cluster,
            the files and the batch size, so that no example goes to two trainers in
            an epoch; build the dataset once and iterate it anew each epoch (a dataset
            built again joins the job's first epoch: see ``docs/data_service.md``).
            A dispatcher that does not answer is an error at once; with
            ``in_memory`` other than ``False``, a ``ValueError`` (the in-memory
            pipeline cannot be served). See :mod:`tfr_hooks.service`.
        max_corrupt_records: The damaged records the data may hold, skipped (AWS's
            TFRecord reader calls it ``max_corrupted_records_to_skip``; the name follows
            TensorFlow's ``DataLossError: corrupted record``). 0 (the default): the first
            damaged record raises :class:`~tfr_hooks.tfrecord.CorruptRecordError`
            naming its file and index, as before. Above 0, every file is scanned here,
            before the pipeline is built (a read of every byte:
            :mod:`tfr_hooks.tfrecord.damage`): a record failing a checksum, a truncated
            tail, a broken GZIP/ZLIB stream (the rest of the file, one record) or a
            record that is no Example is logged (file and index) and skipped; the
            ``max_corrupt_records + 1``-th raises that error here. The records skipped
            are in :func:`source`'s facts and the loops' history
            (``input/corrupt_records``). The scan finds the same damage again when a
            run resumes, so the examples of an epoch, and exact resume, stay the same
            (unless the files change in between).
        split: For a TensorFlow Datasets directory (``<data_dir>/<name>/<version>``,
            see :mod:`~tfr_hooks.tfrecord.tfds_dir`), the split to read; ``None`` for
            ``"train"``. Its features are decoded as its ``features.json`` declares,
            ``as_tuple=True`` names its supervised keys, and the cardinality is exact
            (from ``dataset_info.json``). An error with other files.

    Returns:
        The dataset of batches. When the number of examples is known (every file is
        listed in a ``schema.json``, or the data is in memory) and ``num_epochs`` is
        set, its ``cardinality()`` is exact: the steps a pass makes, also when several
        workers split it by file (then more than the global batches of the data, as
        each worker's share may end in a partial batch; see
        :func:`tfr_hooks.tfrecord.sharding.file_sharded_steps`).

    Raises:
        NoFilesError: If no file matches, or a file is missing.
        EmptyFileError: If a file holds no records.
        NotTFRecordError: If a file is not a TFRecord file.
        CorruptRecordError: With ``max_corrupt_records`` above 0, for the damaged record
            one past it (its file and index named).
        SchemaMismatchError: If the first record of a file, or the stored schema, does not
            match ``schema``.
        ValueError: If ``shard`` is unknown, or ``"file"`` with fewer files than workers;
            if ``service`` is not an address, or comes with ``in_memory``.
        ConnectionError: If no tf.data service dispatcher answers at ``service``.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> ds = tfrecord.dataset("data/mnist", batch_size=128, shuffle_buffer=1000,
        ...                       as_tuple=("image", "label"))  # doctest: +SKIP
        >>> for images, labels in ds:  # doctest: +SKIP
        ...     print(images.shape, labels.shape)
        (128, 28, 28) (128,)
    """
    return source(
        files,
        batch_size,
        schema=schema,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        deterministic=deterministic,
        num_parallel_reads=num_parallel_reads,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        map_fn=map_fn,
        batch_map_fn=batch_map_fn,
        prefetch=prefetch,
        as_tuple=as_tuple,
        compression=compression,
        autotune=autotune,
        decode=decode,
        in_memory=in_memory,
        memory_budget=memory_budget,
        pad_to=pad_to,
        padding_values=padding_values,
        bucket_boundaries=bucket_boundaries,
        bucket_by=bucket_by,
        shard=shard,
        service=service,
        max_corrupt_records=max_corrupt_records,
        split=split,
    ).dataset


def source(
    files: Files,
    batch_size: int,
    *,
    schema: SchemaLike = None,
    shuffle_buffer: int = 0,
    seed: int | None = None,
    deterministic: bool = True,
    num_parallel_reads: int | None = None,
    drop_remainder: bool = False,
    num_epochs: int | None = 1,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    batch_map_fn: Callable[[Any], Any] | None = None,
    prefetch: int | None = tf.data.AUTOTUNE,
    as_tuple: Sequence[str] | None = None,
    compression: str | None = None,
    autotune: bool = False,
    decode: Mapping[str, Any] | None = None,
    in_memory: bool | str = False,
    memory_budget: int | None = None,
    pad_to: PadTo = None,
    padding_values: Any = None,
    bucket_boundaries: Sequence[int] | None = None,
    bucket_by: str | None = None,
    shard: str = "auto",
    service: str | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
) -> Source:
    """The batches :func:`dataset` builds, with what the reader knows of them.

    The same arguments, meanings and defaults as :func:`dataset`; it returns a
    :class:`~tfr_hooks.tfrecord.contract.Source`: the dataset and its
    :class:`~tfr_hooks.tfrecord.contract.ReadFacts` (the pipeline kind, the files and
    schema, the examples of an epoch and the steps it makes, the tf.data service it is
    read through). Give it to :class:`~tfr_hooks.FunctionLoop` instead of the dataset:
    the loop then knows the epoch's length up front (also under a multi-worker strategy
    sharding by file), bounds a served epoch after a lost worker at its size, and its
    input report names the files' sizes, as :class:`~tfr_hooks.SessionLoop` does with
    :class:`Batches`. Augment it with :meth:`Source.map
    <tfr_hooks.tfrecord.contract.Source.map>`, which keeps the facts.

    Returns:
        A :class:`~tfr_hooks.tfrecord.contract.Source`.

    Raises:
        TFRecordError: As :func:`dataset`, for the files and the schema.
        ValueError: As :func:`dataset`, for a bad argument.
        ConnectionError: If no tf.data service dispatcher answers at ``service``.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> train = tfrecord.source("data/mnist", 128,
        ...                         as_tuple=("image", "label"))  # doctest: +SKIP
        >>> train = train.map(lambda x, y: (tf.cast(x, "float32") / 255, y))  # doctest: +SKIP
        >>> FunctionLoop(train, model=model).run(epochs=3)  # doctest: +SKIP
    """
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
        deterministic=deterministic,
        prefetch=prefetch,
        autotune=autotune,
        service=service,
        max_corrupt_records=max_corrupt_records,
    )
    task = current_task()
    sharding.check_shard(shard)
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
    if options.service is None:
        # the service splits the data itself: a common seed would only repeat the order
        shared = sharding.shared_seed(options.seed, options.shuffle_buffer, task)
        options = dataclasses.replace(options, seed=shared)
    kind = choose_kind(plan, options)
    data, examples = build_pipeline(plan, options, kind)
    facts = ReadFacts(
        kind=kind,
        files=tuple(plan.files),
        schema=plan.schema,
        compression=plan.compression,
        batch_size=batch_size,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        examples=examples,
        examples_per_record=plan.per_record,
        service=options.service,
        corrupt_records=None if plan.damage is None else plan.damage.corrupt,
    )
    if options.service is not None:
        # a trainer of a shared job reads a part of the epoch, of unknown size
        examples = examples if task.num_workers == 1 else None
        return Source(_served(data, plan, options, task), replace(facts, examples=examples))
    if kind.in_memory:
        # no files to split: every worker gathers the same batches and keeps its share
        data = sharding.shard_dataset(data, "data" if shard in ("auto", "file") else shard, 0, task)
        return Source(data, replace(facts, steps=_cardinality(data)))
    data = sharding.shard_dataset(
        data,
        shard,
        len(plan.files),
        task,
        file_examples=plan.counts,
        batch_size=batch_size,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
    )
    return Source(data, _with_steps(facts, data, plan, task))


def _served(data: tf.data.Dataset, plan: Plan, options: ReadOptions, task: TaskInfo) -> Any:
    """``data`` run by the tf.data service's workers: one job shared by the trainers.

    The service splits the epoch among the trainers of a shared job; a strategy must not
    split it again, so its auto-sharding is off.
    """
    assert options.service is not None
    job_name = _job_name(plan, options) if task.num_workers > 1 else None
    served = serve(data, options.service, job_name=job_name)
    off = tf.data.Options()
    off.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return served.with_options(off)


def _job_name(plan: Plan, options: ReadOptions) -> str:
    """A tf.data service job name every trainer of the cluster derives alike.

    From the cluster of ``TF_CONFIG``, the service, the files and the batch size: the
    trainers of one run read one job; another cluster or data set, another job.
    """
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster")
    key = json.dumps([cluster, options.service, plan.files, options.batch_size], sort_keys=True)
    return "tfr_hooks-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _cardinality(data: tf.data.Dataset) -> int | None:
    """The dataset's cardinality when known (``None``: unknown or infinite)."""
    cardinality = int(data.cardinality())
    return cardinality if cardinality >= 0 else None


def _with_steps(facts: ReadFacts, data: tf.data.Dataset, plan: Plan, task: TaskInfo) -> ReadFacts:
    """``facts`` with the steps a pass of the streamed ``data`` makes, when known.

    Under a multi-worker strategy sharding by file, each worker's share decides (see
    :func:`~tfr_hooks.tfrecord.sharding.file_sharded_steps`): the steps are counted for
    the cluster's workers; otherwise they are the dataset's cardinality.
    """
    policy = data.options().experimental_distribute.auto_shard_policy
    workers = task.num_workers
    if workers > 1 and policy == tf.data.experimental.AutoShardPolicy.FILE:
        steps = None
        if _cardinality(data) is not None:
            steps = sharding.file_sharded_steps(
                plan.counts,
                workers,
                facts.batch_size,
                drop_remainder=facts.drop_remainder,
                num_epochs=facts.num_epochs,
            )
        return replace(facts, steps=steps, steps_workers=workers)
    return replace(facts, steps=_cardinality(data))
