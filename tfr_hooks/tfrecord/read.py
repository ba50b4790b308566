"""Reading TFRecord files back as batch tensors: a ``tf.data`` and a queue pipeline.

Both pipelines batch the serialized records first and parse each batch with one
``tf.io.parse_example`` call, then decode raw bytes to the stored dtype and shape. Both
return the same structure: a dict of named tensors, or a tuple when ``as_tuple`` names
the features to return.

* :func:`dataset` returns a ``tf.data.Dataset`` (eager TF2, ``tf.function``, or graph).
* :func:`read_batches` builds graph-mode tensors with ``pipeline="dataset"`` (an
  initializable iterator, ``num_epochs`` passes per initialization; with
  ``in_memory=True`` the decoded data is held in memory, see
  :mod:`tfr_hooks.tfrecord.memory`) or ``pipeline="queue"`` (``string_input_producer``
  + ``TFRecordReader`` + ``shuffle_batch_join``). Its :class:`Batches` carry what a loop
  needs to run them (initializers, batch size, and the files and schema that explain a
  read error); give them to ``SessionLoop(data=...)``.

The two readers share one vocabulary: ``shuffle_buffer``, ``seed``, ``drop_remainder``,
``num_parallel_reads``, ``num_epochs``, ``in_memory``, ``memory_budget``, ``schema``,
``as_tuple``, ``compression``, ``decode``, ``map_fn``, ``batch_map_fn`` and, for
features of varying length (:mod:`tfr_hooks.tfrecord.ragged`), ``pad_to``,
``padding_values``, ``bucket_boundaries`` and ``bucket_by`` have the same names,
meanings and defaults in both (``num_parallel_reads`` counts reader threads for the
queue pipeline, which cannot bucket).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2

from tfr_hooks.checks import check_non_negative_int, check_positive_int, expected
from tfr_hooks.tfrecord import sharding
from tfr_hooks.tfrecord.files import (
    Files,
    check_compression,
    check_framing,
    detect_compression,
    first_record,
    resolve_files,
)
from tfr_hooks.tfrecord.inspection import infer_schema
from tfr_hooks.tfrecord.memory import (
    PARALLEL_CALLS,
    count_examples,
    default_memory_budget,
    fresh_randomness,
    load,
    load_mapped,
    mapped_sample_nbytes,
    memory_dataset,
    records_nbytes,
)
from tfr_hooks.tfrecord.packed import check_block, packed_dataset, record_passes
from tfr_hooks.tfrecord.ragged import (
    PadTo,
    RaggedArray,
    Shaping,
    batch_examples,
    bucket_key,
    bucket_of,
    check_shaping,
    group_by_length,
    pad_batch,
)
from tfr_hooks.tfrecord.schema import Schema
from tfr_hooks.tfrecord.sidecar import Sidecar, check_written_size, find_sidecar, load_schema

#: The default shaping: features of varying length as ragged rows, no buckets.
RAGGED = Shaping()

__all__ = ["Batches", "dataset", "read_batches", "PIPELINES"]

logger = logging.getLogger(__name__)

#: The pipelines :func:`read_batches` can build.
PIPELINES = ("dataset", "queue")

SchemaLike = Union[Schema, str, "os.PathLike[str]", None]


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
        pipeline: ``"dataset"`` or ``"queue"``.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        batch_size: A scalar ``int32`` tensor: the size of the current batch (for
            ``SessionLoop(batch_size=...)``).
        num_examples: Examples in one pass over the files, when known (from
            ``schema.json``, or loaded into memory).
        examples_per_record: Examples stored in each record (more than 1 for packed
            shards).
        num_epochs: The ``num_epochs`` the pipeline was built with: passes per
            initialization for ``"dataset"``, in the one stream for ``"queue"``
            (``None``: endless).
        in_memory: Whether the decoded data is held in memory (``in_memory=True``, or
            ``"auto"`` chose it).
    """

    tensors: Any
    initializers: list[Any]
    files: list[str]
    schema: Schema
    pipeline: str
    compression: str
    batch_size: Any = field(default=None)
    num_examples: int | None = None
    examples_per_record: int = 1
    num_epochs: int | None = None
    in_memory: bool = False


