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
the first records). With the user's decoding function (``map_fn=``, ``tfr-hooks measure
--map-fn MODULE:FUNCTION``) every pipeline applies it, so that the rates include the
decode, and the decoded size is its output's; without it, features stored as encoded
bytes (JPEG) are counted as parsed records, not decoded. With ``service=`` the streamed
pipeline is also timed through a running tf.data service. Its :class:`Measurement` ends
with a recommendation (:func:`recommend`): the pipeline with the highest measured rate
among those the data allows (in memory only when it fits), naming the rates compared;
when only streaming was timed, packed shards for small records. ``tfr-hooks measure``
prints it (``--json`` for scripts).

The rates are those of the input alone: what a loop could reach with a free model. Compare
them with a run's ``input/examples_per_sec`` (see :mod:`tfr_hooks.input_report`).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tfr_hooks.checks import check_positive_int, expected
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.decide import DataFacts, Decision, decide, size_text
from tfr_hooks.tfrecord.pipelines.options import PipelineKind
from tfr_hooks.tfrecord.sources.base import open_source

__all__ = [
    "PACKED_EXAMPLES_PER_RECORD",
    "ROW_NAMES",
    "SERVICE_ROW",
    "Measurement",
    "PipelineRate",
    "load_function",
    "measure",
    "recommend",
]

logger = logging.getLogger(__name__)

#: Examples per record of the packed estimate (what the recommendation's command writes).
PACKED_EXAMPLES_PER_RECORD = 64
#: Records parsed to estimate the decoded size of feature lists (frames vary in number).
SEQUENCE_SAMPLE = 256
#: Timings of each pipeline; its rate is the best of them.
ROUNDS = 3
#: Each timed kind's row name (``PipelineRate.pipeline``, in the table and the JSON).
ROW_NAMES = {
    PipelineKind.STREAMED: "streamed",
    PipelineKind.PACKED: "packed",
    PipelineKind.MEMORY_DECODED: "in_memory",
}
#: The row of the streamed pipeline timed through a tf.data service.
SERVICE_ROW = "service"
_KINDS = {name: kind for kind, name in ROW_NAMES.items()}


