"""Reading TFRecord files back as batch tensors: a ``tf.data`` and a queue pipeline.

Both pipelines batch the serialized records first and parse each batch with one
``tf.io.parse_example`` call, then decode raw bytes to the stored dtype and shape. Both
return the same structure: a dict of named tensors, or a tuple when ``as_tuple`` names
the features to return.

* :func:`dataset` returns a ``tf.data.Dataset`` (eager TF2, ``tf.function``, or graph).
* :func:`source` returns the same dataset with what the reader knows of it (a
  :class:`~tfr_hooks.tfrecord.pipelines.contract.Source`), for ``FunctionLoop``.
* :func:`read_batches` (:mod:`tfr_hooks.tfrecord.pipelines.batches`) builds graph-mode tensors
  through ``tf.data`` or queue runners; its :class:`Batches` carry what a loop needs to
  run them, for ``SessionLoop(data=...)``.

The three share one vocabulary, declared once:
:class:`~tfr_hooks.tfrecord.pipelines.options.ReadArgs` (taken as ``**options``), whose rarely
touched knobs are one :class:`~tfr_hooks.tfrecord.pipelines.options.ReadConfig`. Each reader
checks its options once into a :class:`~tfr_hooks.tfrecord.pipelines.options.ReadOptions`
(:func:`~tfr_hooks.tfrecord.pipelines.options.read_options`), resolves what to read into a
:class:`~tfr_hooks.tfrecord.pipelines.plan.Plan`
(:func:`~tfr_hooks.tfrecord.pipelines.pipeline.plan_of`),
decides the :class:`~tfr_hooks.tfrecord.pipelines.options.PipelineKind` once and builds its
``tf.data`` pipeline (:mod:`tfr_hooks.tfrecord.pipelines.pipeline`); the queue pipeline is built
by :mod:`tfr_hooks.tfrecord.pipelines.queue`. What it knows of the result is one
:class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts`, made by ``ReadFacts.of_read``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import tensorflow as tf

from tfr_hooks.task import TaskInfo, current_task
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.pipelines import sharding
from tfr_hooks.tfrecord.pipelines.batches import PIPELINES, Batches, batches_of, read_batches
from tfr_hooks.tfrecord.pipelines.contract import ReadFacts, Source, epoch_steps, note_read
from tfr_hooks.tfrecord.pipelines.options import (
    PipelineKind,
    ReadArgs,
    ReadConfig,
    ReadOptions,
    Unpack,
    read_options,
)
from tfr_hooks.tfrecord.pipelines.orders.choice import order_for
from tfr_hooks.tfrecord.pipelines.pipeline import build_pipeline, choose_kind, plan_of, serve
from tfr_hooks.tfrecord.pipelines.plan import Plan
from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = [
    "Batches",
    "batches_of",
    "dataset",
    "source",
    "read_batches",
    "PIPELINES",
    "PipelineKind",
    "ReadArgs",
    "ReadConfig",
]


def dataset(files: Files, batch_size: int, **options: Unpack[ReadArgs]) -> tf.data.Dataset:
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
        **options: The readers' options, by keyword: what to read (``schema``,
            ``split``, ``max_corrupt_records``), the order (``shuffle``,
            ``seed``, ``num_epochs``), the batch shape (``drop_remainder``, ``pad_to``,
            ``bucket_boundaries``, ``bucket_by``), transforms (``map_fn``,
            ``batch_map_fn``, ``as_tuple``), placement and speed (``in_memory``,
            ``service``, ``read_config``). Each is documented once, in
            :class:`~tfr_hooks.tfrecord.ReadArgs`; the rare knobs in
            :class:`~tfr_hooks.tfrecord.ReadConfig`.

    Returns:
        The dataset of batches. When the number of examples is known (every file is
        listed in a ``schema.json``, or the data is in memory) and ``num_epochs`` is
        set, its ``cardinality()`` is exact: the steps a pass makes, also when several
        workers split it by file (then more than the global batches of the data, as
        each worker's share may end in a partial batch; see
        :func:`tfr_hooks.tfrecord.pipelines.sharding.file_sharded_steps`). Its batch dimension is
        static only with ``drop_remainder=True``. Given to
        :class:`~tfr_hooks.FunctionLoop`, alone or followed by ``.map()``,
        ``.prefetch()`` or ``.with_options()``, it is read as :func:`source`'s: the
        loop finds its reader's facts behind those stages, and a resumed run seeks
        where ``source`` would (in graph mode, through
        :func:`~tfr_hooks.tfrecord.batches_of` for ``SessionLoop``). Behind a
        stage that may drop or add batches (``filter``, ``take``...) it replays, and
        the log says why.

    Raises:
        NoFilesError: If no file matches, or a file is missing.
        EmptyFileError: If a file holds no records.
        NotTFRecordError: If a file is not a TFRecord file.
        CorruptRecordError: With ``max_corrupt_records`` above 0, for the damaged record
            one past it (its file and index named).
        SchemaMismatchError: If the first record of a file, or the stored schema, does not
            match ``schema``.
        TypeError: For an unknown keyword (the message names the known ones), one that
            moved into ``read_config`` (the message names its new spelling), or a value
            of the wrong type.
        ValueError: For a value out of range; if ``shard`` is ``"file"`` with fewer files
            than workers; if ``service`` is not an address, or comes with ``in_memory``.
        ConnectionError: If no tf.data service dispatcher answers at ``service``.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> ds = tfrecord.dataset("data/mnist", batch_size=128, shuffle=1000,
        ...                       as_tuple=("image", "label"))  # doctest: +SKIP
        >>> for images, labels in ds:  # doctest: +SKIP
        ...     print(images.shape, labels.shape)
        (None, 28, 28) (None,)
    """
    return _source("dataset", files, batch_size, options).dataset


