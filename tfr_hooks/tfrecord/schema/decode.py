"""Parsing and decoding batches of serialized records with a :class:`~.schema.Schema`.

What :meth:`Schema.parse_batch <tfr_hooks.tfrecord.schema.schema.Schema.parse_batch>`,
:meth:`Feature.parse_spec <tfr_hooks.tfrecord.schema.schema.Feature.parse_spec>` and
:meth:`Feature.decode <tfr_hooks.tfrecord.schema.schema.Feature.decode>` do: the ``tf.io`` spec
of each feature, the decode of raw bytes, the default filled in for an optional feature,
and the frames of a feature list (``tf.io.parse_sequence_example``).

The one home of decoding values: raw little-endian bytes (:func:`raw_values`, also for
the blocks of packed shards), encoded images and ZLIB-compressed tensors
(:func:`decode_images`, :func:`inflate`: a TensorFlow Datasets directory's features).

A ``feature`` here is a :class:`~.schema.Feature`, a ``schema`` a :class:`~.schema.Schema`
(typed ``Any``: ``schema`` imports this module, which imports nothing of it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "RAW_DECODE",
    "decode_images",
    "inflate",
    "raw_values",
    "decode_feature",
    "decode_frames",
    "feature_parse_spec",
    "fill_default",
    "parse_batch",
]

#: dtype -> (the dtype ``tf.io.decode_raw`` produces, the dtype to bitcast to afterwards);
#: float16 through uint16: ``decode_raw`` with ``fixed_length`` has no half
RAW_DECODE = {"bool": ("uint8", None), "uint32": ("int32", "uint32")}
RAW_DECODE["uint64"] = ("int64", "uint64")
RAW_DECODE["float16"] = ("uint16", "float16")


def raw_values(data: Any, dtype: str, *, fixed_length: int | None = None) -> Any:
    """The values of ``dtype`` in raw little-endian bytes, flat after the input's shape.

    Args:
        data: A string tensor of raw bytes.
        dtype: The values' dtype name (``bool`` is stored as one byte a value).
        fixed_length: Bytes of each string, padded with zeros when shorter (packed
            blocks); ``None``: every string holds whole values.

    Returns:
        A tensor of shape ``data.shape + [values]``.
    """
    decoded, bitcast_to = RAW_DECODE.get(dtype, (dtype, None))
    extra = {} if fixed_length is None else {"fixed_length": fixed_length}
    value = tf.io.decode_raw(data, tf.as_dtype(decoded), little_endian=True, **extra)
    if bitcast_to is not None:
        value = tf.bitcast(value, tf.as_dtype(bitcast_to))
    if dtype == "bool":
        value = tf.not_equal(value, 0)
    return value


def decode_images(
    encoded: Any, shape: tuple[int | None, ...], dtype: str, image_format: str
) -> Any:
    """``[n, *shape]`` images of ``dtype`` from ``n`` encoded images.

    A declared JPEG or PNG is decoded by its own op (faster than ``decode_image``, which
    tells the format from the bytes, as an image of no declared format needs).

    Args:
        encoded: A string tensor ``[n]`` of encoded images.
        shape: Each image's ``(height, width, channels)``.
        dtype: ``uint8`` or ``uint16`` (PNG only).
        image_format: ``"png"``, ``"jpeg"``, or ``""`` when not declared.
    """
    tf_dtype, channels = tf.as_dtype(dtype), int(shape[-1] or 0)  # 0: as stored

    def decode(data: Any) -> Any:
        if tf_dtype == tf.uint16 or image_format == "png":
            image = tf.io.decode_png(data, channels=channels, dtype=tf_dtype)
        elif image_format == "jpeg":
            image = tf.io.decode_jpeg(data, channels=channels)
        else:
            image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        return tf.ensure_shape(image, shape)

    images = tf.map_fn(decode, encoded, fn_output_signature=tf.TensorSpec(shape, tf_dtype))
    images.set_shape(encoded.shape.concatenate(shape))
    return images


def inflate(compressed: Any) -> Any:
    """Each ZLIB-compressed string of a 1-D string tensor, decompressed."""
    return tf.map_fn(
        lambda v: tf.io.decode_compressed(v, "ZLIB"),
        compressed,
        fn_output_signature=tf.TensorSpec([], tf.string),
    )


def feature_parse_spec(feature: Any) -> Any:
    """The ``tf.io`` spec of ``feature``: ``Feature.parse_spec``."""
    stored = {"raw": tf.string, "bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    stored_dtype = stored[feature.encoding]
    # an optional one is filled in by decode
    if feature.varying or feature.optional or feature.sequence:
        return tf.io.RaggedFeature(dtype=stored_dtype, row_splits_dtype=tf.int64)
    if feature.encoding == "raw":
        return tf.io.FixedLenFeature([], tf.string)
    return tf.io.FixedLenFeature(list(feature.shape), stored_dtype)


def decode_feature(feature: Any, parsed: Any) -> Any:
    """``feature`` decoded from ``parsed``: ``Feature.decode``."""
    if feature.sequence:
        return decode_frames(feature, parsed)
    if feature.optional and isinstance(parsed, tf.RaggedTensor):
        parsed = fill_default(feature, parsed)
    if feature.encoding == "raw":
        flat = raw_values(parsed, feature.dtype)
        # Take the batch size from the records, so that a wrong byte count fails the
        # reshape instead of silently changing the number of examples.
        batch = tf.shape(parsed, out_type=tf.int64)[:1]
        value = tf.reshape(flat, tf.concat([batch, tf.constant(feature.shape, tf.int64)], 0))
        value.set_shape(parsed.shape.concatenate(feature.shape))
        return value
    if parsed.dtype != feature.tf_dtype:
        if isinstance(parsed, tf.RaggedTensor):
            return tf.ragged.map_flat_values(tf.cast, parsed, feature.tf_dtype)
        return tf.cast(parsed, feature.tf_dtype)
    return parsed


def decode_frames(feature: Any, parsed: Any) -> Any:
    """``[batch, (frames), *shape]`` from a feature list parsed as ragged values."""
    frames = parsed.values  # [total frames, (values)]
    if feature.varying:
        values = frames if frames.dtype == feature.tf_dtype else tf.cast(frames, feature.tf_dtype)
        return tf.RaggedTensor.from_row_splits(values, parsed.row_splits, validate=False)
    per_frame = 1 if feature.encoding == "raw" else (feature.size or 0)
    lengths = frames.row_lengths()
    message = (
        # "tf.train.SequenceExample" marks it a data error for explain_error
        f"Expected every frame of feature list {feature.name!r} to hold "
        f"{feature.frame.expected_values()} in every tf.train.SequenceExample; found a "
        "frame with another number of values"
    )
    valid = tf.reduce_all(tf.equal(lengths, per_frame))
    with tf.control_dependencies([tf.debugging.Assert(valid, [message, lengths])]):
        flat = tf.identity(frames.flat_values)
    count = tf.shape(lengths, out_type=tf.int64)
    if feature.encoding == "raw":
        value = feature.frame.decode(flat)  # one bytes value per frame: [frames, *shape]
    else:
        shape = tf.concat([count, tf.constant(feature.shape, tf.int64)], 0)
        value = feature.frame.decode(tf.reshape(flat, shape))
        value.set_shape(tf.TensorShape([None]).concatenate(feature.shape))
    return tf.RaggedTensor.from_row_splits(value, parsed.row_splits, validate=False)


def fill_default(feature: Any, parsed: Any) -> Any:
    """Dense values from the ragged ``[batch, (values)]`` of an optional feature."""
    per_record = 1 if feature.encoding == "raw" else (feature.size or 0)
    lengths = parsed.row_lengths()
    empty = tf.equal(lengths, 0)
    valid = tf.reduce_all(tf.logical_or(empty, tf.equal(lengths, per_record)))
    message = (
        # "tf.train.Example" marks it a data error for explain_error / DataErrorHook
        f"Expected feature {feature.name!r} to hold 0 or {per_record} value(s) in every "
        f"tf.train.Example ({feature.expected_values()}); found a record with another number"
    )
    with tf.control_dependencies([tf.debugging.Assert(valid, [message, lengths])]):
        dense = parsed.to_tensor(shape=[None, per_record])
    if feature.encoding == "raw":
        nbytes = feature.default_array().astype(np.dtype(feature.dtype).newbyteorder("<"))
        fill = tf.constant([nbytes.tobytes()], tf.string)
    else:
        stored = {"bytes": object, "int64": np.int64, "float": np.float32}[feature.encoding]
        values = feature.default_array().reshape(-1)
        fill = tf.constant(values.astype(stored), dense.dtype)
    value = tf.where(tf.expand_dims(empty, 1), tf.expand_dims(fill, 0), dense)
    if feature.encoding == "raw":
        return value[:, 0]
    batch = tf.shape(value, out_type=tf.int64)[:1]
    value = tf.reshape(value, tf.concat([batch, tf.constant(feature.shape, tf.int64)], 0))
    value.set_shape(tf.TensorShape([None]).concatenate(feature.shape))
    return value


def parse_batch(schema: Any, serialized: Any) -> dict[str, Any]:
    """A batch of ``serialized`` records parsed: ``Schema.parse_batch``."""
    sequences = schema.sequence_features
    if not sequences:
        parsed = tf.io.parse_example(serialized, schema.parse_spec())
        return {f.name: f.decode(parsed[f.name]) for f in schema.features}
    context_spec = {f.name: f.parse_spec() for f in schema.context_features}
    context, lists, _ = tf.io.parse_sequence_example(
        serialized,
        context_features=context_spec or None,
        sequence_features={f.name: f.parse_spec() for f in sequences},
    )
    return {
        f.name: f.decode(lists[f.name] if f.sequence else context[f.name]) for f in schema.features
    }