@dataclass
class _Plan:
    files: list[str]
    compression: str
    schema: Schema  # the features parsed
    names: tuple[str, ...] | None  # as_tuple
    counts: list[int | None] = field(default_factory=list)  # examples per file, if known
    per_record: int = 1  # examples per record (packed shards)

    @property
    def examples(self) -> int | None:
        """Examples in one pass over the files, if every file's count is known."""
        if not self.counts or any(c is None for c in self.counts):
            return None
        return sum(c for c in self.counts if c is not None)


def _check_as_tuple(as_tuple: object) -> tuple[str, ...] | None:
    if as_tuple is None:
        return None
    if (
        isinstance(as_tuple, (str, bytes))
        or not isinstance(as_tuple, Sequence)
        or not as_tuple
        or not all(isinstance(name, str) for name in as_tuple)
    ):
        raise TypeError(
            "Expected `as_tuple` to be None or a sequence of feature names such as "
            f"('x', 'y'). Received: as_tuple={as_tuple!r}"
        )
    return tuple(as_tuple)


def _resolve_compression(paths: list[str], compression: str | None) -> str:
    codec = check_compression(compression)
    if codec is not None:
        return codec
    found = {path: detect_compression(path) for path in paths}
    kinds = sorted(set(found.values()))
    if len(kinds) > 1:
        examples = {k or "none": next(p for p, c in found.items() if c == k) for k in kinds}
        raise ValueError(
            "Expected all files to use the same compression; pass `compression` to force "
            f"one. Received: compressions={examples}"
        )
    return kinds[0]


def _plan(
    files: Files,
    schema: SchemaLike,
    compression: str | None,
    as_tuple: object,
    *,
    select: bool,
    decode: Mapping[str, Any] | None = None,
) -> _Plan:
    """Resolve files, compression and schema, and check them before any graph is built."""
    names = _check_as_tuple(as_tuple)
    _check_decode(decode)
    paths = resolve_files(files)
    codec = _resolve_compression(paths, compression)
    if schema is None:
        chosen = infer_schema(paths, compression=codec)
    elif isinstance(schema, Schema):
        chosen = schema
    elif isinstance(schema, (str, os.PathLike)):
        chosen = load_schema(schema)
    else:
        raise TypeError(
            "Expected `schema` to be None (stored or inferred), a tfrecord.Schema or the "
            f"path of a schema.json. Received: schema={schema!r}"
        )
    if decode:
        chosen = chosen.replace(**decode)
    if names is not None and select:  # with a map_fn, as_tuple names its outputs
        missing = [name for name in names if name not in chosen]
        if missing:
            raise ValueError(
                f"Expected the names in `as_tuple` to be features of the schema "
                f"{chosen.names}. Received: as_tuple={names!r}"
            )
        chosen = chosen.select(names)
    example = example_pb2.Example()
    sidecars: dict[str, Sidecar | None] = {}
    counts: list[int | None] = []
    packing: dict[str, int] = {}
    for path in paths:
        sidecar = find_sidecar(path, sidecars)
        per_record = 1
        if sidecar is not None:
            check_written_size(path, sidecar)
            if schema is not None or decode:
                chosen = chosen.with_stored_encodings(sidecar.schema)
                chosen.check_compatible(sidecar.schema, source=f"the schema stored for {path!r}")
            per_record = sidecar.examples_per_record
            counts.append(sidecar.examples_of(os.path.basename(path)))
        else:  # TensorFlow would stop silently at a record header cut short
            check_framing(path, codec)
            counts.append(None)
        packing[path] = per_record
        example.ParseFromString(first_record(path, codec))
        if per_record > 1:
            check_block(chosen, example, per_record, file=path, record=0)
        else:
            chosen.check_example(example, file=path, record=0)
    if len(set(packing.values())) > 1:
        found = {n: next(p for p, k in packing.items() if k == n) for n in sorted(packing.values())}
        raise ValueError(
            "Expected all files to store the same number of examples per record (see "
            f"schema.json). Received files with different packings: {found}"
        )
    return _Plan(paths, codec, chosen, names, counts, next(iter(packing.values())))


