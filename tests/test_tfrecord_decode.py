"""Decoding values, in one home (``tfrecord/schema/decode.py``): raw bytes, images, ZLIB tensors."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks.tfrecord.schema.decode import decode_images, inflate, raw_values


@pytest.mark.parametrize("dtype", ["float16", "bool", "uint32", "uint64", "int16", "float64"])
def test_raw_values_reads_little_endian_bytes_of_each_dtype(dtype):
    values = np.array([[0, 1, 3], [1, 0, 2]]).astype(dtype)
    data = tf.constant([row.astype(np.dtype(dtype).newbyteorder("<")).tobytes() for row in values])
    decoded = raw_values(data, dtype)
    assert decoded.dtype == tf.as_dtype(dtype)
    np.testing.assert_array_equal(decoded.numpy(), values)


def test_raw_values_pads_a_short_block_to_its_fixed_length():
    block = np.array([5, 6], np.float16).tobytes()
    decoded = raw_values(tf.constant([block]), "float16", fixed_length=8)
    np.testing.assert_array_equal(decoded.numpy(), [[5, 6, 0, 0]])


@pytest.mark.parametrize("image_format", ["png", "jpeg", ""])
def test_decode_images_decodes_each_declared_format(image_format):
    image = np.full((4, 3, 1), 200, np.uint8)
    encode = tf.io.encode_jpeg if image_format == "jpeg" else tf.io.encode_png
    encoded = tf.stack([encode(image), encode(image)])
    images = decode_images(encoded, (4, 3, 1), "uint8", image_format)
    assert images.shape == (2, 4, 3, 1)
    assert np.abs(images.numpy().astype(int) - 200).max() <= 2  # JPEG is lossy


def test_inflate_decompresses_zlib_strings():
    raw = [b"abc" * 10, b""]
    assert inflate(tf.constant([zlib.compress(v) for v in raw])).numpy().tolist() == raw
