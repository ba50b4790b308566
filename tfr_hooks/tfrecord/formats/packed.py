"""Packed shards: ``N`` examples per ``tf.train.Example`` record, for data larger than memory.

Parsing costs about as much per record as per value, so storing examples in blocks cuts
the parse cost per example by the block size. ``tfrecord.write(...,
examples_per_record=N)`` (``tfr-hooks convert --examples-per-record N``) writes them and
records ``examples_per_record`` and each shard's example count in ``schema.json``;
:func:`~tfr_hooks.tfrecord.dataset` and :func:`~tfr_hooks.tfrecord.read_batches` unpack
them without being told.

Layout of a packed record (still a valid ``tf.train.Example``, readable by any tool):
it has the features of the schema, and each feature holds the values of ``k``
consecutive examples, ``k = N`` except in the last record of a shard, where ``k`` may
be smaller:

* ``"raw"`` features: one ``bytes`` value, the ``k`` examples' raw little-endian bytes
  concatenated (``k * raw_nbytes`` bytes);
* ``"int64"``, ``"float"`` and ``"bytes"`` features: a list of ``k * size`` values, the
  examples' values one after the other (row-major).

* a feature of varying length: a list of all ``k`` examples' values one after the other,
  and beside it an ``int64`` feature named ``<name>/row_lengths`` (:data:`LENGTHS`)
  with each example's number of values (``k`` of them).

* a feature list (a SequenceExample's ``feature_lists``, ``sequence=True``): the
  frames of all ``k`` examples one after the other, stored as one frame is (a ``"raw"``
  frame: one ``bytes`` value of all the frames' bytes, ``frames * raw_nbytes``; a list
  encoding: a list of ``frames * size`` values), and beside it an ``int64`` feature
  named ``<name>/frame_counts`` (:data:`FRAMES`) with each example's number of frames
  (``k`` of them, 0 for an empty or absent feature list). Unpacked, it is a
  ``tf.RaggedTensor`` ``[batch, (frames), *shape]``, as the streamed reader returns it.

``k`` is the same for every feature of a record. A packed record of SequenceExamples is
a ``tf.train.Example`` too: its context features and feature lists are all features.

Reading shuffles at three levels, as block formats do (FFCV's quasi-random order,
WebDataset shards): the order of the files, the order of the blocks (a buffer of whole
blocks), and within a window of whole blocks whose size in examples is the shuffle
buffer, with one vectorized permutation per window. Batches are then cut from the
windows without a per-example ``tf.data`` element.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.errors import MissingFeatureError, SchemaMismatchError
from tfr_hooks.tfrecord.schema.decode import raw_values
from tfr_hooks.tfrecord.schema.schema import Feature, Schema

__all__ = [
    "check_packable",
    "serialize_blocks",
    "to_bytes",
    "unpack",
    "check_block",
    "WINDOW_EXAMPLES",
    "LENGTHS",
    "lengths_name",
    "FRAMES",
    "frames_name",
]

#: Suffix of the feature that holds, in a packed record, each example's number of values
#: of a feature of varying length.
LENGTHS = "/row_lengths"


def lengths_name(name: str) -> str:
    """The packed record's feature of the row lengths of varying feature ``name``."""
    return name + LENGTHS


#: Suffix of the feature that holds, in a packed record, each example's number of frames
#: of a feature list.
FRAMES = "/frame_counts"


def frames_name(name: str) -> str:
    """The packed record's feature of the frame counts of feature list ``name``."""
    return name + FRAMES


def _counts_name(feature: Feature) -> str | None:
    """The companion feature of per-example counts of ``feature``, if it has one."""
    if feature.sequence:
        return frames_name(feature.name)
    return lengths_name(feature.name) if feature.varying else None


#: Examples parsed together when not shuffling (the window then only sets the parse size).
WINDOW_EXAMPLES = 4096
_STORED = {"raw": tf.string, "bytes": tf.string, "int64": tf.int64, "float": tf.float32}