def source(files: Files, batch_size: int, **options: Unpack[ReadArgs]) -> Source:
    """The batches :func:`dataset` builds, with what the reader knows of them.

    It takes what :func:`dataset` takes (:class:`~tfr_hooks.tfrecord.ReadArgs`) and
    raises what it raises; it returns a
    :class:`~tfr_hooks.tfrecord.pipelines.contract.Source`: the dataset and its
    :class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts` (the pipeline kind, the files and
    schema, the examples of an epoch and the steps it makes, the tf.data service it is
    read through). Give it to :class:`~tfr_hooks.FunctionLoop` instead of the dataset:
    the loop then knows the epoch's length up front (also under a multi-worker strategy
    sharding by file), bounds a served epoch after a lost worker at its size, and its
    input report names the files' sizes, as :class:`~tfr_hooks.SessionLoop` does with
    :class:`Batches`. Augment it with :meth:`Source.map
    <tfr_hooks.tfrecord.pipelines.contract.Source.map>`, which keeps the facts.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> train = tfrecord.source("data/mnist", 128,
        ...                         as_tuple=("image", "label"))  # doctest: +SKIP
        >>> train = train.map(lambda x, y: (tf.cast(x, "float32") / 255, y))  # doctest: +SKIP
        >>> FunctionLoop(train, model=model).run(epochs=3)  # doctest: +SKIP
    """
    return _source("source", files, batch_size, options)


def _source(reader: str, files: Files, batch_size: int, given: Mapping[str, Any]) -> Source:
    """:func:`source`'s work, for ``reader`` (named in the messages)."""
    options = read_options(reader, batch_size, given)
    order_for(options)  # what the order refuses
    task = current_task()
    plan = plan_of(files, options)
    if options.service is None:
        # the service splits the data itself: a common seed would only repeat the order
        shuffled = int(options.shuffles)
        shared = sharding.shared_seed(options.seed, shuffled, task)
        options = dataclasses.replace(options, seed=shared)
    kind = choose_kind(plan, options)
    data, examples, position = build_pipeline(plan, options, kind, seekable=True)
    facts = ReadFacts.of_read(plan, options, kind, examples, None)
    read = _read(data, plan, options, kind, facts, position)
    note_read(read.dataset, read.facts, read.position)  # for the loops, behind the user's map
    return read


def _read(
    data: tf.data.Dataset,
    plan: Plan,
    options: ReadOptions,
    kind: PipelineKind,
    facts: ReadFacts,
    position: ReadPosition | None,
) -> Source:
    """The dataset a reader returns, served or sharded as asked, its facts and position."""
    task = current_task()
    if options.service is not None:  # served: no position (the service's workers read)
        # a trainer of a shared job reads a part of the epoch, of unknown size
        examples = facts.examples if task.num_workers == 1 else None
        return Source(_served(data, plan, options, task), replace(facts, examples=examples))
    shard = options.config.shard
    seeks = position is not None
    if kind.in_memory:
        # no files to split: every worker gathers the same batches and keeps its share
        data = sharding.shard_dataset(data, "data" if shard in ("auto", "file") else shard, 0, task)
        return Source(data, replace(facts, steps=_steps_of(data, facts, options, seeks)), position)
    if not tf.executing_eagerly() and options.shuffle == "global":
        shard = "off"  # a graph-mode cluster: the global order reads this worker's share
    elif options.shuffle == "global" or (seeks and task.num_workers > 1):
        # one global sequence (the global order; an unshuffled stream that seeks): every
        # worker reads it and keeps its part of each global batch, on any worker count.
        # One worker: off, as TensorFlow's data sharding (AUTO too) on one worker undoes
        # a last Dataset.rebatch, taking it for its own (checked on TF 2.21)
        shard = "data" if task.num_workers > 1 else "off"
    data = sharding.shard_dataset(
        data,
        shard,
        len(plan.files),
        task,
        file_examples=plan.counts,
        batch_size=options.batch_size,
        drop_remainder=options.drop_remainder,
        num_epochs=options.num_epochs,
    )
    return Source(data, _with_steps(facts, data, plan, task, options, seeks), position)


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


def _steps_of(
    data: tf.data.Dataset, facts: ReadFacts, options: ReadOptions, seeks: bool
) -> int | None:
    """The steps of a pass: the dataset's cardinality, or counted when it ``seeks``.

    A pipeline with a position asserts no cardinality (a pass it enters mid-way is
    shorter); a whole pass makes the steps the examples give.
    """
    if seeks:  # one step a global batch, on any worker count
        return epoch_steps(facts.examples, options)
    return _cardinality(data)


def _cardinality(data: tf.data.Dataset) -> int | None:
    """The dataset's cardinality when known (``None``: unknown or infinite).

    In graph mode it is a tensor a session would compute: not known here.
    """
    value = data.cardinality()
    cardinality = int(value) if hasattr(value, "numpy") else -1
    return cardinality if cardinality >= 0 else None


def _with_steps(
    facts: ReadFacts,
    data: tf.data.Dataset,
    plan: Plan,
    task: TaskInfo,
    options: ReadOptions,
    seeks: bool,
) -> ReadFacts:
    """``facts`` with the steps a pass of the streamed ``data`` makes, when known.

    Under a multi-worker strategy sharding by file, each worker's share decides (see
    :func:`~tfr_hooks.tfrecord.pipelines.sharding.file_sharded_steps`): the steps are counted for
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
    return replace(facts, steps=_steps_of(data, facts, options, seeks))
