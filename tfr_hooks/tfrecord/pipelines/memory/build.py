"""The in-memory kinds: what to hold, the held arrays, and their pipeline of batches.

:func:`memory_kind` decides what ``in_memory`` holds (the decoded data, the encoded
records, or nothing: ``"auto"`` measures them against ``memory_budget``);
:func:`memory_pipeline` loads the arrays and serves them
(:func:`~tfr_hooks.tfrecord.pipelines.memory.serve.memory_dataset`) in the order the
reader's :class:`~tfr_hooks.tfrecord.pipelines.orders.base.Order` holds: stored, or a
permutation drawn every pass.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.pipelines.decide import DataFacts, decide
from tfr_hooks.tfrecord.pipelines.memory.allocator import release_free_memory
from tfr_hooks.tfrecord.pipelines.memory.estimate import (
    count_examples,
    default_memory_budget,
    mapped_sample_nbytes,
    records_nbytes,
)
from tfr_hooks.tfrecord.pipelines.memory.loading import Held, load, load_mapped
from tfr_hooks.tfrecord.pipelines.memory.narrow import Widen, narrowing
from tfr_hooks.tfrecord.pipelines.memory.serve import BATCH_PREFETCH, PARALLEL_CALLS, memory_dataset
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
from tfr_hooks.tfrecord.pipelines.orders.base import Order
from tfr_hooks.tfrecord.pipelines.plan import Plan
from tfr_hooks.tfrecord.pipelines.position import ReadPosition
from tfr_hooks.tfrecord.pipelines.ragged import (
    RaggedArray,
    Shaping,
    bucket_key,
    bucket_of,
    pad_batch,
)
from tfr_hooks.tfrecord.pipelines.stages import as_dict, map_batches, structure

__all__ = ["memory_kind", "memory_pipeline"]

logger = logging.getLogger(__name__)


def memory_pipeline(
    plan: Plan,
    options: ReadOptions,
    kind: PipelineKind,
    order: Order,
    position: ReadPosition | None = None,
) -> tuple[tf.data.Dataset, int]:
    """The in-memory pipeline of batches (dicts), and the examples of one pass.

    Served in ``order``'s held order
    (:meth:`~tfr_hooks.tfrecord.pipelines.orders.base.Order.held_order`).
    """
    arrays, decode_each_batch, widen = _held(plan, options, kind)
    shaping, batch_map_fn = options.shaping, options.batch_map_fn
    # resolved for the reader (ReadOptions' config): AUTOTUNE for the reader's own choice,
    # 0 for none, or the batches asked for
    configured = options.config.prefetch
    prefetch = bool(configured)
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
        shuffle=order.held_order(),
        seed=options.seed,
        drop_remainder=options.drop_remainder,
        num_epochs=options.num_epochs,
        prefetch=configured if prefetch and last else None,
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
        data = map_batches(data, batch_map_fn)
    if not last and names is not None:
        data = data.map(lambda d: structure(d, names))
    if not last and prefetch:
        data = data.prefetch(BATCH_PREFETCH if configured == tf.data.AUTOTUNE else configured)
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
            plan.records,
            plan.schema,
            narrowed,
            per_record=plan.per_record,
            count=count,
            decoding=plan.decoding,
        )
        release_free_memory()
        return arrays, None, widen
    arrays = load(
        plan.records,
        plan.schema,
        per_record=plan.per_record,
        counts=plan.counts,
        decoding=plan.decoding,
    )
    release_free_memory()  # what the load's threads freed, resident in their arenas
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


def memory_kind(plan: Plan, options: ReadOptions, order: Order) -> PipelineKind | None:
    """What to hold in memory: the decoded data, the encoded records, or nothing (``None``).

    ``in_memory=True`` holds the decoded data (``map_fn``'s output when given).
    ``"auto"`` states the sizes and lets :func:`~tfr_hooks.tfrecord.pipelines.decide.decide` choose:
    the decoded data when it fits ``memory_budget`` (with a ``map_fn``, whose output size
    is unknown before it runs, estimated by decoding the first examples); else, with a
    ``map_fn``, the parsed records when they fit (``map_fn`` then runs on every batch);
    otherwise it streams. The choice and its sizes are logged at INFO level. An order
    that cannot be held (``order.held`` false) streams.
    """
    if not order.held:  # an order the in-memory pipeline cannot serve: streamed
        return None
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
    sample = mapped_sample_nbytes(
        plan.records, plan.schema, map_fn, per_record=plan.per_record, decoding=plan.decoding
    )
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
    return records_nbytes(
        plan.records, plan.schema, examples, file_bytes, plan.per_record, plan.decoding
    )


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