def check_packable(schema: Schema, examples_per_record: int) -> None:
    """Raise if ``schema`` cannot be stored ``examples_per_record`` examples a record.

    Raises:
        ValueError: For a feature of no values, a feature list whose frames vary in
            length or hold no values, or a feature whose companion (row lengths, frame
            counts) has a name that is taken.
    """
    if examples_per_record == 1:
        return
    for feature in schema:
        if feature.sequence and not feature.size:
            raise ValueError(
                f"Expected every feature list to have frames of one non-empty shape to "
                f"pack {examples_per_record} examples per record. Received: feature list "
                f"{feature.name!r} of shape {feature.shape} per frame; drop it, or write "
                "with examples_per_record=1"
            )
        companion = _counts_name(feature)
        if companion is not None:
            if companion in schema:
                what = (
                    "frame counts of the feature list"
                    if feature.sequence
                    else ("row lengths of the varying feature")
                )
                raise ValueError(
                    f"Expected no feature named {companion!r} to pack "
                    f"{examples_per_record} examples per record: it holds the {what} "
                    f"{feature.name!r}. Received: a feature of that name; rename it, or "
                    "write with examples_per_record=1"
                )
        elif not feature.size:
            raise ValueError(
                f"Expected every feature to have a non-empty shape to pack "
                f"{examples_per_record} examples per record. Received: feature "
                f"{feature.name!r} of shape {feature.shape}"
            )


