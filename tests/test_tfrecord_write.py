"""Writing arrays to TFRecord shards and reading them back unchanged."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfr_hooks import tfrecord

NUMERIC = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
]
SHAPES = [(), (3,), (2, 3)]
N = 23


def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    size = (N, *shape)
    if dtype == "bool":
        return rng.integers(0, 2, size=size).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=size, dtype=dtype, endpoint=True)
    return rng.normal(scale=1000.0, size=size).astype(dtype)


def _all_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = {"id": np.arange(N, dtype=np.int64)}
    for dtype in NUMERIC:
        for shape in SHAPES:
            arrays[f"{dtype}_{len(shape)}d"] = _values(dtype, shape, rng)
    arrays["text"] = np.array([f"héllo {i}" for i in range(N)])
    arrays["blob"] = np.array([bytes([i, 0, 255]) * (i % 4) for i in range(N)], dtype=object)
    arrays["pairs"] = np.array([[f"a{i}", f"b{i}"] for i in range(N)])
    arrays["image"] = rng.integers(0, 256, size=(N, 5, 4, 3), dtype=np.uint8)
    return arrays


def _read_all(files: object, **kwargs: object) -> dict[str, np.ndarray]:
    batches = list(tfrecord.dataset(files, batch_size=5, **kwargs))
    merged = {name: np.concatenate([b[name].numpy() for b in batches]) for name in batches[0]}
    order = np.argsort(merged["id"])
    return {name: value[order] for name, value in merged.items()}


@pytest.mark.parametrize(
    ("compression", "shards"),
    [
        (None, 1),
        ("gzip", 3),
        pytest.param("zlib", 2, marks=pytest.mark.slow),  # about 1 s of CPU each
        pytest.param("", 4, marks=pytest.mark.slow),
    ],
)
def test_round_trip_every_dtype_and_shape(tmp_path, compression, shards):
    arrays = _all_arrays()
    result = tfrecord.write(arrays, tmp_path, shards=shards, compression=compression)
    assert len(result.files) == shards
    assert result.num_records == N

    back = _read_all(tmp_path)

    assert sorted(back) == sorted(arrays)
    for name, expected in arrays.items():
        got = back[name]
        if expected.dtype.kind in "UO":
            expected = np.array(
                [v.encode() if isinstance(v, str) else v for v in expected.ravel()], dtype=object
            ).reshape(expected.shape)
            assert got.dtype == object, name
            assert got.tolist() == expected.tolist(), name
            continue
        assert got.dtype == expected.dtype, name
        assert got.shape == expected.shape, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_shards_are_named_and_split_evenly(tmp_path):
    result = tfrecord.write({"v": np.arange(10)}, tmp_path, shards=4, compression="gzip")
    names = [os.path.basename(f) for f in result.files]
    assert names == [f"data-0000{i}-of-00004.tfrecord.gz" for i in range(4)]
    counts = [info.num_records for info in tfrecord.inspect(result.files)]
    assert sum(counts) == 10
    assert max(counts) - min(counts) <= 1
    assert all(tfrecord.detect_compression(f) == "GZIP" for f in result.files)


def test_sidecar_records_schema_shards_and_compression(tmp_path):
    result = tfrecord.write(
        {"image": np.zeros((6, 28, 28), np.uint8), "label": np.arange(6)},
        tmp_path,
        shards=2,
        compression="zlib",
        prefix="train",
    )
    stored = json.loads((tmp_path / "schema.json").read_text())
    assert stored["compression"] == "ZLIB"
    assert stored["num_records"] == 6
    assert [(s["file"], s["num_records"]) for s in stored["shards"]] == [
        ("train-00000-of-00002.tfrecord.zlib", 3),
        ("train-00001-of-00002.tfrecord.zlib", 3),
    ]
    assert [s["bytes"] for s in stored["shards"]] == [os.path.getsize(f) for f in result.files]
    assert stored["features"] == [
        {"name": "image", "dtype": "uint8", "shape": [28, 28], "encoding": "raw"},
        {"name": "label", "dtype": "int64", "shape": [], "encoding": "int64"},
    ]
    assert tfrecord.load_schema(tmp_path) == result.schema


def test_encodings_chosen_per_array():
    schema = tfrecord.Schema.from_arrays(
        {
            "image": np.zeros((2, 8, 8), np.uint8),
            "label": np.zeros(2, np.int32),
            "flag": np.zeros(2, bool),
            "score": np.zeros(2, np.float32),
            "precise": np.zeros(2, np.float64),
            "big": np.zeros(2, np.uint64),
            "name": np.array(["a", "b"]),
        }
    )
    assert {f.name: f.encoding for f in schema} == {
        "image": "raw",
        "label": "int64",
        "flag": "int64",
        "score": "float",
        "precise": "raw",
        "big": "raw",
        "name": "bytes",
    }


def test_records_are_plain_examples_readable_without_tfr_hooks(tmp_path):
    images = np.arange(3 * 2 * 2, dtype=np.uint8).reshape(3, 2, 2)
    result = tfrecord.write({"image": images, "label": np.array([4, 5, 6])}, tmp_path)
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    parsed = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(result.files[0])]
    assert [int(p["label"]) for p in parsed] == [4, 5, 6]
    decoded = tf.reshape(tf.io.decode_raw(parsed[1]["image"], tf.uint8), [2, 2])
    np.testing.assert_array_equal(decoded.numpy(), images[1])


def test_single_array_and_pair_get_default_names(tmp_path):
    assert tfrecord.write(np.zeros((3, 2)), tmp_path / "a").schema.names == ["x"]
    pair = (np.zeros((3, 2), np.float32), np.arange(3))
    assert tfrecord.write(pair, tmp_path / "b").schema.names == ["x", "y"]


def test_progress_callback_counts_every_example(tmp_path):
    seen = []
    tfrecord.write({"v": np.arange(25)}, tmp_path, shards=2, chunk_size=4, progress=seen.append)
    assert sum(seen) == 25
    assert max(seen) == 4


def test_existing_dataset_needs_overwrite(tmp_path):
    tfrecord.write({"v": np.arange(8)}, tmp_path, shards=4)
    with pytest.raises(FileExistsError, match=r"Expected `directory` to hold no dataset"):
        tfrecord.write({"v": np.arange(8)}, tmp_path, shards=2)
    result = tfrecord.write({"v": np.arange(8)}, tmp_path, shards=2, overwrite=True)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["data-00000-of-00002.tfrecord", "data-00001-of-00002.tfrecord", "schema.json"]
    assert result.num_records == 8


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "match"),
    [
        ({"a": np.zeros(3), "b": np.zeros(4)}, {}, ValueError, r"same length.*'a': 3, 'b': 4"),
        ({"a": np.zeros(3, np.complex64)}, {}, TypeError, r"Received: dtype=complex64"),
        ({"a": np.zeros(3)}, {"shards": 4}, ValueError, r"at most the number of examples \(3\)"),
        ({"a": np.zeros(3)}, {"shards": 0}, ValueError, r"Received: shards=0"),
        ({"a": np.zeros(3)}, {"compression": "lz4"}, ValueError, r"compression='lz4'"),
        ({"a": np.zeros(0)}, {}, ValueError, r"at least one example"),
        ({"a": np.float32(1.0)}, {}, ValueError, r"first dimension"),
        ([1, 2, 3], {}, TypeError, r"Received: data=\[1, 2, 3\] of type list"),
        ({"a": np.array([1, "x"], dtype=object)}, {}, TypeError, r"str or bytes"),
    ],
)
def test_bad_arguments_are_reported(tmp_path, data, kwargs, error, match):
    with pytest.raises(error, match=match):
        tfrecord.write(data, tmp_path, **kwargs)


@settings(max_examples=12, deadline=None)
@given(
    dtype=st.sampled_from(NUMERIC),
    shape=st.lists(st.integers(1, 3), max_size=3).map(tuple),
    n=st.integers(1, 9),
    shards=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
@pytest.mark.slow  # hypothesis: many writes and reads; about 1 s of CPU
def test_round_trip_property(tmp_path_factory, dtype, shape, n, shards, seed):
    rng = np.random.default_rng(seed)
    values = _values(dtype, shape, rng)[:n]
    directory = tmp_path_factory.mktemp("prop")
    tfrecord.write({"v": values, "id": np.arange(n)}, directory, shards=min(shards, n))
    back = _read_all(directory)
    assert back["v"].dtype == values.dtype
    np.testing.assert_array_equal(back["v"], values)