def _check_decode(decode: object) -> None:
    if decode is None:
        return
    if not isinstance(decode, Mapping) or not all(isinstance(k, str) for k in decode):
        raise TypeError(
            "Expected `decode` to be None or a dict of feature name -> change, such as "
            "{'image_raw': ('uint8', (28, 28, 1))} (see Schema.replace). "
            f"Received: decode={decode!r}"
        )


def _structure(tensors: Any, names: tuple[str, ...] | None) -> Any:
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
            or 1-D lists of varying length) is what is held. A feature of varying
            length is held as one flat array of values and row offsets. ``"auto"``
            does so when the decoded data fits ``memory_budget`` (with a ``map_fn``,
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
            values (a fixed shape); or a dict of feature name -> one of these (features
            not named stay ragged). Applied to ``map_fn``'s outputs when given, before
            ``batch_map_fn``. See :mod:`tfr_hooks.tfrecord.ragged`.
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
            :func:`tfr_hooks.tfrecord.sharding.shard_dataset`).

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
        SchemaMismatchError: If the first record of a file, or the stored schema, does not
            match ``schema``.
        ValueError: If ``shard`` is unknown, or ``"file"`` with fewer files than workers.

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> ds = tfrecord.dataset("data/mnist", batch_size=128, shuffle_buffer=1000,
        ...                       as_tuple=("image", "label"))  # doctest: +SKIP
        >>> for images, labels in ds:  # doctest: +SKIP
        ...     print(images.shape, labels.shape)
        (128, 28, 28) (128,)
    """
    check_positive_int(batch_size, "batch_size")
    check_non_negative_int(shuffle_buffer, "shuffle_buffer")
    if num_parallel_reads is not None:
        check_positive_int(num_parallel_reads, "num_parallel_reads")
    if num_epochs is not None:
        check_positive_int(num_epochs, "num_epochs")
    _check_functions(map_fn, batch_map_fn)
    if not (in_memory is True or in_memory is False or in_memory == "auto"):
        raise ValueError(expected("in_memory", "False, True or 'auto'", in_memory))
    if memory_budget is not None:
        check_positive_int(memory_budget, "memory_budget")
    shaping = check_shaping(pad_to, padding_values, bucket_boundaries, bucket_by)
    task = sharding.current_task()
    sharding.check_shard(shard)
    renamed = map_fn is not None or batch_map_fn is not None  # as_tuple names their outputs
    plan = _plan(files, schema, compression, as_tuple, select=not renamed, decode=decode)
    seed = sharding.shared_seed(seed, shuffle_buffer, task)
    mode = _memory_mode(plan, in_memory, memory_budget, map_fn) if in_memory else None
    if mode is not None:
        data, _ = _memory_data(
            plan,
            mode,
            batch_size,
            shuffle=shuffle_buffer > 0,
            seed=seed,
            drop_remainder=drop_remainder,
            num_epochs=num_epochs,
            map_fn=map_fn,
            batch_map_fn=batch_map_fn,
            prefetch=bool(prefetch),
            shaping=shaping,
        )
        # no files to split: every worker gathers the same batches and keeps its share
        memory_shard = "data" if shard in ("auto", "file") else shard
        return sharding.shard_dataset(
            _finish(data, plan.names, prefetch=None, autotune=autotune), memory_shard, 0, task
        )
    built = _build_dataset(
        plan,
        batch_size,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        deterministic=deterministic,
        num_parallel_reads=num_parallel_reads,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        map_fn=map_fn,
        batch_map_fn=batch_map_fn,
        prefetch=prefetch,
        autotune=autotune,
        shaping=shaping,
    )
    return sharding.shard_dataset(
        built,
        shard,
        len(plan.files),
        task,
        file_examples=plan.counts,
        batch_size=batch_size,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
    )


def _build_dataset(
    plan: _Plan,
    batch_size: int,
    *,
    shuffle_buffer: int,
    seed: int | None,
    deterministic: bool,
    num_parallel_reads: int | None,
    drop_remainder: bool,
    num_epochs: int | None,
    map_fn: Callable[[dict[str, Any]], Any] | None,
    prefetch: int | None,
    autotune: bool = False,
    batch_map_fn: Callable[[Any], Any] | None = None,
    shaping: Shaping = RAGGED,
) -> tf.data.Dataset:
    reads = num_parallel_reads or min(len(plan.files), 4)
    calls = tf.data.AUTOTUNE if autotune else PARALLEL_CALLS
    if prefetch == tf.data.AUTOTUNE and not autotune:
        prefetch = 2
    codec = plan.compression
    schema = plan.schema
    if plan.per_record > 1:  # packed shards
        parsed = packed_dataset(
            plan.files,
            codec,
            schema,
            plan.per_record,
            batch_size,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            num_parallel_reads=reads,
            drop_remainder=drop_remainder,
            num_epochs=num_epochs,
            prefetch=None,
            deterministic=deterministic,
        )
    else:
        parsed = _stream_batches(
            plan,
            batch_size,
            reads=reads,
            calls=calls,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            deterministic=deterministic,
            num_epochs=num_epochs,
            drop_remainder=drop_remainder,
        )
    bucketed = shaping.bucket_boundaries is not None
    if map_fn is not None or bucketed:
        examples = parsed.unbatch()
        if map_fn is not None:
            examples = examples.map(
                _as_dict(map_fn, plan.names), num_parallel_calls=calls, deterministic=deterministic
            )
        if bucketed:
            parsed = group_by_length(examples, batch_size, drop_remainder, shaping)
        else:
            parsed = batch_examples(examples, batch_size, drop_remainder)
    if shaping.pads:
        parsed = parsed.map(
            lambda batch: pad_batch(batch, shaping), num_parallel_calls=calls, deterministic=True
        )
    if batch_map_fn is not None:
        parsed = _map_batches(parsed, batch_map_fn)
    if not bucketed:  # bucketed, the batches of an epoch depend on the order of the examples
        parsed = _with_cardinality(parsed, plan, batch_size, num_epochs, drop_remainder)
    return _finish(parsed, plan.names, prefetch=prefetch, autotune=autotune)


def _stream_batches(
    plan: _Plan,
    batch_size: int,
    *,
    reads: int,
    calls: int,
    shuffle_buffer: int,
    seed: int | None,
    deterministic: bool,
    num_epochs: int | None,
    drop_remainder: bool,
) -> tf.data.Dataset:
    """Batches parsed from shards of one example a record.

    Shuffled, each pass gets its own order, in graph mode too (a seed drawn anew at every
    initialization, as for packed shards and in memory: see
    :func:`~tfr_hooks.tfrecord.packed.record_passes`), reproducibly given ``seed``.
    """
    records, _ = record_passes(
        plan.files,
        plan.compression,
        reads=reads,
        deterministic=deterministic,
        buffer=shuffle_buffer,
        seed=seed,
        num_epochs=num_epochs,
    )
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    return batches.map(
        plan.schema.parse_batch, num_parallel_calls=calls, deterministic=deterministic
    )


def _with_cardinality(
    data: tf.data.Dataset,
    plan: _Plan,
    batch_size: int,
    num_epochs: int | None,
    drop_remainder: bool,
) -> tf.data.Dataset:
    """Tell the dataset its length when ``schema.json`` gives every file's examples."""
    examples = plan.examples
    if examples is None or num_epochs is None:
        return data
    total = examples * num_epochs
    batches = total // batch_size if drop_remainder else -(-total // batch_size)
    return data.apply(tf.data.experimental.assert_cardinality(batches))


