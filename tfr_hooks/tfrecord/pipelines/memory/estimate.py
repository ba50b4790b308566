"""How much memory data takes: the budget, decoded and parsed bytes, example counts.

What ``in_memory="auto"`` weighs before it loads anything
(:mod:`tfr_hooks.tfrecord.pipelines.memory`):
half the memory available (:func:`default_memory_budget`), the bytes of the decoded
examples (exact for fixed-size numbers, sampled for features of varying length), of
``map_fn``'s output (sampled from the first examples) and the examples of files no
``schema.json`` counts.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.memory.loading import collect_held, mapped_examples, nbytes_of
from tfr_hooks.tfrecord.schema.decoding import Decoding
from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = [
    "default_memory_budget",
    "decoded_nbytes",
    "mean_lengths",
    "records_nbytes",
    "mapped_sample_nbytes",
    "count_examples",
    "LENGTH_SAMPLE",
]

logger = logging.getLogger(__name__)

_FALLBACK_BUDGET = 2 << 30


def default_memory_budget() -> int:
    """Half of the memory available now (``MemAvailable`` on Linux), else 2 GiB.

    Half, because training needs memory of its own (the model, the optimizer state and
    TensorFlow's buffers), and a pipeline that pushes the machine into swap is far
    slower than streaming from disk.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages) // 2
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_BUDGET


def decoded_nbytes(
    schema: Schema,
    examples: int,
    file_bytes: int = 0,
    lengths: Mapping[str, float] | None = None,
) -> int:
    """Bytes the decoded examples take in memory.

    Fixed-size numeric features count exactly; string features are counted as the
    files' size (their bytes are in the files) plus a pointer per value. A feature of
    varying length counts its mean values per example, and a feature list its mean
    frames, from ``lengths`` (see :func:`mean_lengths`); one value or frame without it.

    Args:
        schema: The features decoded.
        examples: How many examples.
        file_bytes: The files' size, for string features.
        lengths: Mean values (varying length) or frames (feature list) per example, by
            feature name.
    """
    lengths = lengths or {}
    total = 0.0
    strings = False
    for feature in schema:
        count = lengths.get(feature.name, 1.0) if feature.varying or feature.sequence else 1.0
        if feature.dtype in ("string", "bytes"):
            strings = True
            total += examples * count * (feature.size or 1) * 8
        elif feature.varying:
            total += examples * count * np.dtype(feature.dtype).itemsize
        else:
            total += examples * count * feature.raw_nbytes
    return int(total) + (file_bytes if strings else 0)


def mean_lengths(
    files: Sequence[str], compression: str | None, schema: Schema, sample: int = 256
) -> dict[str, float]:
    """Mean values (varying length) or frames (feature list) per example, sampled.

    Reads the first ``sample`` records of ``files`` as protos, in Python: it needs no
    TensorFlow graph or eager context, so it serves graph mode too. Packed shards and
    records that are no Example are not sampled.

    Args:
        files: The files.
        compression: Their compression, or ``None`` to detect it.
        schema: The features; only those of varying length and feature lists are counted.
        sample: Records read at most.

    Returns:
        The mean by feature name; empty if no record was read or nothing varies.
    """
    from tfr_hooks.tfrecord.formats.reading import files_format
    from tfr_hooks.tfrecord.schema.records import NEITHER, as_record_content

    counted = [f for f in schema if f.varying or f.sequence]
    totals = dict.fromkeys((f.name for f in counted), 0)
    read = 0
    reading = files_format(files)
    records = itertools.chain.from_iterable(
        reading.iter_records(p, reading.compression(p) if compression is None else compression)
        for p in files
    )
    for record in itertools.islice(records if counted else (), sample):
        content = as_record_content(record)
        if content.kind == NEITHER:
            continue
        read += 1
        for feature in counted:
            totals[feature.name] += _length(content, feature)
    return {name: total / read for name, total in totals.items()} if read else {}


def _length(content: Any, feature: Any) -> int:
    """Frames of a feature list, or values of a context feature, in one record."""
    if feature.sequence:
        lists = content.feature_lists
        return len(lists[feature.name].feature) if feature.name in lists else 0
    if feature.name not in content.context:
        return 0
    value = content.context[feature.name]
    kind = value.WhichOneof("kind")
    return 0 if kind is None else len(getattr(value, kind).value)


#: Examples read to estimate the memory of features of varying length.
LENGTH_SAMPLE = 256


def records_nbytes(
    records: RecordFiles,
    schema: Schema,
    examples: int,
    file_bytes: int = 0,
    per_record: int = 1,
    decoding: Decoding | None = None,
) -> int:
    """Bytes the parsed (decoded by the schema) examples take in memory.

    Exact for fixed-size numeric features (:func:`decoded_nbytes`); a feature of
    varying length or a feature list (its frames) is estimated from the first
    :data:`LENGTH_SAMPLE` examples.
    """
    if not any(f.varying or f.sequence for f in schema):  # frames: sampled too
        return decoded_nbytes(schema, examples, file_bytes)
    sample = mapped_sample_nbytes(
        records,
        schema,
        lambda example: example,
        per_record=per_record,
        sample=LENGTH_SAMPLE,
        decoding=decoding,
    )
    if sample is None:
        return decoded_nbytes(schema, examples, file_bytes)
    return sample[0] * examples // max(1, sample[1])


def count_examples(files: Sequence[str], compression: str, per_record: int) -> int:
    """Count the examples of files that have no ``schema.json`` listing them."""
    from tfr_hooks.tfrecord.formats.reading import files_format

    if per_record != 1:
        raise ValueError("Packed shards are counted from their schema.json")
    reading = files_format(files)
    return sum(reading.count(path, compression) for path in files)


def mapped_sample_nbytes(
    records: RecordFiles,
    schema: Schema,
    map_fn: Callable[[dict[str, Any]], Any],
    *,
    per_record: int = 1,
    sample: int = 16,
    decoding: Decoding | None = None,
) -> tuple[int, int] | None:
    """Bytes of ``map_fn``'s output for the first ``sample`` examples, and their number.

    ``None`` when the outputs cannot be held in memory (not dense, or of varying shape).
    """
    try:
        arrays = collect_held(
            lambda: mapped_examples(
                records, schema, map_fn, per_record, take=sample, decoding=decoding
            ),
            None,
            batch=sample,
        )
    except (ValueError, TypeError) as error:
        logger.debug("map_fn's output cannot be held in memory: %s", error)
        return None
    size = sum(nbytes_of(a) for a in arrays.values())
    return size, len(next(iter(arrays.values())))