@dataclass
class PipelineRate:
    """One pipeline's rate on the files.

    Attributes:
        pipeline: ``"streamed"``, ``"packed"`` (the estimate, on a sample of the files
            converted to packed shards), ``"in_memory"`` or ``"service"`` (the streamed
            pipeline distributed through a running tf.data service).
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

    @property
    def kind(self) -> PipelineKind:
        """The :class:`~tfr_hooks.tfrecord.PipelineKind` timed (the service's: streamed)."""
        return _KINDS.get(self.pipeline, PipelineKind.STREAMED)


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
        decoded_bytes: Bytes the decoded examples take in memory: ``map_fn``'s output
            when one is given (estimated from the first examples), else the parsed records.
        memory_budget: Bytes they may take (half the memory available by default).
        rates: Each pipeline's rate.
        recommendation: What to use, in one sentence.
        decoded_as: What ``decoded_bytes`` counts: ``"map_fn output"``, ``"parsed
            records"`` (features still encoded bytes, e.g. JPEG) or ``"decoded"``.
        map_fn: The decoding function applied to every pipeline (its name), or ``""``.
        service: The tf.data service address timed, or ``""``.
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
    decoded_as: str = "decoded"
    map_fn: str = ""
    service: str = ""

    @property
    def fits(self) -> bool:
        """Whether the decoded data fits the memory budget."""
        return self.facts().fits

    def facts(self) -> DataFacts:
        """The sizes and measured rates.

        As :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` reads them.
        """
        rates = [r for r in self.rates if r.pipeline != SERVICE_ROW]
        service = [r.examples_per_sec for r in self.rates if r.pipeline == SERVICE_ROW]
        return DataFacts(
            decoded_nbytes=self.decoded_bytes,
            memory_budget=self.memory_budget,
            record_nbytes=self.record_bytes,
            examples_per_record=self.examples_per_record,
            rates={r.kind: r.examples_per_sec for r in rates},
            service_rate=service[0] if service else None,
        )

    def decision(self) -> Decision:
        """The pipeline to use.

        :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` on :meth:`facts`.
        """
        return decide(self.facts())

    def to_dict(self) -> dict[str, Any]:
        """The measurement as a JSON-ready dict.

        Besides the attributes: ``fits``, each rate's ``kind`` and the decision's
        ``recommended_kind`` (:class:`~tfr_hooks.tfrecord.PipelineKind` values) and
        ``recommended_service`` (whether to read through the tf.data service).
        """
        data = {**asdict(self), "fits": self.fits}
        for row, rate in zip(data["rates"], self.rates, strict=True):
            row["kind"] = rate.kind.value
        decision = self.decision()
        data["recommended_kind"] = decision.kind.value
        data["recommended_service"] = decision.service
        return data


def measure(
    files: Any,
    batch_size: int,
    *,
    max_batches: int = 100,
    memory_budget: int | None = None,
    map_fn: Callable[[dict[str, Any]], Any] | None = None,
    service: str | None = None,
    split: str | None = None,
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
        map_fn: The user's decoding function, applied to every pipeline as
            ``tfrecord.dataset(map_fn=...)`` applies it (streamed and packed: on each
            example; in memory: once, its output held), so that the rates include the
            decode; the decoded size is its output's, estimated from the first examples.
        service: A running tf.data service, ``"grpc://HOST:PORT"``: the streamed pipeline
            is also timed through it (``distributed_epoch``). Checked first.
        split: For a TensorFlow Datasets directory, the split to time (``None``:
            ``"train"``); its shards are inspected, and the pipelines read it decoded.

    Returns:
        The :class:`Measurement`.

    Raises:
        NoFilesError: If no file matches.
        ValueError: If ``batch_size`` or ``max_batches`` is not a positive integer, or
            ``service`` is not an address.
        TypeError: If ``map_fn`` is not callable.
        ConnectionError: If no dispatcher answers at ``service``.

    Examples:
        >>> result = measure("data/train", 128)  # doctest: +SKIP
        >>> result.recommendation  # doctest: +SKIP
        'Hold the data in memory: ...'
    """
    from tfr_hooks import tfrecord

    check_positive_int(batch_size, "batch_size")
    check_positive_int(max_batches, "max_batches")
    if memory_budget is not None:
        check_positive_int(memory_budget, "memory_budget")
    if map_fn is not None and not callable(map_fn):
        raise TypeError(expected("map_fn", "a callable or None", map_fn))
    if service is not None:
        from tfr_hooks.service.address import check_dispatcher

        service = check_dispatcher(service)  # a wrong address: an error before any timing
    shards = open_source(files, split).files  # e.g. the shards of a TFDS split
    result, infos, schema = _describe(shards, batch_size, memory_budget, map_fn)
    result.service = service or ""
    budget = result.memory_budget

    def streamed() -> Any:
        return tfrecord.dataset(files, batch_size, num_epochs=None, map_fn=map_fn, split=split)

    result.rates.append(_time(ROW_NAMES[PipelineKind.STREAMED], max_batches, streamed))
    per_record = result.examples_per_record
    result.rates.append(_time_packed(infos, schema, batch_size, max_batches, per_record, map_fn))
    if result.fits:
        in_memory = _time(
            ROW_NAMES[PipelineKind.MEMORY_DECODED],
            max_batches,
            lambda: tfrecord.dataset(
                files,
                batch_size,
                num_epochs=None,
                in_memory=True,
                read_config=tfrecord.ReadConfig(memory_budget=budget),
                map_fn=map_fn,
                split=split,
            ),
        )
    else:
        in_memory = PipelineRate(
            ROW_NAMES[PipelineKind.MEMORY_DECODED],
            note="not measured: the decoded data does not fit the memory budget",
        )
    result.rates.append(in_memory)
    if service:
        result.rates.append(_time_service(streamed, service, max_batches))
    result.recommendation = recommend(result)
    return result


def _describe(
    files: Any, batch_size: int, memory_budget: int | None, map_fn: Any
) -> tuple[Measurement, Any, Any]:
    """The files' counts and sizes, and the decoded size (``map_fn``'s output if given).

    Returns:
        The :class:`Measurement` without rates, the files' inspections, and their schema.
    """
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.pipelines.memory import estimate

    infos = tfrecord.inspect(files, max_records=100)
    per_record = max(
        (info.stored.examples_per_record for info in infos if info.stored is not None),
        default=1,
    )
    records = sum(info.num_records for info in infos)
    file_bytes = sum(info.size_bytes for info in infos)
    examples = sum(_examples_in(info) for info in infos)
    schema = tfrecord.infer_schema(files)
    budget = memory_budget if memory_budget is not None else estimate.default_memory_budget()
    decoded = _decoded_bytes(infos, schema, examples, file_bytes, per_record)
    encoded = any(feature.dtype in ("bytes", "string") for feature in schema)
    decoded_as = "parsed records" if encoded else "decoded"
    if map_fn is not None and infos:
        sample = estimate.mapped_sample_nbytes(
            RecordFiles(tuple(info.path for info in infos), infos[0].compression),
            schema,
            map_fn,
            per_record=per_record,
        )
        if sample is not None:
            decoded, decoded_as = sample[0] * examples // max(1, sample[1]), "map_fn output"
    result = Measurement(
        files=[info.path for info in infos],
        batch_size=batch_size,
        num_examples=examples,
        examples_per_record=per_record,
        file_bytes=file_bytes,
        record_bytes=file_bytes / max(1, records),
        decoded_bytes=decoded,
        memory_budget=budget,
        decoded_as=decoded_as,
        map_fn=_name_of(map_fn),
    )
    return result, infos, schema


def _name_of(function: Any) -> str:
    if function is None:
        return ""
    module = getattr(function, "__module__", "") or ""
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}:{name}" if module else name


def _time_service(build: Callable[[], Any], service: str, batches: int) -> PipelineRate:
    """The streamed pipeline built here, distributed through the service, and timed."""
    import tensorflow as tf

    def distributed() -> Any:
        return build().apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=service
            )
        )

    rate = _time(SERVICE_ROW, batches, distributed)
    if rate.examples_per_sec is not None:
        rate.note = f"the streamed pipeline through {service} (distributed_epoch)"
    return rate


def load_function(spec: str, name: str = "--map-fn") -> Callable[..., Any]:
    """Import ``"MODULE:FUNCTION"``, the module from the current directory or ``sys.path``.

    Args:
        spec: The module and the function's name in it, e.g. ``"decode:parse_image"``.
        name: The argument's name in the error messages.

    Returns:
        The function.

    Raises:
        ValueError: ``spec`` is not ``MODULE:FUNCTION``, or the module or function is missing.
        TypeError: What it names is not callable.
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(expected(name, 'of the form "MODULE:FUNCTION"', spec))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            expected(name, f"MODULE:FUNCTION with an importable module ({error})", spec)
        ) from error
    function: Any = module
    for part in attribute.split("."):
        if not hasattr(function, part):
            raise ValueError(
                expected(name, f"MODULE:FUNCTION with {attribute!r} in {module_name}", spec)
            )
        function = getattr(function, part)
    if not callable(function):
        raise TypeError(expected(name, "MODULE:FUNCTION naming a callable", spec))
    return function


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
    from tfr_hooks.tfrecord.pipelines.memory import estimate

    paths = [info.path for info in infos]
    compression = infos[0].compression if infos else ""
    if not infos or not schema.sequence_features:
        records = RecordFiles(tuple(paths), compression)
        return estimate.records_nbytes(records, schema, examples, file_bytes, per_record)
    import tensorflow as tf

    from tfr_hooks.tfrecord.formats.packed import unpack

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
    infos: Any, schema: Any, batch_size: int, batches: int, per_record: int, map_fn: Any = None
) -> PipelineRate:
    """The packed estimate: a sample of the files written as packed shards, then timed.

    The sample is the first examples of the files, enough for ``batches + 1`` batches
    (all of them when the files hold fewer; the timing repeats them). Converting it is
    the pipeline's setup; the temporary shards are removed afterwards.
    """
    import tensorflow as tf

    from tfr_hooks import tfrecord

    row = ROW_NAMES[PipelineKind.PACKED]
    if per_record > 1:
        return PipelineRate(
            row,
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
            return PipelineRate(row, note=f"not measured: {error}")
        setup = time.perf_counter() - began
        rate = _time(
            row,
            batches,
            lambda: tfrecord.dataset(
                os.path.join(tmp, "packed"), batch_size, num_epochs=None, map_fn=map_fn
            ),
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


#: How each pipeline is named in the recommendation's comparison.
_LABELS = {**ROW_NAMES, PipelineKind.MEMORY_DECODED: "in memory"}


def _compared(rates: list[PipelineRate]) -> str:
    """The measured rates, fastest first, as the recommendation names them."""
    measured = sorted(
        (r for r in rates if r.examples_per_sec), key=lambda r: -(r.examples_per_sec or 0.0)
    )
    shown = ", ".join(
        f"{SERVICE_ROW if r.pipeline == SERVICE_ROW else _LABELS[r.kind]} {r.examples_per_sec:,.0f}"
        for r in measured
    )
    return f"examples/s measured here: {shown}"


def recommend(result: Measurement) -> str:
    """The pipeline to use, in one sentence: :meth:`Measurement.decision` in words.

    The decision (:func:`~tfr_hooks.tfrecord.pipelines.decide.decide`, the same the readers'
    ``in_memory="auto"`` and the input report's remedy make) is the highest measured
    rate among the pipelines the data allows: in memory counts only when the decoded
    data fits the memory budget (it is not timed otherwise). The sentence names the
    rates it compared. When no pipeline but streaming was timed, small records still
    recommend packed shards (parsing many examples a record pays).

    Args:
        result: A :class:`Measurement` with its :attr:`~Measurement.rates`.

    Returns:
        One sentence.
    """
    decision = result.decision()
    facts = result.facts()
    rates = [r for r in result.rates if r.examples_per_sec and (facts.fits or not r.kind.in_memory)]
    if not rates:
        return (
            f"{_STARTS[decision.kind]}: no pipeline could be timed on these files; by the "
            f"sizes, {decision.reason}."
        )
    command = f"tfr-hooks convert FILES OUTDIR --examples-per-record {PACKED_EXAMPLES_PER_RECORD}"
    held = (
        "the data does not stay in memory"
        if not facts.fits
        else "the in-memory pipeline could not be timed on these files"
    )
    if any(r.kind is PipelineKind.MEMORY_DECODED for r in rates):
        held = "the data fits in memory but reads slower there"
    compared = _compared(rates)
    streamed = next((r for r in rates if r.pipeline == ROW_NAMES[PipelineKind.STREAMED]), None)
    best = max(rates, key=lambda r: r.examples_per_sec or 0.0)
    gain = ""
    if streamed is not None and best is not streamed:
        ratio = (best.examples_per_sec or 0.0) / (streamed.examples_per_sec or 1.0)
        gain = f", {ratio:.1f}x streamed"
    if decision.service:
        return (
            f"Read through the tf.data service: it reads fastest ({compared}{gain}); pass "
            f'service="{result.service}" to tfrecord.dataset (see docs/data_service.md).'
        )
    if decision.kind is PipelineKind.MEMORY_DECODED:
        return (
            f"Hold the data in memory: the decoded data ({size_text(result.decoded_bytes)}, "
            f"{result.decoded_as}) fits the memory budget ({size_text(result.memory_budget)}), "
            f"and it reads fastest ({compared}{gain}); read it with in_memory=True "
            "(or 'auto')."
        )
    if decision.kind is PipelineKind.PACKED and decision.measured:
        return (
            f"Write packed shards: they read fastest ({compared}{gain}; packed timed here "
            f"on a sample), and {held} ({command})."
        )
    if decision.kind is PipelineKind.PACKED:  # not timed: the small records decide
        return (
            f"Write packed shards: the records are small ({result.record_bytes:.0f} bytes on "
            f"average) and {held}, so parsing many examples per "
            f"record pays ({command})."
        )
    return f"Stream from the files: it reads fastest ({compared}), and {held}."


#: How each recommendation starts, by the kind chosen.
_STARTS = {
    PipelineKind.MEMORY_DECODED: "Hold the data in memory",
    PipelineKind.MEMORY_ENCODED: "Hold the parsed records in memory",
    PipelineKind.PACKED: "Write packed shards",
    PipelineKind.STREAMED: "Stream from the files",
    PipelineKind.QUEUE: "Stream from the files",
}