def _finish(
    data: tf.data.Dataset, names: tuple[str, ...] | None, *, prefetch: int | None, autotune: bool
) -> tf.data.Dataset:
    """The last stages every TF2 pipeline shares: structure, prefetch, options."""
    if names is not None:
        data = data.map(lambda d: _structure(d, names))
    if prefetch:
        data = data.prefetch(prefetch)
    if not autotune:
        options = tf.data.Options()
        options.autotune.enabled = False
        data = data.with_options(options)
    return data


def _memory_mode(
    plan: _Plan,
    in_memory: bool | str,
    memory_budget: int | None,
    map_fn: Callable[..., Any] | None,
) -> str | None:
    """What to hold in memory: ``"decoded"`` data, ``"encoded"`` records, or ``None``.

    ``in_memory=True`` holds the decoded data (``map_fn``'s output when given).
    ``"auto"`` holds the decoded data when its size fits ``memory_budget``; with a
    ``map_fn``, whose output size is unknown before it runs, the size is estimated by
    decoding the first examples. When the decoded data does not fit but the parsed
    records do, it holds those and runs ``map_fn`` on every batch; otherwise it streams.
    """
    if in_memory is True:
        return "decoded"
    examples = plan.examples
    if examples is None:
        examples = count_examples(plan.files, plan.compression, plan.per_record)
    file_bytes = sum(tf.io.gfile.stat(path).length for path in plan.files)
    budget = default_memory_budget() if memory_budget is None else memory_budget
    mib = 2**20
    if map_fn is None:
        size = _records_nbytes(plan, examples, file_bytes)
        chosen = size <= budget
        logger.info(
            "in_memory='auto': %s (%d examples decode to %.1f MiB; memory_budget %.1f MiB).",
            "holding the data in memory" if chosen else "streaming from the files",
            examples,
            size / mib,
            budget / mib,
        )
        return "decoded" if chosen else None
    sample = mapped_sample_nbytes(
        plan.files, plan.compression, plan.schema, map_fn, per_record=plan.per_record
    )
    decoded = None if sample is None else sample[0] * examples // max(1, sample[1])
    why = (
        "map_fn's output is not of one fixed shape"
        if decoded is None
        else f"{examples} examples decode to about {decoded / mib:.1f} MiB through map_fn "
        f"(estimated from the first {sample[1] if sample else 0})"
    )
    if decoded is not None and decoded <= budget:
        logger.info(
            "in_memory='auto': holding the decoded data (map_fn's output) in memory, as %s; "
            "memory_budget %.1f MiB.",
            why,
            budget / mib,
        )
        return "decoded"
    encoded = _records_nbytes(plan, examples, file_bytes)
    if encoded <= budget:
        logger.info(
            "in_memory='auto': holding the encoded records in memory and running map_fn on "
            "every batch, as %s, more than memory_budget %.1f MiB, and the records take "
            "%.1f MiB.",
            why,
            budget / mib,
            encoded / mib,
        )
        return "encoded"
    logger.info(
        "in_memory='auto': streaming from the files, as %s, and the records take "
        "%.1f MiB; memory_budget %.1f MiB.",
        why,
        encoded / mib,
        budget / mib,
    )
    return None


