"""How fast this machine can read a user's own TFRecord files, and which pipeline to use.

:func:`measure` reads the files through each pipeline the data allows, here and now:
streamed from the files (``tfrecord.dataset``); packed, estimated on a sample (the first
examples, enough for the timed batches, converted to packed shards of
:data:`PACKED_EXAMPLES_PER_RECORD` examples a record in a temporary directory, as
``tfr-hooks convert --examples-per-record`` writes them, then streamed); and held in
memory (``tfrecord.dataset(in_memory=True)``, when the decoded data fits the memory
budget; features of varying length held as values and row offsets). It times the
batches after the first (the warm-up), and compares the decoded size with the memory
budget (for SequenceExample files, whose feature lists vary in frames, estimated from
the first records). Its :class:`Measurement` ends with a recommendation: hold the data
in memory when it fits; else write packed shards when they read faster here (or, not
timed, when the records are small); else stream. ``tfr-hooks measure`` prints it (``--json`` for
scripts).

The rates are those of the input alone: what a loop could reach with a free model. Compare
them with a run's ``input/examples_per_sec`` (see :mod:`tfr_hooks.input_report`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tfr_hooks.checks import check_positive_int
from tfr_hooks.input_report import SMALL_RECORD_BYTES

__all__ = ["PACKED_EXAMPLES_PER_RECORD", "Measurement", "PipelineRate", "measure"]

logger = logging.getLogger(__name__)

#: Examples per record of the packed estimate (what the recommendation's command writes).
PACKED_EXAMPLES_PER_RECORD = 64
#: The packed estimate recommends packed shards when it reads this much faster than the
#: files streamed (a smaller gain is within the noise of a short timing).
PACKED_GAIN = 1.2
#: Records parsed to estimate the decoded size of feature lists (frames vary in number).
SEQUENCE_SAMPLE = 256
#: Timings of each pipeline; its rate is the best of them.
ROUNDS = 3


@dataclass
class PipelineRate:
    """One pipeline's rate on the files.

    Attributes:
        pipeline: ``"streamed"``, ``"packed"`` (the estimate, on a sample of the files
            converted to packed shards) or ``"in_memory"``.
        examples_per_sec: Examples per second after the first batch, or ``None`` when the
            pipeline was not measured.
        batches: The batches timed.
        setup_secs: Seconds to build the pipeline (loading and decoding, in memory;
            converting the sample, packed).
        note: Why it was not measured, or what to know about it.
    """

    pipeline: str
    examples_per_sec: float | None = None
    batches: int = 0
    setup_secs: float = 0.0
    note: str = ""


@dataclass
class Measurement:
    """What :func:`measure` found.

    Attributes:
        files: The files read.
        batch_size: The batch size used.
        num_examples: Examples in one pass over the files.
        examples_per_record: Examples stored per record (more than 1: packed shards).
        file_bytes: The files' total size.
        record_bytes: Mean stored bytes of a record.
        decoded_bytes: Bytes the decoded examples take in memory.
        memory_budget: Bytes they may take (half the memory available by default).
        rates: Each pipeline's rate.
        recommendation: What to use, in one sentence.
    """

    files: list[str]
    batch_size: int
    num_examples: int
    examples_per_record: int
    file_bytes: int
    record_bytes: float
    decoded_bytes: int
    memory_budget: int
    rates: list[PipelineRate] = field(default_factory=list)
    recommendation: str = ""

    @property
    def fits(self) -> bool:
        """Whether the decoded data fits the memory budget."""
        return self.decoded_bytes <= self.memory_budget

    def to_dict(self) -> dict[str, Any]:
        """The measurement as a JSON-ready dict."""
        return {**asdict(self), "fits": self.fits}


def measure(
    files: Any,
    batch_size: int,
    *,
    max_batches: int = 100,
    memory_budget: int | None = None,
) -> Measurement:
    """Time each pipeline the files allow, and recommend one.

    Args:
        files: Paths, directories or glob patterns of TFRecord files (any writer).
        batch_size: Examples per batch.
        max_batches: Batches to time per pipeline and round, after the first (the data
            is repeated when it holds fewer); each pipeline's rate is the best of
            :data:`ROUNDS` rounds.
        memory_budget: Bytes the decoded data may take; ``None`` for half the memory
            available now.

    Returns:
        The :class:`Measurement`.

    Raises:
        NoFilesError: If no file matches.
        ValueError: If ``batch_size`` or ``max_batches`` is not a positive integer.

    Examples:
        >>> result = measure("data/train", 128)  # doctest: +SKIP
        >>> result.recommendation  # doctest: +SKIP
        'Hold the data in memory: ...'
    """
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord import memory

    check_positive_int(batch_size, "batch_size")
    check_positive_int(max_batches, "max_batches")
    if memory_budget is not None:
        check_positive_int(memory_budget, "memory_budget")
    infos = tfrecord.inspect(files, max_records=100)
    per_record = max(
        (info.stored.examples_per_record for info in infos if info.stored is not None),
        default=1,
    )
    records = sum(info.num_records for info in infos)
    file_bytes = sum(info.size_bytes for info in infos)
    examples = sum(_examples_in(info) for info in infos)
    schema = tfrecord.infer_schema(files)
    budget = memory_budget if memory_budget is not None else memory.default_memory_budget()
    result = Measurement(
        files=[info.path for info in infos],
        batch_size=batch_size,
        num_examples=examples,
        examples_per_record=per_record,
        file_bytes=file_bytes,
        record_bytes=file_bytes / max(1, records),
        decoded_bytes=_decoded_bytes(infos, schema, examples, file_bytes, per_record),
        memory_budget=budget,
    )
    streamed = _time(
        "streamed", max_batches, lambda: tfrecord.dataset(files, batch_size, num_epochs=None)
    )
    result.rates.append(streamed)
    packed = _time_packed(infos, schema, batch_size, max_batches, per_record)
    result.rates.append(packed)
    if result.fits:
        in_memory = _time(
            "in_memory",
            max_batches,
            lambda: tfrecord.dataset(
                files, batch_size, num_epochs=None, in_memory=True, memory_budget=budget
            ),
        )
    else:
        in_memory = PipelineRate(
            "in_memory", note="not measured: the decoded data does not fit the memory budget"
        )
    result.rates.append(in_memory)
    result.recommendation = _recommend(result, streamed, packed, in_memory)
    return result


def _examples_in(info: Any) -> int:
    """The examples in one file: its records, or for a packed shard its listed count."""
    if info.stored is None:
        return int(info.num_records)
    listed = info.stored.examples_of(os.path.basename(info.path))
    if listed is not None:
        return int(listed)
    return int(info.num_records) * info.stored.examples_per_record  # its last block full


def _decoded_bytes(infos: Any, schema: Any, examples: int, file_bytes: int, per_record: int) -> int:
    """Bytes the decoded examples take in memory.

    Feature lists (SequenceExample files) hold a number of frames that varies between
    records, so their size is estimated from the examples of the first
    :data:`SEQUENCE_SAMPLE` records, parsed as the readers parse them; otherwise as the
    in-memory reader counts it.
    """
    from tfr_hooks.tfrecord import memory

    paths = [info.path for info in infos]
    compression = infos[0].compression if infos else ""
    if not infos or not schema.sequence_features:
        return memory.records_nbytes(paths, compression, schema, examples, file_bytes, per_record)
    import tensorflow as tf

    from tfr_hooks.tfrecord.packed import unpack

    records = tf.data.TFRecordDataset(paths[0], compression_type=compression)
    serialized = tf.stack(list(records.take(SEQUENCE_SAMPLE)))
    if per_record > 1:
        batch = unpack(schema, serialized, per_record)
    else:
        batch = schema.parse_batch(serialized)
    sampled = max(1, int(_rows(next(iter(batch.values())))))
    held = sum(_tensor_nbytes(value) for value in batch.values())
    return held * examples // sampled


def _tensor_nbytes(value: Any) -> int:
    """Bytes of a decoded tensor (ragged: its values and row splits; strings: their bytes)."""
    import tensorflow as tf

    if isinstance(value, tf.RaggedTensor):
        splits = sum(int(s.shape[0]) * s.dtype.size for s in value.nested_row_splits)
        return splits + _tensor_nbytes(value.flat_values)
    if value.dtype == tf.string:
        return int(tf.reduce_sum(tf.strings.length(value))) + 8 * int(tf.size(value))
    return int(tf.size(value)) * value.dtype.size


def _time_packed(
    infos: Any, schema: Any, batch_size: int, batches: int, per_record: int
) -> PipelineRate:
    """The packed estimate: a sample of the files written as packed shards, then timed.

    The sample is the first examples of the files, enough for ``batches + 1`` batches
    (all of them when the files hold fewer; the timing repeats them). Converting it is
    the pipeline's setup; the temporary shards are removed afterwards.
    """
    import tensorflow as tf

    from tfr_hooks import tfrecord

    if per_record > 1:
        return PipelineRate(
            "packed",
            note=f"the files are packed shards already ({per_record} examples a record): "
            "their rate is the streamed one",
        )
    wanted = batch_size * (batches + 1)
    with tempfile.TemporaryDirectory(prefix="tfr_hooks_measure_") as tmp:
        began = time.perf_counter()
        sample = os.path.join(tmp, "sample.tfrecord")
        taken = 0
        with tf.io.TFRecordWriter(sample) as writer:
            for info in infos:
                if taken >= wanted:
                    break
                records = tf.data.TFRecordDataset(info.path, compression_type=info.compression)
                for record in records.take(wanted - taken):
                    writer.write(record.numpy())
                    taken += 1
        try:
            tfrecord.convert(
                sample,
                os.path.join(tmp, "packed"),
                schema=schema,
                examples_per_record=PACKED_EXAMPLES_PER_RECORD,
            )
        except (ValueError, TypeError) as error:  # a feature packing cannot store
            return PipelineRate("packed", note=f"not measured: {error}")
        setup = time.perf_counter() - began
        rate = _time(
            "packed",
            batches,
            lambda: tfrecord.dataset(os.path.join(tmp, "packed"), batch_size, num_epochs=None),
        )
    rate.setup_secs += setup
    rate.note = (
        f"estimate: the first {taken} examples converted to packed shards "
        f"({PACKED_EXAMPLES_PER_RECORD} examples a record)"
    )
    return rate


def _rows(tensor: Any) -> Any:
    """The examples in a batch component (dense, ragged or sparse), as an int64 tensor."""
    import tensorflow as tf

    if isinstance(tensor, tf.RaggedTensor):
        return tensor.nrows(out_type=tf.int64)
    if isinstance(tensor, tf.SparseTensor):
        return tensor.dense_shape[0]
    return tf.shape(tensor, out_type=tf.int64)[0] if tensor.shape.rank else tf.constant(1, tf.int64)


def _time(pipeline: str, batches: int, build: Any) -> PipelineRate:
    """Build a dataset and time ``batches`` batches after its first, best of :data:`ROUNDS`.

    The batches are consumed inside a compiled function (as a loop's steps take them, no
    Python per batch); the best round is the rate the machine allows, least disturbed
    by other work on it.
    """
    import tensorflow as tf

    began = time.perf_counter()
    try:
        ds = build()
    except (ValueError, TypeError) as error:  # a pipeline the data does not allow
        return PipelineRate(pipeline, note=f"not measured: {error}")
    setup = time.perf_counter() - began
    iterator = iter(ds)

    def consume(count: Any) -> Any:
        def body(i: Any, seen: Any) -> Any:
            first = tf.nest.flatten(next(iterator))[0]  # the whole batch is made
            return i + 1, seen + _rows(first)

        zero = tf.constant(0, tf.int64)
        return tf.while_loop(lambda i, _: i < count, body, [zero, zero])[1]

    run = tf.function(consume, autograph=False)
    run(tf.constant(1, tf.int64))  # the warm-up: tracing, a shuffle buffer's fill
    best: float | None = None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        examples = int(run(tf.constant(batches, tf.int64)))
        secs = time.perf_counter() - start
        if secs > 0:
            best = max(best or 0.0, examples / secs)
    return PipelineRate(pipeline, best, batches, setup)


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"  # pragma: no cover


def _recommend(
    result: Measurement, streamed: PipelineRate, packed: PipelineRate, in_memory: PipelineRate
) -> str:
    if in_memory.examples_per_sec is not None:
        speedup = ""
        if streamed.examples_per_sec:
            speedup = f", {in_memory.examples_per_sec / streamed.examples_per_sec:.1f}x streamed"
        return (
            f"Hold the data in memory: the decoded data ({_size(result.decoded_bytes)}) fits "
            f"the memory budget ({_size(result.memory_budget)}); read it with "
            f"in_memory=True (or 'auto'){speedup}."
        )
    command = f"tfr-hooks convert FILES OUTDIR --examples-per-record {PACKED_EXAMPLES_PER_RECORD}"
    # fitting but not timed in memory (a pipeline these files do not allow): say so
    held = (
        "the data does not stay in memory"
        if not result.fits
        else "the in-memory pipeline could not be timed on these files"
    )
    gain = None
    if packed.examples_per_sec and streamed.examples_per_sec:
        gain = packed.examples_per_sec / streamed.examples_per_sec
    if result.examples_per_record == 1 and gain is not None and gain >= PACKED_GAIN:
        return (
            f"Write packed shards: {held}, and packed shards read "
            f"{gain:.1f}x faster than the files streamed (timed here on a sample) "
            f"({command})."
        )
    small = result.record_bytes < SMALL_RECORD_BYTES
    if result.examples_per_record == 1 and small and gain is None:  # packing not timed
        return (
            f"Write packed shards: the records are small ({result.record_bytes:.0f} bytes on "
            f"average) and {held}, so parsing many examples per "
            f"record pays ({command})."
        )
    if gain is not None:
        return (
            f"Stream from the files: {held}, and packed shards "
            f"read no faster here ({gain:.1f}x streamed, timed on a sample)."
        )
    return f"Stream from the files: {held}, and the records are large."
