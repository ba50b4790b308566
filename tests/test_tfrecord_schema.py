"""Schemas: validation, JSON, and inference from files written by other tools."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import bytes_feature, example, float_feature, int64_feature, write_records
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import Sidecar


def _foreign_records(n: int = 12) -> list[bytes]:
    """Records as another tool would write them: varied kinds and lengths."""
    records = []
    for i in range(n):
        features = {
            "label": int64_feature([i % 3]),
            "coords": float_feature([i, i + 0.5, -1.0]),
            "name": bytes_feature([f"item-{i}".encode()]),
            "tokens": int64_feature(range(i % 4)),  # 0..3 values: varying length
        }
        if i % 2 == 0:
            features["weight"] = float_feature([0.5])  # only in half of the records
        records.append(example(**features))
    return records


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_inspect_file_written_by_tensorflow(tmp_path, compression):
    path = write_records(tmp_path / "foreign.rec", _foreign_records(), compression)

    (info,) = tfrecord.inspect(path)

    assert info.compression == compression
    assert info.num_records == 12
    assert info.stored is None
    found = {
        name: (f.kind, f.records, f.min_length, f.max_length) for name, f in info.features.items()
    }
    assert found == {
        "coords": ("float", 12, 3, 3),
        "label": ("int64", 12, 1, 1),
        "name": ("bytes", 12, 1, 1),
        "tokens": ("int64", 12, 0, 3),
        "weight": ("float", 6, 1, 1),
    }


def test_inferred_schema_of_foreign_file(tmp_path):
    path = write_records(tmp_path / "foreign.rec", _foreign_records())

    schema = tfrecord.infer_schema(path)

    assert {f.name: (f.dtype, f.shape, f.encoding) for f in schema} == {
        "coords": ("float32", (3,), "float"),
        "label": ("int64", (), "int64"),
        "name": ("bytes", (), "bytes"),
        "tokens": ("int64", (None,), "int64"),
        "weight": ("float32", (None,), "float"),
    }


def test_foreign_file_reads_with_inferred_schema(tmp_path):
    path = write_records(tmp_path / "foreign.rec", _foreign_records(), "GZIP")

    batches = list(tfrecord.dataset(path, batch_size=5))

    assert [int(b["label"].shape[0]) for b in batches] == [5, 5, 2]
    first = batches[0]
    assert first["coords"].shape == (5, 3)
    assert first["coords"].dtype == tf.float32
    assert isinstance(first["tokens"], tf.RaggedTensor)
    assert first["tokens"].to_list() == [[], [0], [0, 1], [0, 1, 2], []]
    assert first["name"].numpy().tolist() == [f"item-{i}".encode() for i in range(5)]


def test_inspect_counts_all_records_but_scans_max_records(tmp_path):
    path = write_records(tmp_path / "f.rec", _foreign_records(12))
    (info,) = tfrecord.inspect(path, max_records=4)
    assert (info.num_records, info.scanned_records) == (12, 4)
    assert info.features["label"].records == 4


def test_inspect_reports_stored_schema_of_written_files(tmp_path):
    result = tfrecord.write({"image": np.zeros((4, 3, 3), np.uint8)}, tmp_path, shards=2)
    infos = tfrecord.inspect(tmp_path)
    assert [i.path for i in infos] == result.files
    assert infos[0].schema() == result.schema
    assert infos[0].features["image"].min_bytes == 9
    assert infos[0].to_dict()["stored_schema"] == [
        {"name": "image", "dtype": "uint8", "shape": [3, 3], "encoding": "raw"}
    ]


def test_mixed_kinds_cannot_be_inferred(tmp_path):
    path = write_records(
        tmp_path / "mixed.rec", [example(v=int64_feature([1])), example(v=float_feature([1.0]))]
    )
    with pytest.raises(tfrecord.SchemaMismatchError, match=r"Feature 'v' in .*mixed.rec"):
        tfrecord.infer_schema(path)


def test_schema_json_round_trip():
    schema = Schema(
        [
            Feature("image", "uint8", (28, 28)),
            Feature("label", "int64", (), "int64"),
            Feature("tokens", "int64", (None,), "int64"),
            Feature("name", "string", (), "bytes"),
        ]
    )
    sidecar = Sidecar(schema, "GZIP", (("a.tfrecord", 3), ("b.tfrecord", 4)))
    back = Sidecar.from_json(sidecar.to_json())
    assert back == sidecar
    assert back.num_records == 7


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "", "dtype": "uint8"}, r"Received: name=''"),
        ({"name": "a", "dtype": "complex64"}, r"Received: dtype='complex64'"),
        ({"name": "a", "dtype": "uint8", "encoding": "png"}, r"Received: encoding='png'"),
        ({"name": "a", "dtype": "uint8", "shape": (-1,)}, r"Received: shape=\(-1,\)"),
        ({"name": "a", "dtype": "uint8", "shape": (2, None)}, r"\(None,\) for a varying"),
        ({"name": "a", "dtype": "string", "encoding": "raw"}, r"'raw' encoding needs a numeric"),
        ({"name": "a", "dtype": "int64", "encoding": "bytes"}, r"'bytes' encoding goes with"),
    ],
)
def test_bad_features_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Feature(**kwargs)


def test_duplicate_feature_names_are_rejected():
    with pytest.raises(ValueError, match=r"duplicates=\['a'\]"):
        Schema([Feature("a", "uint8"), Feature("a", "int64", (), "int64")])


def test_bad_sidecar_is_reported():
    with pytest.raises(ValueError, match=r"Expected 'x.json' to be a schema written by"):
        Sidecar.from_json('{"features": 3}', source="'x.json'")


def test_check_example_names_record_file_and_feature():
    schema = Schema([Feature("image", "uint8", (2, 2)), Feature("label", "int64", (), "int64")])
    proto = tf.train.Example.FromString(
        example(image=bytes_feature([b"abc"]), label=int64_feature([1]))
    )
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'image' in record 3 of file 'f.rec' does not match the schema: "
        r"expected one bytes value of 4 bytes \(uint8 of shape \(2, 2\), raw\); "
        r"found one bytes value of 3 bytes",
    ):
        schema.check_example(proto, file="f.rec", record=3)


@pytest.mark.parametrize(
    ("dtype", "shape", "default", "encoding"),
    [
        ("float32", (2,), [0.0, 0.0], "float"),  # docs/tfrecord.md: a float_list of 2
        ("float16", (2, 3), 0.0, "float"),
        ("float32", (), 0.0, "float"),
        ("float32", (2,), None, "raw"),  # without a default: as write stores arrays
        ("float64", (2,), 0.0, "raw"),  # a float_list would lose precision
        ("uint8", (2, 2), 7, "raw"),  # optional raw images stay raw
    ],
)
def test_a_float_feature_with_a_default_is_a_float_list(dtype, shape, default, encoding):
    feature = Feature("xy", dtype, shape, default=default)
    assert feature.encoding == encoding
    assert feature == Feature("xy", dtype, shape, encoding, default)
    assert Feature.from_dict(feature.to_dict()) == feature