def _records_nbytes(plan: _Plan, examples: int, file_bytes: int) -> int:
    """Bytes the parsed records take in memory; sampled when a feature varies in length."""
    return records_nbytes(
        plan.files, plan.compression, plan.schema, examples, file_bytes, plan.per_record
    )


def _as_dict(map_fn: Callable[..., Any], names: tuple[str, ...] | None) -> Callable[..., Any]:
    """``map_fn``, returning a dict: a tuple it returns is named by ``as_tuple``."""

    def named(example: Any) -> Any:
        out = map_fn(example)
        if names is not None and isinstance(out, (tuple, list)) and len(out) == len(names):
            return dict(zip(names, out, strict=True))
        return out

    return named


def _memory_data(
    plan: _Plan,
    mode: str,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int | None,
    drop_remainder: bool,
    num_epochs: int | None,
    map_fn: Callable[..., Any] | None,
    batch_map_fn: Callable[..., Any] | None,
    prefetch: bool,
    shaping: Shaping = RAGGED,
) -> tuple[tf.data.Dataset, int]:
    """The in-memory pipeline of batches (dicts), and the examples of one pass."""
    decode_each_batch = None
    if mode == "decoded" and map_fn is not None:
        count = plan.examples
        if count is None and plan.per_record == 1:  # allocate once: memory of the output only
            count = count_examples(plan.files, plan.compression, plan.per_record)
        arrays = load_mapped(
            plan.files,
            plan.compression,
            plan.schema,
            _as_dict(map_fn, plan.names),
            per_record=plan.per_record,
            count=count,
        )
    else:
        arrays = load(
            plan.files,
            plan.compression,
            plan.schema,
            per_record=plan.per_record,
            counts=plan.counts,
        )
        if map_fn is not None:
            decode_each_batch = _as_dict(map_fn, plan.names)
    buckets = None
    if shaping.bucket_boundaries is not None:
        if decode_each_batch is not None:
            raise ValueError(
                "Expected the decoded data to fit in memory to bucket it there (held "
                "encoded, an example's length is known only after map_fn). Received: "
                f"bucket_boundaries={list(shaping.bucket_boundaries)} with the encoded "
                "records held; raise memory_budget, or stream with in_memory=False"
            )
        key = bucket_key(shaping, {name: _spec_of(value) for name, value in arrays.items()})
        held = arrays[key]
        lengths = (
            held.lengths
            if isinstance(held, RaggedArray)
            else np.full(len(held), held.shape[1] if held.ndim > 1 else 1, np.int64)
        )
        buckets = bucket_of(lengths, shaping.bucket_boundaries)
    pad = functools.partial(pad_batch, shaping=shaping) if shaping.pads else None
    pad_after = pad is not None and decode_each_batch is not None  # padded after decoding
    data = memory_dataset(
        arrays,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_remainder=drop_remainder,
        num_epochs=num_epochs,
        prefetch=2 if prefetch and batch_map_fn is None and not pad_after else None,
        map_fn=decode_each_batch,
        buckets=buckets,
        batch_fn=pad if decode_each_batch is None else None,
    )
    if pad is not None and pad_after:
        data = data.map(pad, num_parallel_calls=PARALLEL_CALLS, deterministic=True)
        if prefetch and batch_map_fn is None:
            data = data.prefetch(2)
    if batch_map_fn is not None:
        data = _map_batches(data, batch_map_fn)
        if prefetch:
            data = data.prefetch(2)
    return data, len(next(iter(arrays.values())))