def to_bytes(value: object, name: str) -> bytes:
    """One item of a string array as bytes (``str`` encoded as UTF-8)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(
        f"Expected the items of string array {name!r} to be str or bytes. "
        f"Received: item={value!r} of type {type(value).__name__}"
    )


def serialize_blocks(
    schema: Schema, arrays: Mapping[str, np.ndarray], start: int, stop: int, per_record: int
) -> list[bytes]:
    """Serialize examples ``start:stop`` as records of ``per_record`` examples each.

    The last record holds the ``(stop - start) % per_record`` examples left, if any. A
    feature list's examples are arrays ``[frames, *shape]`` (an object array of them).
    """
    from tensorflow.core.example import example_pb2

    records = []
    for first in range(start, stop, per_record):
        last = min(stop, first + per_record)
        example = example_pb2.Example()
        for feature in schema:
            _fill_block(feature, arrays[feature.name][first:last], example.features.feature)
        records.append(example.SerializeToString())
    return records


def _fill_block(feature: Feature, block: np.ndarray, features: Any) -> None:
    """Store one feature's examples ``block`` in a packed record's ``features`` map."""
    target = getattr(features[feature.name], feature.kind).value
    if feature.sequence:  # the frames one after the other, and each example's count
        rows = [np.asarray(row).reshape(-1, *feature.shape) for row in block]
        features[frames_name(feature.name)].int64_list.value.extend(len(row) for row in rows)
        _fill_values(feature, np.concatenate(rows), target)  # a block holds an example
    elif feature.varying:  # the values one after the other, and each row's length
        rows = [np.asarray(row).ravel() for row in block]
        features[lengths_name(feature.name)].int64_list.value.extend(len(row) for row in rows)
        if feature.encoding == "bytes":
            target.extend(to_bytes(v, feature.name) for row in rows for v in row.tolist())
        else:
            cast = np.int64 if feature.encoding == "int64" else np.float32
            for row in rows:
                target.extend(row.astype(cast).tolist())
    else:
        _fill_values(feature, block, target)


def _fill_values(feature: Feature, block: np.ndarray, target: Any) -> None:
    """Append the values of ``block`` (of fixed-shape items) to a proto value list."""
    if feature.encoding == "raw":
        dtype = "uint8" if feature.dtype == "bool" else feature.dtype
        little = np.dtype(dtype).newbyteorder("<")
        target.append(np.ascontiguousarray(block, dtype=little).tobytes())
    elif feature.encoding == "int64":
        target.extend(block.astype(np.int64).ravel().tolist())
    elif feature.encoding == "float":
        target.extend(block.astype(np.float32).ravel().tolist())
    else:
        target.extend(to_bytes(v, feature.name) for v in block.ravel().tolist())


def _whole_examples(feature: Feature, lengths: Any, unit: int, per_record: int) -> Any:
    """The examples in each block, after checking the block holds whole examples."""
    message = (
        f"Packed tf.train.Example: feature {feature.name!r} does not hold whole examples "
        f"(at most {per_record} of {unit} value(s) or bytes each)"
    )
    checks = [
        tf.debugging.assert_equal(lengths % unit, tf.zeros_like(lengths), message=message),
        tf.debugging.assert_less_equal(
            lengths, tf.constant(unit * per_record, tf.int64), message=message
        ),
    ]
    with tf.control_dependencies(checks):
        return lengths // unit


def _decode_raw(feature: Feature, blocks: Any, per_record: int) -> tuple[Any, Any]:
    """A batch of raw blocks as ``[records * per_record, *shape]`` (short blocks padded)."""
    nbytes = feature.raw_nbytes
    lengths = tf.cast(tf.strings.length(blocks), tf.int64)
    counts = _whole_examples(feature, lengths, nbytes, per_record)
    flat = raw_values(blocks, feature.dtype, fixed_length=nbytes * per_record)
    return tf.reshape(flat, [-1, *feature.shape]), counts


def _decode_list(feature: Feature, ragged: Any, per_record: int) -> tuple[Any, Any]:
    """A batch of value-list blocks as ``[records * per_record, *shape]`` (padded)."""
    size = feature.size or 1
    counts = _whole_examples(feature, ragged.row_lengths(), size, per_record)
    rows = tf.cast(ragged.nrows(), tf.int64)
    dense = ragged.to_tensor(shape=tf.stack([rows, tf.constant(size * per_record, tf.int64)]))
    value = tf.reshape(dense, [-1, *feature.shape])
    if value.dtype != feature.tf_dtype:
        value = tf.cast(value, feature.tf_dtype)
    return value, counts


def _decode_varying(feature: Feature, parsed: Any, per_record: int) -> tuple[Any, Any]:
    """A batch of blocks of a varying feature as ragged rows, one per real example."""
    values = parsed[feature.name]
    lengths = parsed[lengths_name(feature.name)]
    counts = lengths.row_lengths()
    message = (
        f"Packed tf.train.Example: feature {feature.name!r} does not hold the values its "
        f"{lengths_name(feature.name)!r} counts (at most {per_record} examples a record)"
    )
    checks = [
        tf.debugging.assert_equal(
            tf.reduce_sum(lengths, axis=1), values.row_lengths(), message=message
        ),
        tf.debugging.assert_less_equal(counts, tf.constant(per_record, tf.int64), message=message),
        tf.debugging.assert_non_negative(lengths.flat_values, message=message),
    ]
    with tf.control_dependencies(checks):
        ragged = tf.RaggedTensor.from_row_lengths(values.flat_values, lengths.flat_values)
    if ragged.dtype != feature.tf_dtype:
        ragged = tf.ragged.map_flat_values(tf.cast, ragged, feature.tf_dtype)
    return ragged, counts


def _decode_frames(feature: Feature, parsed: Any, per_record: int) -> tuple[Any, Any]:
    """A batch of blocks of a feature list as ``[examples, (frames), *shape]`` ragged."""
    stored = parsed[feature.name]  # [records, (values)]: a raw block is one bytes value
    counts = parsed[frames_name(feature.name)]  # [records, (examples)]
    frames = tf.reduce_sum(counts, axis=1)
    if feature.encoding == "raw":
        held = tf.cast(tf.reduce_sum(tf.strings.length(stored), axis=1), tf.int64)
        unit = feature.raw_nbytes
    else:
        held = stored.row_lengths()
        unit = feature.size or 1
    message = (
        f"Packed tf.train.Example: feature list {feature.name!r} does not hold the frames "
        f"its {frames_name(feature.name)!r} counts ({unit} value(s) or bytes a frame, at "
        f"most {per_record} examples a record)"
    )
    checks = [
        tf.debugging.assert_equal(held, frames * unit, message=message),
        tf.debugging.assert_less_equal(
            counts.row_lengths(), tf.constant(per_record, tf.int64), message=message
        ),
        tf.debugging.assert_non_negative(counts.flat_values, message=message),
    ]
    if feature.encoding == "raw":  # one bytes value (or none, for no frames)
        checks.append(
            tf.debugging.assert_less_equal(
                stored.row_lengths(), tf.constant(1, tf.int64), message=message
            )
        )
    with tf.control_dependencies(checks):
        if feature.encoding == "raw":
            value = _raw_frames(feature, tf.strings.reduce_join(stored.flat_values))
        else:
            value = tf.reshape(stored.flat_values, [-1, *feature.shape])
            if value.dtype != feature.tf_dtype:
                value = tf.cast(value, feature.tf_dtype)
        ragged = tf.RaggedTensor.from_row_lengths(value, counts.flat_values, validate=False)
    return ragged, counts.row_lengths()


def _raw_frames(feature: Feature, joined: Any) -> Any:
    """The frames of one string of their raw bytes, as ``[frames, *shape]``."""
    return tf.reshape(raw_values(joined, feature.dtype), [-1, *feature.shape])


def unpack(
    schema: Schema, serialized: Any, per_record: int, *, order_seed: Any = None
) -> dict[str, Any]:
    """Parse a 1-D batch of packed records into tensors of all their examples.

    Each feature is decoded once into a ``[records * per_record, ...]`` tensor (short
    blocks padded), then one ``tf.gather`` per feature keeps the real examples, in a
    random order when ``order_seed`` is given: the window's one vectorized permutation.

    Args:
        schema: The features (each example's dtype and shape).
        serialized: A string tensor of shape ``[records]``.
        per_record: Examples per record (``examples_per_record``).
        order_seed: ``None`` to keep the stored order, else an ``int64`` seed tensor
            for the permutation of the window's examples.

    Returns:
        A dict of tensors of shape ``[examples, *feature.shape]``.
    """
    spec = {
        f.name: tf.io.FixedLenFeature([], tf.string)
        if f.encoding == "raw" and not f.sequence
        else tf.io.RaggedFeature(dtype=_STORED[f.encoding], row_splits_dtype=tf.int64)
        for f in schema
    }
    for f in schema:
        companion = _counts_name(f)
        if companion is not None:
            spec[companion] = tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)
    parsed = tf.io.parse_example(serialized, spec)
    values: dict[str, Any] = {}
    rows: dict[str, Any] = {}  # varying features: one ragged row per real example
    counts = []
    for feature in schema:
        if feature.sequence:
            rows[feature.name], count = _decode_frames(feature, parsed, per_record)
        elif feature.varying:
            rows[feature.name], count = _decode_varying(feature, parsed, per_record)
        else:
            decode = _decode_raw if feature.encoding == "raw" else _decode_list
            values[feature.name], count = decode(feature, parsed[feature.name], per_record)
        counts.append(count)
    checks = [
        tf.debugging.assert_equal(
            count,
            counts[0],
            message="Packed tf.train.Example: features hold different numbers of examples "
            f"({schema.names[0]!r} and {feature.name!r})",
        )
        for feature, count in zip(schema.features[1:], counts[1:], strict=True)
    ]
    with tf.control_dependencies(checks):
        valid = tf.reshape(tf.sequence_mask(counts[0], per_record), [-1])
        index = tf.reshape(tf.where(valid), [-1])
    if order_seed is not None:
        index = tf.random.experimental.stateless_shuffle(
            index, seed=tf.stack([order_seed, tf.constant(12, tf.int64)])
        )
    out = {name: tf.gather(value, index) for name, value in values.items()}
    if rows:  # the real examples are numbered without the padding of short blocks
        real = tf.gather(tf.cumsum(tf.cast(valid, tf.int64)) - 1, index)
        out.update({name: tf.gather(value, real) for name, value in rows.items()})
    return {f.name: out[f.name] for f in schema}


def check_block(
    schema: Schema,
    example: Any,
    per_record: int,
    *,
    file: str | None = None,
    record: int | None = None,
) -> int:
    """Check one packed record against the schema; return the examples it holds.

    Raises:
        MissingFeatureError: If a feature is absent.
        SchemaMismatchError: If a feature's values are not whole examples, there are more
            than ``per_record`` of them, or the features disagree on the count.
    """
    where = f"record {record} of file {file!r}" if file is not None else f"record {record}"
    present = example.features.feature
    count: int | None = None
    for feature in schema:
        if feature.name not in present:
            raise MissingFeatureError(
                f"Feature {feature.name!r} is missing from packed {where}: expected a "
                f"block of up to {per_record} examples; found only the features "
                f"{sorted(present.keys())}.",
                file=file,
                record=record,
                feature=feature.name,
            )
        proto = present[feature.name]
        kind = proto.WhichOneof("kind")
        values = getattr(proto, kind).value if kind else []
        if feature.varying or feature.sequence:
            blocks = _check_counted_block(
                feature, present, kind, list(values), per_record, where, file, record
            )
            if count is not None and blocks != count:
                raise SchemaMismatchError(
                    f"Feature {feature.name!r} in packed {where} does not match the schema: "
                    f"expected {count} examples (as for {schema.names[0]!r}); its "
                    f"{_counts_name(feature)!r} counts {blocks}.",
                    file=file,
                    record=record,
                    feature=feature.name,
                )
            count = blocks
            continue
        if feature.encoding == "raw":
            unit = feature.raw_nbytes
            total = len(values[0]) if kind == feature.kind and len(values) == 1 else -1
            what = f"one bytes value of k * {unit} bytes"
        else:
            unit = feature.size or 1
            total = len(values) if kind in (feature.kind, None) else -1
            what = f"a {feature.kind} of k * {unit} values"
        found = (
            f"{len(values)} value(s) in a {kind}"
            if total < 0
            else f"{total} {'bytes' if feature.encoding == 'raw' else 'values'}"
        )
        blocks = total // unit if total >= 0 and total % unit == 0 else -1
        if blocks < 1 or blocks > per_record or (count is not None and blocks != count):
            expected = f"{what}, 1 <= k <= {per_record}"
            if count is not None:
                expected += f" (k = {count}, as for {schema.names[0]!r})"
            raise SchemaMismatchError(
                f"Feature {feature.name!r} in packed {where} does not match the schema: "
                f"expected {expected} ({feature.describe()} per example); found {found}.",
                file=file,
                record=record,
                feature=feature.name,
            )
        count = blocks
    return count or 0


def _check_counted_block(
    feature: Feature,
    present: Any,
    kind: str | None,
    values: list[Any],
    per_record: int,
    where: str,
    file: str | None,
    record: int | None,
) -> int:
    """The examples of one packed block of a varying feature or a feature list, checked.

    Its companion feature counts each example's values (row lengths) or frames (frame
    counts); the block's values must add up to them.
    """
    name = str(_counts_name(feature))
    counts = present[name].int64_list.value if name in present else None
    if not feature.sequence:
        unit, total = 1, len(values)
        layout = "values one after the other beside their row lengths"
    elif feature.encoding == "raw":
        unit = feature.raw_nbytes
        total = len(values[0]) if len(values) == 1 else (0 if not values else -1)
        layout = f"frames' bytes in one bytes value ({unit} a frame) beside their frame counts"
    else:
        unit, total = feature.size or 1, len(values)
        layout = f"frames one after the other ({unit} value(s) a frame), and frame counts"
    what, label = ("frames", "frame counts") if feature.sequence else ("values", "row lengths")
    unit_name = "bytes" if feature.sequence and feature.encoding == "raw" else "values"
    problem = None
    if kind not in (feature.kind, None):
        problem = f"a {kind} instead of a {feature.kind}"
    elif counts is None:
        problem = f"no {name!r} feature with each example's number of {what}"
    elif not 1 <= len(counts) <= per_record or any(n < 0 for n in counts):
        problem = f"{len(counts)} {label} in {name!r}, expected 1 to {per_record}"
    elif total < 0:
        problem = f"{len(values)} bytes values, expected one"
    elif sum(counts) * unit != total:
        problem = f"{total} {unit_name} where {name!r} counts {sum(counts)} {what}"
    if problem is not None:
        raise SchemaMismatchError(
            f"Feature {feature.name!r} in packed {where} does not match the schema: "
            f"expected {feature.describe()} per example, the block's {layout}; found "
            f"{problem}.",
            file=file,
            record=record,
            feature=feature.name,
        )
    return len(counts or [])
