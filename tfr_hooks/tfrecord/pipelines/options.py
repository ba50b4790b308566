"""The readers' options, declared once, checked once, and the kind of pipeline they build.

:class:`ReadArgs` declares the options :func:`~tfr_hooks.tfrecord.dataset`,
:func:`~tfr_hooks.tfrecord.source` and :func:`~tfr_hooks.tfrecord.read_batches` share
(each takes them as ``**options: Unpack[ReadArgs]``), grouped by purpose and documented
here only. The knobs most reads never touch are one frozen :class:`ReadConfig`, passed as
``read_config=ReadConfig(...)`` (as ``tf.data.Options`` and ``tfds.ReadConfig`` do).
:func:`read_options` checks them once into one frozen :class:`ReadOptions`, which the
plan and the pipeline builder (:mod:`tfr_hooks.tfrecord.pipelines.pipeline`) read;
:func:`queue_capacity` holds the checks only the queue pipeline needs. A
:class:`PipelineKind` names what was built, once, for every consumer (``Batches``,
``SessionLoop``, the input report).

Examples:
    >>> from tfr_hooks import tfrecord
    >>> ds = tfrecord.dataset(
    ...     "data/mnist", 128, shuffle=10_000, as_tuple=("image", "label"),
    ...     read_config=tfrecord.ReadConfig(num_parallel_reads=8))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import tensorflow as tf

from tfr_hooks.checks import check_non_negative_int, check_positive_int, expected
from tfr_hooks.service.address import check_service_address
from tfr_hooks.tfrecord.formats.framing import check_compression
from tfr_hooks.tfrecord.pipelines.pools import DEFAULT_POOL
from tfr_hooks.tfrecord.pipelines.ragged import PadTo, Shaping, check_shaping
from tfr_hooks.tfrecord.pipelines.sharding import check_shard
from tfr_hooks.tfrecord.sources.base import SchemaLike

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10 (TensorFlow depends on typing_extensions)
    from typing_extensions import Unpack

__all__ = [
    "PipelineKind",
    "ReadArgs",
    "ReadConfig",
    "ReadOptions",
    "Unpack",
    "read_options",
    "check_servable",
    "queue_capacity",
    "queue_readers",
]


class PipelineKind(enum.Enum):
    """The kind of input pipeline a reader built.

    Attributes:
        STREAMED: ``tf.data`` from shards of one example a record, parsed every epoch.
        PACKED: ``tf.data`` from packed shards (many examples a record).
        MEMORY_DECODED: The decoded data (``map_fn``'s output when given) held in memory.
        MEMORY_ENCODED: The parsed records held in memory, ``map_fn`` run every batch.
        QUEUE: Queue runners (``read_batches(pipeline="queue")``).
    """

    STREAMED = "streamed"
    PACKED = "packed"
    MEMORY_DECODED = "memory_decoded"
    MEMORY_ENCODED = "memory_encoded"
    QUEUE = "queue"

    @property
    def in_memory(self) -> bool:
        """Whether the data is held in memory (decoded or encoded)."""
        return self in (PipelineKind.MEMORY_DECODED, PipelineKind.MEMORY_ENCODED)

    @property
    def packed(self) -> bool:
        """Whether the batches are parsed from packed shards every epoch."""
        return self is PipelineKind.PACKED

    @property
    def pipeline(self) -> str:
        """The ``pipeline`` of ``read_batches`` that builds it: ``"dataset"`` or ``"queue"``."""
        return "queue" if self is PipelineKind.QUEUE else "dataset"


@dataclass(frozen=True, kw_only=True)
class ReadConfig:
    """The readers' rarely touched knobs: parallelism, prefetching, files, the queue.

    Passed as ``read_config=ReadConfig(...)`` to :func:`~tfr_hooks.tfrecord.dataset`,
    :func:`~tfr_hooks.tfrecord.source` and :func:`~tfr_hooks.tfrecord.read_batches`
    (as ``tfds.load`` takes a ``tfds.ReadConfig``); the defaults suit most reads. Frozen:
    derive another with ``dataclasses.replace(config, prefetch=4)``. Each field is
    checked when the object is made.

    Attributes:
        num_parallel_reads: Files read at once; ``None`` for ``min(files, 4)``. For
            ``read_batches(pipeline="queue")`` it is the number of reader threads (one
            ``TFRecordReader`` each, taking the next file name from the queue); ``None``
            for 2. The meaning differs because a queue pipeline has no ``tf.data``
            parallelism: its readers are threads of the queue runner.
        deterministic: Whether parallel reads and parsing keep a fixed order.
        prefetch: Batches to prefetch: ``None`` (the default) for the reader's own (2
            batches, or tf.data's choice with ``autotune``; 1 for ``read_batches``; none
            for ``dataset(in_memory=True)`` data small enough to be gathered a pass at a
            time, whose next pass is gathered ahead instead), 0 for none,
            ``tf.data.AUTOTUNE`` for the same as ``None``.
        autotune: Let tf.data tune parallelism and prefetching while it runs. Off by
            default: with it on, starting a new iterator over the dataset (each epoch,
            when the data decides the epoch length) stalls for about 2 s now and then
            while tf.data's tuning thread winds down (measured on TensorFlow 2.21); off,
            parsing runs on one thread per core.
        memory_budget: Bytes the decoded data may take for ``in_memory="auto"``;
            ``None`` for half of the memory available at the call.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        decode: Changes to the schema, as :meth:`~tfr_hooks.tfrecord.Schema.replace`
            takes them: ``{"image_raw": ("uint8", (28, 28, 1))}`` reads a raw bytes
            feature as an image, ``{"trip_seconds": {"default": 0.0}}`` an optional
            feature as a dense tensor; the other features keep their schema.
        padding_values: The value ``pad_to`` adds: ``None`` for 0 (``b""`` for
            strings, ``False`` for bools), a scalar, or a dict of feature name -> scalar.
        shard: :func:`~tfr_hooks.tfrecord.dataset` and ``source`` only: how a
            multi-worker strategy (``MultiWorkerMirroredStrategy``) splits the data
            among its workers: ``"auto"`` by data for a read that seeks on resume
            (``shuffle="global"``, or unshuffled uncompressed files read
            deterministically: every worker reads one sequence and keeps its part of each
            global batch, so a resume holds on any worker count), else by file when there
            are at least as many files as workers, by data otherwise; ``"file"`` (no
            position then: a resume replays; an error with fewer files than
            workers), ``"data"``, or ``"off"`` (every worker reads everything).
            ``batch_size`` is then the global batch size. With more than one worker and
            ``shuffle=N`` but no ``seed``, a seed common to all workers is used, so
            that every example is read once per epoch (see
            :func:`tfr_hooks.tfrecord.pipelines.sharding.shard_dataset`). With ``service``, the
            service splits the data instead, and neither ``shard`` nor the common seed
            is used.
        capacity: ``read_batches(pipeline="queue")`` only: the queue's capacity;
            ``None`` for ``N + (num_parallel_reads + 2) * batch_size`` (``N`` of
            ``shuffle=N``, 0 unshuffled).
        name: ``read_batches`` only: the name scope of its ops.
        bucket_pool: With ``bucket_boundaries`` on a streamed or packed read: the
            batches of one pool, read and parsed at once, sorted by length and cut into
            batches (see :mod:`tfr_hooks.tfrecord.pipelines.pools`). A larger pool pads less and
            holds more examples in memory; 32 by default.
    """

    num_parallel_reads: int | None = None
    deterministic: bool = True
    prefetch: int | None = None
    autotune: bool = False
    memory_budget: int | None = None
    compression: str | None = None
    decode: Mapping[str, Any] | None = None
    padding_values: Any = None
    shard: str = "auto"
    capacity: int | None = None
    name: str = "tfrecord_input"
    bucket_pool: int = DEFAULT_POOL

    def __post_init__(self) -> None:
        if self.num_parallel_reads is not None:
            check_positive_int(self.num_parallel_reads, "num_parallel_reads")
        for flag in ("deterministic", "autotune"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(expected(flag, "True or False", getattr(self, flag)))
        prefetch = self.prefetch
        if prefetch is not None and prefetch != tf.data.AUTOTUNE:
            check_non_negative_int(prefetch, "prefetch")
        if self.memory_budget is not None:
            check_positive_int(self.memory_budget, "memory_budget")
        check_compression(self.compression)
        check_shard(self.shard)
        if self.capacity is not None:
            check_positive_int(self.capacity, "capacity")
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(expected("name", "a non-empty string", self.name))
        check_positive_int(self.bucket_pool, "bucket_pool")


class ReadArgs(TypedDict, total=False):
    """The options every reader takes, by keyword, after ``files`` and ``batch_size``.

    :func:`~tfr_hooks.tfrecord.dataset`, :func:`~tfr_hooks.tfrecord.source` and
    :func:`~tfr_hooks.tfrecord.read_batches` take them as ``**options:
    Unpack[ReadArgs]``: one name, one meaning and one default for all three. A keyword
    not declared here is a ``TypeError`` naming the known ones; one that moved into
    :class:`ReadConfig` names its new spelling.

    **What to read**

    Attributes:
        schema: A :class:`~tfr_hooks.tfrecord.Schema`, the path of a ``schema.json``, or
            ``None`` (the default) to use the stored sidecar or infer the schema from
            the records.
        split: For a TensorFlow Datasets directory (``<data_dir>/<name>/<version>``,
            see :mod:`~tfr_hooks.tfrecord.sources.tfds`), the split to read; ``None`` for
            ``"train"``. Its features are decoded as its ``features.json`` declares,
            ``as_tuple=True`` names its supervised keys, and the cardinality is exact
            (from ``dataset_info.json``). An error with other files.
        max_corrupt_records: The damaged records the data may hold, skipped (AWS's
            TFRecord reader calls it ``max_corrupted_records_to_skip``). 0 (the
            default): the first damaged record raises
            :class:`~tfr_hooks.tfrecord.CorruptRecordError` naming its file and index.
            Above 0, every file is scanned when the reader is called (a read of every
            byte: :mod:`tfr_hooks.tfrecord.formats.damage`): a record failing a checksum, a
            truncated tail, a broken GZIP/ZLIB stream (the rest of the file, one record)
            or a record that is no Example is logged (file and index) and skipped; the
            ``max_corrupt_records + 1``-th raises that error there. The records skipped
            are in the reader's facts (``ReadFacts.corrupt_records``) and the loops'
            history (``input/corrupt_records``). The scan finds the same damage again
            when a run resumes, so the examples of an epoch stay the same.

    **Order**

    Attributes:
        shuffle: The order, one value for every reader and placement: ``None`` (the
            default) reads in the stored order (the files in the order given, each
            file's records in turn); ``N``, a positive int, mixes the examples in a
            buffer of ``N`` (``tf.data.Dataset.shuffle``): when shuffling, the order of
            the files is shuffled too, and every pass (every new iterator; in graph
            mode, every initialization of one) gets a new order; for
            ``read_batches(pipeline="queue")`` it is the ``min_after_dequeue`` of
            ``shuffle_batch_join`` (the file names shuffled). ``"global"``: every epoch
            reads the whole data set in an order drawn from ``(seed, epoch)``
            (:mod:`tfr_hooks.tfrecord.pipelines.orders.global_order`), each example once, in memory
            bounded by the order's window (about two windows of 32,768 records,
            whatever the data's size). Choose it when the files hold the examples in
            some order (by class, by source, by time) that a buffer much smaller than
            the data cannot undo: ``shuffle=N`` only mixes examples that lie within
            ``N`` of each other. Streamed, it needs a record index of every file, built
            on the first read (one sequential pass, kept beside the files or in a cache
            directory; see :mod:`tfr_hooks.tfrecord.formats.index`). Each new iterator
            (in graph mode, each initialization) is the next epoch, with its own order;
            the same seed gives the same orders. Streamed files of one example a
            record, uncompressed, only for now (packed shards, GZIP/ZLIB files,
            ``pipeline="queue"``, ``service`` and ``max_corrupt_records > 0`` raise a
            ``ValueError``). In memory (``in_memory``) the three mean the same over the
            held examples: ``None`` the stored order, ``N`` a buffer of ``N`` over the
            examples' indices, ``"global"`` a fresh permutation of all the examples
            each epoch. ``0``, a bool or another string is a ``ValueError``.
        shuffle_buffer: Deprecated (removed in the next release): the former
            spelling of ``shuffle=N``, which it still means; ``0`` means
            ``shuffle=None``. Passing it emits a ``DeprecationWarning``; passing a
            nonzero ``shuffle_buffer`` with ``shuffle`` is a ``ValueError``.
        seed: Seed for the shuffles: the sequence of the passes' orders (default
            ``None``).
        num_epochs: Passes over the data (default 1); ``None`` repeats forever.
        weights: With ``files`` a mapping of named sources (``{"web": "data/web",
            "books": "data/books"}``), each source's share of the mixed stream, a mapping
            over the same names (``{"web": 0.7, "books": 0.3}``; numbers >= 0, one above
            0, scaled to sum to 1); ``None`` (the default) reads one source. A mixture
            reads with ``shuffle="global"``: which source each position of the stream
            comes from is a closed-form interleave of the weights, and each source has
            its own epochs, each in its own global order. An epoch of a mixture is the
            sum of its sources' records in positions (see ``docs/tfrecord.md``,
            "Mixtures", and :mod:`tfr_hooks.tfrecord.pipelines.orders.mixture`).

    **Batch shape**

    Attributes:
        drop_remainder: Whether to drop the final, smaller batch (default ``False``).
            The batch dimension is static only then, on every pipeline, as in tf.data.
        pad_to: How features of varying length reach the batch: ``None`` (the
            default) as ``tf.RaggedTensor`` rows; ``"longest"`` padded to the batch's
            longest row (as ``padded_batch``); an integer ``L`` padded or cut to ``L``
            values (frames, for a feature list: ``[batch, L, *frame shape]``); or a
            dict of feature name -> one of these (features not named stay ragged).
            Applied to ``map_fn``'s outputs when given, before ``batch_map_fn``; the
            value added is ``ReadConfig.padding_values``. See
            :mod:`tfr_hooks.tfrecord.pipelines.ragged`.
        bucket_boundaries: Batch examples of about the same length together. In
            memory, as ``tf.data.Dataset.bucket_by_sequence_length``: bucket ``i``
            holds lengths from ``bucket_boundaries[i-1]`` (0 for the first) up to, not
            including, ``bucket_boundaries[i]`` (the last has no upper end); every
            batch comes from one bucket, the number of batches per epoch is exact and
            each epoch serves them in a fresh random order. Streamed or packed, it
            switches on batching from sorted pools: a pool of
            :attr:`ReadConfig.bucket_pool` batches is parsed at once, sorted by
            length, cut into batches, and their order shuffled with the seed (see
            :mod:`tfr_hooks.tfrecord.pipelines.pools`); every batch comes from one sorted pool
            (it can straddle a boundary), and an epoch has as many batches as
            without bucketing. Not with ``pipeline="queue"`` (a queue batches records
            before they are parsed). Default ``None``.
        bucket_by: The feature whose length picks the bucket; ``None`` (the default)
            for the only feature (or ``map_fn`` output) of varying length.

    **Transforms**

    Attributes:
        map_fn: Applied to each parsed example (a dict of tensors), in parallel, before
            re-batching: the decoding function (``tf.io.decode_jpeg``...). It returns a
            dict of tensors (or a tuple, named by ``as_tuple``). In memory it runs
            **once** per example, and its output is held in memory (see
            ``in_memory``); streamed, it runs every epoch. Put work that must differ
            every epoch (random crops, flips) in ``batch_map_fn``. Not with
            ``pipeline="queue"``. Default ``None``.
        batch_map_fn: Applied to every batch (the dict of batch tensors, before
            ``as_tuple``), vectorized, on every pipeline (streamed, packed, in memory,
            queue), every epoch. Its random ops without an op seed draw anew every
            epoch, even under ``tf.random.set_seed``. Default ``None``.
        as_tuple: Feature names to return as a tuple, e.g. ``("image", "label")``;
            ``None`` (the default) returns a dict of all features. With ``map_fn`` or
            ``batch_map_fn``, the names of the last one's outputs.

    **Placement and speed**

    Attributes:
        in_memory: ``True`` reads and decodes every shard once, when the reader is
            called, and serves the batches from memory by gathering (see
            :mod:`tfr_hooks.tfrecord.pipelines.memory`): each epoch (each new iterator) follows
            the order ``shuffle`` names (``"global"``: a fresh permutation of all the
            examples; ``N``: a buffer of ``N`` over their indices; ``None``: the stored
            order), and ends with its own final batch. With
            ``map_fn``, its output (dense tensors of one shape for all examples, or
            lists of varying length) is what is held. ``"auto"`` does so when the
            decoded data fits ``ReadConfig.memory_budget`` (with a ``map_fn``, its size
            is estimated by decoding the first 16 examples); when it does not but the
            parsed records do, it holds the records and runs ``map_fn`` on every batch;
            otherwise it streams, and it logs its choice and why at INFO level.
            ``False`` (the default) streams from the files, in constant memory: holding
            a whole data set in memory is a choice only the caller can make. Not with
            ``pipeline="queue"`` nor ``service``.
        service: The address of a tf.data service dispatcher, ``"grpc://HOST:PORT"``
            (or ``"HOST:PORT"``), whose workers then run the whole pipeline (read,
            parse, ``map_fn``, padding, bucketing, ``batch_map_fn``) and send the
            batches; ``None`` (the default) runs it here. Mode ``"distributed_epoch"``:
            every epoch (every new iterator; in graph mode, every initialization) is
            each example once, the records split over the workers in ranges of index
            blocks, so that even one file is shared (compressed files: one split a
            file, the extra workers idle; each worker batches its own splits, so an
            epoch may end in several partial batches); at most once when a worker
            restarts. Not with ``shuffle="global"``. The dataset's cardinality is
            unknown (a loop learns the epoch's end from the data's end). Under a
            multi-worker strategy the trainers share one job, named from the cluster,
            the files and the batch size; build the dataset once and iterate it anew
            each epoch (see ``docs/data_service.md``). A dispatcher that does not
            answer is an error at once. Not with ``pipeline="queue"``. See :mod:`tfr_hooks.service`.
        read_config: A :class:`ReadConfig`: the knobs most reads never touch
            (parallel reads, prefetch, autotune, determinism, the memory budget,
            compression, schema changes, padding values, sharding, the queue's capacity).
    """

    # what to read
    schema: SchemaLike
    split: str | None
    max_corrupt_records: int
    # order
    shuffle: int | str | None
    shuffle_buffer: int
    seed: int | None
    num_epochs: int | None
    weights: Mapping[str, float] | None
    # batch shape
    drop_remainder: bool
    pad_to: PadTo
    bucket_boundaries: Sequence[int] | None
    bucket_by: str | None
    # transforms
    map_fn: Callable[[dict[str, Any]], Any] | Mapping[str, Callable[..., Any]] | None
    batch_map_fn: Callable[[Any], Any] | None
    as_tuple: Sequence[str] | bool | None
    # placement and speed
    in_memory: bool | str
    service: str | None
    read_config: ReadConfig


@dataclass(frozen=True)
class ReadOptions:
    """A reader's options, checked (see :func:`read_options`); the defaults of :class:`ReadArgs`.

    Each attribute is the :class:`ReadArgs` option of the same name, except ``shaping``
    (``pad_to``, ``bucket_boundaries``, ``bucket_by`` and ``ReadConfig.padding_values``,
    checked together) and ``config`` (``read_config``, its ``prefetch`` resolved to the
    reader's own). ``service`` is normalized to ``"grpc://HOST:PORT"``, and the
    deprecated ``shuffle_buffer`` to ``shuffle`` (the one field of the order;
    :attr:`shuffle_buffer` is derived from it).
    """

    batch_size: int
    schema: SchemaLike = None
    split: str | None = None
    max_corrupt_records: int = 0
    shuffle: int | str | None = None
    seed: int | None = None
    num_epochs: int | None = 1
    weights: Mapping[str, float] | None = None
    drop_remainder: bool = False
    shaping: Shaping = field(default_factory=Shaping)
    # with weights=, a mapping of source names to map_fns (applied by the mixture's order)
    map_fn: Callable[[dict[str, Any]], Any] | None = None
    batch_map_fn: Callable[[Any], Any] | None = None
    as_tuple: Sequence[str] | bool | None = None
    in_memory: bool | str = False
    service: str | None = None
    config: ReadConfig = field(default_factory=ReadConfig)

    @property
    def shuffles(self) -> bool:
        """Whether the reader shuffles: with a buffer, or in the global order."""
        return self.shuffle is not None

    @property
    def shuffle_buffer(self) -> int:
        """The buffer of ``shuffle=N``: ``N``, else 0 (no buffer: unshuffled, or global)."""
        return self.shuffle if isinstance(self.shuffle, int) else 0

    @property
    def renamed(self) -> bool:
        """Whether ``as_tuple`` names the outputs of ``map_fn``/``batch_map_fn``."""
        return self.map_fn is not None or self.batch_map_fn is not None


#: The option names of :class:`ReadArgs`, in their documented order.
READ_ARGS: tuple[str, ...] = tuple(ReadArgs.__annotations__)
#: The keywords that moved into :class:`ReadConfig` (each of its fields).
MOVED: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ReadConfig))
#: The knobs of :class:`ReadConfig` that only some readers read, and the readers.
_ONLY_FOR = {
    "shard": ("dataset", "source"),
    "capacity": ("read_batches",),
    "name": ("read_batches",),
}


def read_options(reader: str, batch_size: int, options: Mapping[str, Any]) -> ReadOptions:
    """Check a reader's ``batch_size`` and options (:class:`ReadArgs`) into a :class:`ReadOptions`.

    Args:
        reader: The reader's name (``"dataset"``, ``"source"``, ``"read_batches"``), for
            the messages and its own defaults.
        batch_size: Examples per batch.
        options: The keywords the reader was given.

    Raises:
        TypeError: For an unknown keyword (naming the known ones), a keyword that moved
            into :class:`ReadConfig` (naming its new spelling), or a value of the wrong
            type.
        ValueError: For a value out of range, a malformed ``service`` address,
            ``in_memory`` other than ``False`` with ``service``, or a ``ReadConfig``
            knob the reader does not read.
    """
    _check_keywords(reader, options)
    given = _renamed_shuffle(options)
    config = given.pop("read_config", None)
    if config is None:
        config = ReadConfig()
    if not isinstance(config, ReadConfig):
        raise TypeError(expected("read_config", "a tfrecord.ReadConfig", config))
    shaping = check_shaping(
        given.pop("pad_to", None),
        config.padding_values,
        given.pop("bucket_boundaries", None),
        given.pop("bucket_by", None),
    )
    built = ReadOptions(batch_size, shaping=shaping, config=_for_reader(config, reader), **given)
    check_positive_int(batch_size, "batch_size")
    check_non_negative_int(built.max_corrupt_records, "max_corrupt_records")
    if built.num_epochs is not None:
        check_positive_int(built.num_epochs, "num_epochs")
    if not isinstance(built.drop_remainder, bool):
        raise TypeError(expected("drop_remainder", "True or False", built.drop_remainder))
    _check_weights(built)
    for name in ("map_fn", "batch_map_fn"):
        value = getattr(built, name)
        per_source = name == "map_fn" and built.weights is not None and isinstance(value, Mapping)
        if value is not None and not callable(value) and not per_source:
            raise TypeError(expected(name, "callable or None", value))
    in_memory = built.in_memory
    if not (in_memory is True or in_memory is False or in_memory == "auto"):
        raise ValueError(expected("in_memory", "False, True or 'auto'", in_memory))
    _check_shuffle(built)
    if built.service is not None:
        service = check_service_address(built.service)
        check_servable(in_memory, service)
        built = dataclasses.replace(built, service=service)
    return built


def _renamed_shuffle(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the deprecated ``shuffle_buffer`` turned into ``shuffle``.

    Raises:
        ValueError: ``shuffle_buffer`` is not an integer >= 0, or is nonzero with a
            ``shuffle`` other than ``None`` (the message names both).
    """
    given = dict(options)
    if "shuffle_buffer" not in given:
        return given
    buffer = check_non_negative_int(given.pop("shuffle_buffer"), "shuffle_buffer")
    shuffle = given.get("shuffle")
    if buffer and shuffle is not None:
        raise ValueError(
            "Expected one of shuffle and shuffle_buffer (shuffle_buffer=N is the "
            "deprecated spelling of shuffle=N): pass shuffle alone. Received: "
            f"shuffle={shuffle!r}, shuffle_buffer={buffer}"
        )
    _warn_deprecated(
        f"shuffle_buffer={buffer} is deprecated and will be removed in the next release; "
        f"write shuffle={buffer or None} (shuffle=N for a buffer of N examples, "
        "shuffle='global' for the global order, shuffle=None for the stored order)"
    )
    if buffer:
        given["shuffle"] = buffer
    return given


def _warn_deprecated(message: str) -> None:
    """Emit a ``DeprecationWarning`` attributed to the first caller outside tfr_hooks.

    Python shows a ``DeprecationWarning`` by default when it is attributed to
    ``__main__``: a level inside the package would hide it from a script's author.
    """
    frame = sys._getframe(0)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("tfr_hooks."):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


#: The named values of ``shuffle`` (beside a positive int, the buffer).
SHUFFLES = (None, "global")


def _check_shuffle(options: ReadOptions) -> None:
    """Refuse a ``shuffle`` other than ``None``/``N``/``"global"``.

    Which options an order cannot read with is said by the order
    (:meth:`~tfr_hooks.tfrecord.pipelines.orders.base.Order.refuse`, asked by
    :func:`~tfr_hooks.tfrecord.pipelines.orders.choice.order_for`).
    """
    shuffle = options.shuffle
    buffer = isinstance(shuffle, int) and not isinstance(shuffle, bool) and shuffle > 0
    if not buffer and shuffle not in SHUFFLES:
        raise ValueError(
            expected(
                "shuffle",
                "None (the stored order), a positive int (a buffer of that many "
                "examples) or 'global' (the global order)",
                shuffle,
            )
        )


def _check_weights(options: ReadOptions) -> None:
    """Refuse ``weights`` other than ``None`` or a mapping of names to numbers >= 0, one > 0.

    That its names are the sources' is checked where ``files`` enters
    (:func:`~tfr_hooks.tfrecord.pipelines.mixture_sources.mixture_plan`).
    """
    weights = options.weights
    if weights is None:
        return
    if not isinstance(weights, Mapping) or not weights:
        raise TypeError(
            expected("weights", "None or a mapping of source names to weights", weights)
        )
    for name, weight in weights.items():
        number = isinstance(weight, numbers.Real) and not isinstance(weight, bool)
        if not isinstance(name, str) or not number or not weight >= 0 or weight == float("inf"):
            raise ValueError(
                expected("weights", "finite numbers >= 0 by source name", dict(weights))
            )
    if not any(weights.values()):
        raise ValueError(expected("weights", "a weight above 0", dict(weights)))


def _check_keywords(reader: str, options: Mapping[str, Any]) -> None:
    """Refuse a keyword :class:`ReadArgs` does not declare, naming the right spelling."""
    moved = [name for name in options if name in MOVED]
    if moved:
        given = ", ".join(f"{name}={options[name]!r}" for name in moved)
        raise TypeError(
            f"{reader}() takes {', '.join(moved)} in its read_config: pass "
            f"read_config=ReadConfig({given}) (tfr_hooks.tfrecord.ReadConfig). "
            f"Received: {given}"
        )
    unknown = [name for name in options if name not in READ_ARGS]
    if unknown:
        name = unknown[0]
        raise TypeError(
            f"Expected the keywords of {reader}() to be among files, batch_size"
            f"{', pipeline' if reader == 'read_batches' else ''}, {', '.join(READ_ARGS)} "
            f"(the rarer knobs are fields of read_config=ReadConfig(...): "
            f"{', '.join(MOVED)}). Received: {name}={options[name]!r}"
        )


def _for_reader(config: ReadConfig, reader: str) -> ReadConfig:
    """``config`` with its ``prefetch`` resolved for ``reader``; refuse knobs it does not read."""
    default = ReadConfig()
    for name, readers in _ONLY_FOR.items():
        value = getattr(config, name)
        if reader not in readers and value != getattr(default, name):
            raise ValueError(
                expected(
                    f"read_config.{name}",
                    f"{getattr(default, name)!r} with {reader}() (only "
                    f"{' and '.join(r + '()' for r in readers)} read it)",
                    value,
                )
            )
    if config.prefetch is None:
        prefetch = 1 if reader == "read_batches" else tf.data.AUTOTUNE
        config = dataclasses.replace(config, prefetch=prefetch)
    return config


def check_servable(in_memory: object, service: str) -> None:
    """Refuse ``in_memory`` other than ``False`` with ``service``.

    The in-memory pipeline reaches its data through ``tf.numpy_function``, which runs
    Python of this process: a tf.data service worker, another process, cannot run it.

    Raises:
        ValueError: ``in_memory`` is ``True`` or ``"auto"``; the message names both.
    """
    if in_memory is not False:
        raise ValueError(
            "Expected in_memory=False with service= (the in-memory pipeline feeds its data "
            "through tf.numpy_function, which a tf.data service worker cannot run; the "
            "workers stream from the files). Received: "
            f"in_memory={in_memory!r}, service={service!r}"
        )


def queue_capacity(options: ReadOptions) -> int:
    """Check the options a queue pipeline can build; its capacity (``ReadConfig.capacity``).

    Raises:
        ValueError: If the options bucket, map examples or hold the data in memory, or
            ``capacity`` does not exceed the buffer of ``shuffle=N`` or reach ``batch_size``.
    """
    shaping = options.shaping
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
    if options.map_fn is not None:
        raise ValueError(
            expected(
                "map_fn",
                "None with pipeline='queue' (a queue parses whole batches; map "
                "examples with pipeline='dataset', or map batches with batch_map_fn)",
                options.map_fn,
            )
        )
    if options.in_memory is not False:
        raise ValueError(
            expected(
                "in_memory",
                "False with pipeline='queue' (a queue streams from the files; hold "
                "the data in memory with pipeline='dataset')",
                options.in_memory,
            )
        )
    shuffle_buffer, batch_size = options.shuffle_buffer, options.batch_size
    capacity = options.config.capacity
    cap = (
        shuffle_buffer + (queue_readers(options) + 2) * batch_size if capacity is None else capacity
    )
    check_positive_int(cap, "capacity")
    if cap <= shuffle_buffer or cap < batch_size:
        raise ValueError(
            "Expected `capacity` to exceed the buffer of `shuffle` and be at least "
            f"`batch_size`. Received: capacity={cap}, shuffle={options.shuffle!r}, "
            f"batch_size={batch_size}"
        )
    return cap


def queue_readers(options: ReadOptions) -> int:
    """The reader threads of a queue pipeline: ``num_parallel_reads``, 2 by default."""
    reads = options.config.num_parallel_reads
    return 2 if reads is None else reads