def _spec_of(held: Any) -> Any:
    """A stand-in spec of one held feature: ragged for a :class:`RaggedArray`."""
    if isinstance(held, RaggedArray):
        return tf.RaggedTensorSpec(
            [None, None],
            tf.as_dtype(held.values.dtype) if held.values.dtype.kind not in "OSU" else tf.string,
        )
    return tf.TensorSpec(held.shape)


def _map_batches(data: tf.data.Dataset, batch_map_fn: Callable[..., Any]) -> tf.data.Dataset:
    """``batch_map_fn`` on every batch, its random ops drawing anew every epoch."""
    return data.map(
        fresh_randomness(batch_map_fn), num_parallel_calls=PARALLEL_CALLS, deterministic=True
    )


def _check_functions(map_fn: object, batch_map_fn: object) -> None:
    if map_fn is not None and not callable(map_fn):
        raise TypeError(expected("map_fn", "callable or None", map_fn))
    if batch_map_fn is not None and not callable(batch_map_fn):
        raise TypeError(expected("batch_map_fn", "callable or None", batch_map_fn))


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
    size and turns read errors into messages naming the file.

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
            cuts to that length; a dict per feature.
        padding_values: As for :func:`dataset`: the value padding adds.
        bucket_boundaries: As for :func:`dataset`: batches of one length bucket each.
            Only with ``pipeline="dataset"`` (a queue batches records before they are
            parsed, so it cannot group them by length).
        bucket_by: As for :func:`dataset`: the feature whose length picks the bucket.

    Returns:
        A :class:`Batches`.

    Raises:
        RuntimeError: If called eagerly.
        ValueError: For a bad argument, or ``in_memory`` with ``pipeline="queue"``.
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
    if tf.executing_eagerly():
        raise RuntimeError(
            "read_batches builds graph-mode tensors: call it inside "
            "`with tf.Graph().as_default():` or after tf.compat.v1.disable_eager_execution()"
            ", or use tfrecord.dataset(...) in eager code."
        )
    if pipeline not in PIPELINES:
        raise ValueError(expected("pipeline", "'dataset' or 'queue'", pipeline))
    check_positive_int(batch_size, "batch_size")
    check_non_negative_int(shuffle_buffer, "shuffle_buffer")
    if num_parallel_reads is not None:
        check_positive_int(num_parallel_reads, "num_parallel_reads")
    if num_epochs is not None:
        check_positive_int(num_epochs, "num_epochs")
    if not (in_memory is True or in_memory is False or in_memory == "auto"):
        raise ValueError(expected("in_memory", "False, True or 'auto'", in_memory))
    if memory_budget is not None:
        check_positive_int(memory_budget, "memory_budget")
    _check_functions(map_fn, batch_map_fn)
    shaping = check_shaping(pad_to, padding_values, bucket_boundaries, bucket_by)
    if pipeline == "queue":
        if shaping.bucket_boundaries is not None:
            raise ValueError(
                expected(
                    "bucket_boundaries",
                    "None with pipeline='queue' (a queue batches the records before they "
                    "are parsed, so it cannot group them by length; bucket with "
                    "pipeline='dataset')",
                    list(shaping.bucket_boundaries),
                )
            )
        if map_fn is not None:
            raise ValueError(
                expected(
                    "map_fn",
                    "None with pipeline='queue' (a queue parses whole batches; map "
                    "examples with pipeline='dataset', or map batches with batch_map_fn)",
                    map_fn,
                )
            )
        if in_memory is not False:
            raise ValueError(
                expected(
                    "in_memory",
                    "False with pipeline='queue' (a queue streams from the files; hold "
                    "the data in memory with pipeline='dataset')",
                    in_memory,
                )
            )
        threads = 2 if num_parallel_reads is None else num_parallel_reads
        cap = shuffle_buffer + (threads + 2) * batch_size if capacity is None else capacity
        check_positive_int(cap, "capacity")
        if cap <= shuffle_buffer or cap < batch_size:
            raise ValueError(
                "Expected `capacity` to exceed `shuffle_buffer` and be at least "
                f"`batch_size`. Received: capacity={cap}, shuffle_buffer={shuffle_buffer}, "
                f"batch_size={batch_size}"
            )
    elif capacity is not None:
        raise ValueError(
            expected("capacity", "None with pipeline='dataset' (a queue's capacity)", capacity)
        )
    renamed = map_fn is not None or batch_map_fn is not None  # as_tuple names their outputs
    plan = _plan(files, schema, compression, as_tuple, select=not renamed, decode=decode)
    if pipeline == "queue" and plan.per_record > 1:
        raise ValueError(
            expected(
                "pipeline",
                f"'dataset' for packed shards ({plan.per_record} examples per record)",
                pipeline,
            )
        )
    num_examples = plan.examples
    mode = _memory_mode(plan, in_memory, memory_budget, map_fn) if in_memory else None
    memory = mode is not None
    with tf.name_scope(name):
        if mode is not None:
            data, num_examples = _memory_data(
                plan,
                mode,
                batch_size,
                shuffle=shuffle_buffer > 0,
                seed=seed,
                drop_remainder=drop_remainder,
                num_epochs=num_epochs,
                map_fn=map_fn,
                batch_map_fn=batch_map_fn,
                prefetch=True,
                shaping=shaping,
            )
            data = _finish(data, plan.names, prefetch=None, autotune=False)
            iterator = tf.compat.v1.data.make_initializable_iterator(data)
            tensors = iterator.get_next()
            initializers = [iterator.initializer]
        elif pipeline == "dataset":
            data = _build_dataset(
                plan,
                batch_size,
                shuffle_buffer=shuffle_buffer,
                seed=seed,
                deterministic=True,
                num_parallel_reads=num_parallel_reads,
                drop_remainder=drop_remainder,
                num_epochs=num_epochs,
                map_fn=map_fn,
                batch_map_fn=batch_map_fn,
                prefetch=1,
                shaping=shaping,
            )
            iterator = tf.compat.v1.data.make_initializable_iterator(data)
            tensors = iterator.get_next()
            initializers = [iterator.initializer]
        else:
            with _quiet_deprecations():  # the user asked for queues: no need to be told
                parsed = _queue_pipeline(
                    plan,
                    batch_size,
                    num_epochs=num_epochs,
                    shuffle_buffer=shuffle_buffer,
                    seed=seed,
                    readers=threads,
                    capacity=cap,
                    drop_remainder=drop_remainder,
                )
            parsed = pad_batch(parsed, shaping)
            if batch_map_fn is not None:
                parsed = batch_map_fn(parsed)
            tensors = _structure(parsed, plan.names)
            initializers = []
        first = tensors[0] if isinstance(tensors, tuple) else next(iter(tensors.values()))
        size = _batch_size_of(first)
    return Batches(
        tensors,
        initializers,
        plan.files,
        plan.schema,
        pipeline,
        plan.compression,
        size,
        num_examples,
        plan.per_record,
        num_epochs,
        memory,
    )


class _DropDeprecations(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "is deprecated" not in str(record.msg)


@contextlib.contextmanager
def _quiet_deprecations() -> Iterator[None]:
    """Drop TensorFlow's deprecation notices while the queue pipeline is built."""
    tf_logger = logging.getLogger("tensorflow")
    quiet = _DropDeprecations()
    tf_logger.addFilter(quiet)
    try:
        yield
    finally:
        tf_logger.removeFilter(quiet)


def _batch_size_of(tensor: Any) -> Any:
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.nrows(out_type=tf.int32)
    return tf.shape(tensor)[0]


def _queue_pipeline(
    plan: _Plan,
    batch_size: int,
    *,
    num_epochs: int | None,
    shuffle_buffer: int,
    seed: int | None,
    readers: int,
    capacity: int,
    drop_remainder: bool,
) -> dict[str, Any]:
    filenames = tf.compat.v1.train.string_input_producer(
        plan.files,
        num_epochs=num_epochs,
        shuffle=shuffle_buffer > 0,
        seed=seed,
        capacity=max(32, len(plan.files)),
    )
    options = tf.io.TFRecordOptions(compression_type=plan.compression)
    reads = []
    for _ in range(readers):
        reader = tf.compat.v1.TFRecordReader(options=options)
        _, serialized = reader.read_up_to(filenames, num_records=batch_size)
        reads.append([serialized])
    if shuffle_buffer > 0:
        batch = tf.compat.v1.train.shuffle_batch_join(
            reads,
            batch_size,
            capacity=capacity,
            min_after_dequeue=shuffle_buffer,
            seed=seed,
            enqueue_many=True,
            allow_smaller_final_batch=not drop_remainder,
        )
    else:
        batch = tf.compat.v1.train.batch_join(
            reads,
            batch_size,
            capacity=capacity,
            enqueue_many=True,
            allow_smaller_final_batch=not drop_remainder,
        )
    serialized_batch = batch[0] if isinstance(batch, (list, tuple)) else batch
    return plan.schema.parse_batch(serialized_batch)
