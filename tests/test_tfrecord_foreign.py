"""Files written by others, read with a partly hand-declared schema (issue 11, items 2-4).

Every file here is written with ``tf.io.TFRecordWriter`` directly (no ``schema.json``):
the seed's MNIST layout (``image_raw`` raw uint8 bytes, ``label``, ``height``, ``width``,
``depth`` as ``int64_list`` values), and TFX-like records whose optional features hold
no value in some records (an empty list, or the key absent).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import (
    bytes_feature,
    example,
    float_feature,
    int64_feature,
    new_session,
    run_graph_batches,
    write_records,
)
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.schema.schema import Feature, Schema

SIDE = 28


def reader(name: str) -> dict[str, object]:
    """The read_batches arguments of a graph-mode pipeline: dataset, in memory or queue."""
    if name == "memory":
        return {"pipeline": "dataset", "in_memory": True}
    return {"pipeline": name}


def seed_images(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(n, SIDE, SIDE, 1), dtype=np.uint8)


def write_seed_layout(path, images: np.ndarray) -> str:
    """What the seed's mnist_tfrecord.py writes: raw image bytes and int64 scalars."""
    records = [
        example(
            height=int64_feature([SIDE]),
            width=int64_feature([SIDE]),
            depth=int64_feature([1]),
            label=int64_feature([i % 10]),
            image_raw=bytes_feature([image.tobytes()]),
        )
        for i, image in enumerate(images)
    ]
    return write_records(path, records)


# --- item 2: a scalar declared by hand gets the encoding `write` would choose -----------


@pytest.mark.parametrize(
    ("dtype", "shape", "encoding"),
    [
        ("int64", (), "int64"),
        ("int32", (), "int64"),
        ("uint8", (), "int64"),
        ("bool", (), "int64"),
        ("uint64", (), "raw"),  # int64_list cannot hold every uint64
        ("float32", (), "float"),
        ("float16", (), "float"),
        ("float64", (), "raw"),  # float_list would lose precision
        ("uint8", (28, 28, 1), "raw"),
        ("float32", (3,), "raw"),
        ("string", (), "bytes"),
        ("bytes", (2,), "bytes"),
        ("int64", (None,), "int64"),
        ("float32", (None,), "float"),
    ],
)
def test_encoding_defaults_to_the_one_write_chooses(dtype, shape, encoding):
    assert Feature("x", dtype, shape).encoding == encoding
    assert Feature("x", dtype, shape) == Feature("x", dtype, shape, encoding)
    if None not in shape:  # what tfrecord.write stores for such an array
        numpy_dtype = object if dtype in ("string", "bytes") else dtype
        stored = Feature.for_array("x", np.zeros((2, *shape), dtype=numpy_dtype))
        assert stored.encoding == encoding


def test_hand_declared_scalars_read_the_usual_int64_lists(tmp_path):
    path = write_seed_layout(tmp_path / "mnist.tfrecord", seed_images(12))
    schema = Schema([Feature("label", "int64"), Feature("height", "int64")])

    (batch,) = tfrecord.dataset(path, 12, schema=schema)

    assert batch["label"].numpy().tolist() == [i % 10 for i in range(12)]
    assert batch["height"].numpy().tolist() == [SIDE] * 12


def test_mismatch_error_suggests_the_encoding_that_matches(tmp_path):
    path = write_seed_layout(tmp_path / "mnist.tfrecord", seed_images(3))
    raw_label = Schema([Feature("label", "int64", (), "raw")])
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'label' in record 0 of file '.*mnist.tfrecord' does not match the "
        r"schema: expected one bytes value of 8 bytes .*; found a int64_list of 1 value\(s\)\. "
        r"The 'int64' encoding would match: Feature\('label', 'int64', \(\), "
        r"encoding='int64'\)\.",
    ):
        tfrecord.dataset(path, 3, schema=raw_label)

    # 8 bytes in a bytes_list read as an int64 list: the other way round
    bytes_path = write_records(
        tmp_path / "raw.tfrecord", [example(label=bytes_feature([np.int64(7).tobytes()]))]
    )
    with pytest.raises(tfrecord.SchemaMismatchError, match=r"The 'raw' encoding would match"):
        tfrecord.dataset(bytes_path, 1, schema=Schema([Feature("label", "int64")]))
    (batch,) = tfrecord.dataset(
        bytes_path, 1, schema=Schema([Feature("label", "int64", (), "raw")])
    )
    assert batch["label"].numpy().tolist() == [7]


def test_stored_schema_mismatch_suggests_the_stored_encoding(tmp_path):
    tfrecord.write({"label": np.arange(4, dtype=np.int64)}, tmp_path)
    with pytest.raises(
        tfrecord.SchemaMismatchError, match=r"\(raw encoding\); found .*The 'int64' encoding"
    ):
        tfrecord.dataset(tmp_path, 2, schema=Schema([Feature("label", "int64", (), "raw")]))


def test_no_suggestion_when_no_encoding_matches(tmp_path):
    path = write_records(tmp_path / "f.rec", [example(label=int64_feature([1, 2]))])
    with pytest.raises(tfrecord.SchemaMismatchError) as caught:
        tfrecord.dataset(path, 1, schema=Schema([Feature("label", "int64")]))
    assert "would match" not in str(caught.value)


# --- item 3: override part of an inferred schema in one call -------------------------------


def test_replace_declares_the_raw_image_and_keeps_the_rest_inferred(tmp_path):
    images = seed_images(20)
    path = write_seed_layout(tmp_path / "mnist.tfrecord", images)
    inferred = tfrecord.infer_schema(path)
    assert inferred["image_raw"] == Feature("image_raw", "bytes", (), "bytes")

    schema = inferred.replace(image_raw=("uint8", (SIDE, SIDE, 1)))

    assert schema.names == inferred.names  # same features, same order
    assert schema["image_raw"] == Feature("image_raw", "uint8", (SIDE, SIDE, 1), "raw")
    for name in ("label", "height", "width", "depth"):
        assert schema[name] == inferred[name] == Feature(name, "int64", (), "int64")
    ds = tfrecord.dataset(path, 8, schema=schema, as_tuple=("image_raw", "label"))
    got_images, got_labels = (np.concatenate(parts) for parts in zip(*ds, strict=True))
    assert got_images.dtype == np.uint8 and got_images.shape == (20, SIDE, SIDE, 1)
    np.testing.assert_array_equal(got_images, images)
    assert got_labels.tolist() == [i % 10 for i in range(20)]


def test_decode_argument_in_both_readers(tmp_path):
    images = seed_images(10)
    path = write_seed_layout(tmp_path / "mnist.tfrecord", images)
    decode = {"image_raw": ("uint8", (SIDE, SIDE, 1))}

    (image, label) = next(
        iter(
            tfrecord.dataset(
                path,
                10,
                read_config=tfrecord.ReadConfig(decode=decode),
                as_tuple=("image_raw", "label"),
            )
        )
    )
    np.testing.assert_array_equal(image.numpy(), images)

    for pipeline in ("dataset", "queue"):
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(
                path,
                10,
                **reader(pipeline),
                num_epochs=1,
                read_config=tfrecord.ReadConfig(num_parallel_reads=1, decode=decode),
                as_tuple=("image_raw", "label"),
            )
            assert batches.tensors[0].shape.as_list() == [None, SIDE, SIDE, 1]
            with new_session() as session:
                (got,) = run_graph_batches(session, batches.tensors, batches.initializers)
        np.testing.assert_array_equal(got[0], images)
        assert got[1].tolist() == label.numpy().tolist()


def test_replace_and_decode_refuse_bad_changes(tmp_path):
    path = write_seed_layout(tmp_path / "mnist.tfrecord", seed_images(2))
    schema = tfrecord.infer_schema(path)
    with pytest.raises(
        KeyError, match=r"features of the schema \[.*'image_raw'.*\]. Received: imag"
    ):
        schema.replace(imag=("uint8", (SIDE, SIDE, 1)))
    with pytest.raises(TypeError, match=r"Received: image_raw='uint8'"):
        schema.replace(image_raw="uint8")
    with pytest.raises(TypeError, match=r"only the fields dtype, shape, encoding and default"):
        schema.replace(label={"dtpye": "int32"})
    with pytest.raises(TypeError, match=r"Received: decode=\['image_raw'\]"):
        tfrecord.dataset(path, 2, read_config=tfrecord.ReadConfig(decode=["image_raw"]))
    # a wrong shape is refused at once, naming the feature and the bytes found
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'image_raw' in record 0 .*expected one bytes value of 3136 bytes "
        r"\(uint8 of shape \(56, 56, 1\), raw\); found one bytes value of 784 bytes",
    ):
        tfrecord.dataset(
            path, 2, read_config=tfrecord.ReadConfig(decode={"image_raw": ("uint8", (56, 56, 1))})
        )


# --- item 4: optional features (0 or 1 values), read dense with a default ----------------


def tfx_like_records(n: int) -> list[bytes]:
    """Chicago-taxi-like records: trip_seconds and company are missing in some records."""
    records = []
    for i in range(n):
        features = {"trip_id": int64_feature([i])}
        if i % 3 == 0:
            features["trip_seconds"] = float_feature([])  # TFX: an empty list
        elif i % 3 == 1:
            features["trip_seconds"] = float_feature([10.0 * i])
        # i % 3 == 2: the key absent
        features["company"] = bytes_feature([f"co-{i}".encode()] if i % 2 else [])
        features["pickup"] = float_feature([i, -i])  # two values, always there
        records.append(example(**features))
    return records


def expected_tfx_columns(n: int) -> dict[str, list]:
    return {
        "trip_id": list(range(n)),
        "trip_seconds": [10.0 * i if i % 3 == 1 else -1.0 for i in range(n)],
        "company": [f"co-{i}".encode() if i % 2 else b"unknown" for i in range(n)],
    }


DEFAULTS = {"trip_seconds": {"default": -1.0}, "company": {"default": "unknown"}}


@pytest.fixture
def tfx_file(tmp_path):
    return write_records(tmp_path / "taxi.tfrecord.gz", tfx_like_records(12), "GZIP")


def test_optional_features_are_found_by_inspect(tfx_file):
    (info,) = tfrecord.inspect(tfx_file)
    optional = {name: f.is_optional(info.scanned_records) for name, f in info.features.items()}
    assert optional == {
        "company": True,
        "pickup": False,
        "trip_id": False,
        "trip_seconds": True,
    }
    assert {f["name"]: f["optional"] for f in info.to_dict()["features"]} == optional
    # inferred alone, they stay ragged (the behaviour without a default)
    assert tfrecord.infer_schema(tfx_file)["trip_seconds"].shape == (None,)


def test_optional_features_read_dense_with_a_default_in_tf_data(tfx_file):
    schema = tfrecord.infer_schema(tfx_file).replace(**DEFAULTS)
    assert schema["trip_seconds"] == Feature("trip_seconds", "float32", (), "float", -1.0)
    assert schema["company"] == Feature("company", "bytes", (), "bytes", b"unknown")

    batches = list(tfrecord.dataset(tfx_file, 5, schema=schema))

    for name in ("trip_seconds", "company"):
        assert all(isinstance(b[name], tf.Tensor) for b in batches), name
        assert batches[0][name].shape == (5,)
    got = {
        name: [v for b in batches for v in b[name].numpy().tolist()]
        for name in expected_tfx_columns(12)
    }
    assert got == expected_tfx_columns(12)
    assert batches[0]["pickup"].shape == (5, 2)


@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_optional_features_read_dense_in_graph_mode(tfx_file, pipeline):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            tfx_file,
            4,
            **reader(pipeline),
            num_epochs=1,
            read_config=tfrecord.ReadConfig(num_parallel_reads=1, decode=DEFAULTS),
        )
        assert batches.facts.compression == "GZIP"
        for name in ("trip_seconds", "company"):
            assert isinstance(batches.tensors[name], tf.Tensor), name
            assert batches.tensors[name].shape.as_list() == [None]
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors, batches.initializers)
    got = {
        name: [v for r in results for v in r[name].tolist()] for name in expected_tfx_columns(12)
    }
    assert got == expected_tfx_columns(12)


def test_a_feature_declared_with_a_default_reads_missing_values(tmp_path):
    # raw bytes and fixed-length lists can be optional too: the default fills the record
    records = [
        example(image=bytes_feature([bytes([3]) * 4]), xy=float_feature([3, 3.5])),
        example(),
        example(image=bytes_feature([]), xy=float_feature([])),
    ]
    path = write_records(tmp_path / "f.rec", records)
    schema = Schema(
        [
            Feature("image", "uint8", (2, 2), default=7),
            Feature("xy", "float32", (2,), "float", default=[-1.0, -2.0]),
        ]
    )
    (batch,) = tfrecord.dataset(path, 3, schema=schema)
    assert batch["image"].numpy().tolist() == [[[3, 3], [3, 3]], [[7, 7], [7, 7]], [[7, 7], [7, 7]]]
    assert batch["xy"].numpy().tolist() == [[3.0, 3.5], [-1.0, -2.0], [-1.0, -2.0]]


def test_an_optional_feature_with_too_many_values_is_explained(tmp_path):
    records = [example(t=float_feature([1.0])), example(t=float_feature([]))]
    records.append(example(t=float_feature([1.0, 2.0])))
    path = write_records(tmp_path / "f.rec", records)
    schema = Schema([Feature("t", "float32", default=0.0)])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"feature ..t.. to hold 0 or 1 value"
    ) as caught:
        list(tfrecord.dataset(path, 3, schema=schema))
    explained = tfrecord.explain_error(caught.value, path, schema)
    assert isinstance(explained, tfrecord.SchemaMismatchError)
    assert str(explained).startswith(
        "Feature 't' in record 2 of file "
    ) and "expected a float_list of 0 or 1 value(s) (optional); found a float_list of 2" in str(
        explained
    )


def test_defaults_are_checked_and_kept_in_json():
    with pytest.raises(ValueError, match=r"with a default to have a fixed shape"):
        Feature("t", "float32", (None,), default=0.0)
    with pytest.raises(
        ValueError,
        match=r"Expected `default` of feature 't' to be a int64 .*"
        r"Received: default='x'",
    ):
        Feature("t", "int64", default="x")
    with pytest.raises(ValueError, match=r"broadcasts to shape \(2,\)"):
        Feature("t", "int64", (2,), default=[1, 2, 3])
    schema = Schema(
        [
            Feature("t", "float32", default=0.5),
            Feature("c", "string", default="none"),
            Feature("xy", "int64", (2,), default=[1, 2]),
        ]
    )
    assert Schema.from_list(schema.to_list()) == schema
    assert schema.to_list()[2]["default"] == [1, 2]
    assert hash(schema["xy"]) == hash(Feature("xy", "int64", (2,), default=[1, 2]))


# --- issue 17 item 4: a feature some records lack, whichever record that is -------------
# The rule: a feature of varying length (what inference gives one that some records
# lack) reads as a ragged row, empty where a record lacks it, as tf.io.RaggedFeature
# reads it; a feature of fixed shape without a default must be in every record, and the
# error says how to give it a default. Record 0 is no exception.

LACKING_RECORDS = 50


def write_file_lacking_t(path, missing: int) -> str:
    """``id`` in every record, float ``t`` (one value) in all but record ``missing``."""
    records = []
    for i in range(LACKING_RECORDS):
        features = {"id": int64_feature([i])}
        if i != missing:
            features["t"] = float_feature([i / 2])
        records.append(example(**features))
    return write_records(path, records)


def expected_t(missing: int, default: float | None = None) -> list:
    if default is None:  # ragged rows
        return [[] if i == missing else [i / 2] for i in range(LACKING_RECORDS)]
    return [default if i == missing else i / 2 for i in range(LACKING_RECORDS)]


def column(batches, name: str) -> list:
    """One feature's values over all batches (eager tensors or session results)."""
    values = []
    for batch in batches:
        value = batch[name]
        if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
            values.extend(value.to_list())
        else:
            values.extend(np.asarray(value).tolist())
    return values


@pytest.mark.parametrize("missing", [0, 30])
def test_a_feature_some_records_lack_reads_as_ragged_whichever_record(tmp_path, missing):
    path = write_file_lacking_t(tmp_path / f"lacks-{missing}.tfrecord", missing)

    (info,) = tfrecord.inspect(path)
    assert info.features["t"].records == LACKING_RECORDS - 1
    assert info.features["t"].is_optional(info.scanned_records)
    assert tfrecord.infer_schema(path)["t"] == Feature("t", "float32", (None,), "float")

    batches = list(tfrecord.dataset(path, 16))

    assert all(isinstance(b["t"], tf.RaggedTensor) for b in batches)
    assert column(batches, "t") == expected_t(missing)
    assert column(batches, "id") == list(range(LACKING_RECORDS))


@pytest.mark.parametrize("missing", [0, 30])
@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_a_feature_some_records_lack_reads_as_ragged_in_graph_mode(tmp_path, missing, pipeline):
    path = write_file_lacking_t(tmp_path / f"lacks-{missing}.tfrecord", missing)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            path,
            16,
            **reader(pipeline),
            num_epochs=1,
            read_config=tfrecord.ReadConfig(num_parallel_reads=1),
        )
        assert isinstance(batches.tensors["t"], tf.RaggedTensor)
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors, batches.initializers)
    assert column(results, "t") == expected_t(missing)


@pytest.mark.parametrize(
    "missing", [0, pytest.param(30, marks=pytest.mark.slow)]
)  # both pipelines: about 1.5 s of CPU each; record 30 lacking stays fast, streamed, above
def test_a_feature_some_records_lack_reads_as_ragged_in_memory_too(tmp_path, missing):
    # held as values and row offsets: the same ragged rows as streamed, empty where absent
    path = write_file_lacking_t(tmp_path / f"lacks-{missing}.tfrecord", missing)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(path, 16, in_memory=True)
        assert batches.facts.kind.in_memory
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors, batches.initializers)
    assert column(results, "t") == expected_t(missing)
    assert column(tfrecord.dataset(path, 16, in_memory=True), "t") == expected_t(missing)


@pytest.mark.parametrize("missing", [0, 30])
def test_a_feature_some_records_lack_reads_its_default_whichever_record(tmp_path, missing):
    path = write_file_lacking_t(tmp_path / f"lacks-{missing}.tfrecord", missing)
    decode = {"t": {"default": -1.0}}

    got = column(tfrecord.dataset(path, 16, read_config=tfrecord.ReadConfig(decode=decode)), "t")
    assert got == expected_t(missing, -1.0)
    for pipeline in ("dataset", "memory", "queue"):
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(
                path,
                16,
                **reader(pipeline),
                num_epochs=1,
                read_config=tfrecord.ReadConfig(num_parallel_reads=1, decode=decode),
            )
            assert batches.tensors["t"].shape.as_list() == [None], pipeline
            with new_session() as session:
                results = run_graph_batches(session, batches.tensors, batches.initializers)
        assert column(results, "t") == expected_t(missing, -1.0), pipeline


@pytest.mark.parametrize("missing", [0, 30])
def test_a_fixed_shape_feature_some_records_lack_says_to_give_a_default(tmp_path, missing):
    path = write_file_lacking_t(tmp_path / f"lacks-{missing}.tfrecord", missing)
    schema = Schema([Feature("id", "int64"), Feature("t", "float32")])  # t required
    message = (
        rf"Feature 't' is missing from record {missing} of file '.*lacks-{missing}.tfrecord': "
        r"expected a float_list of 1 value\(s\); found only the features \['id'\]\. If some "
        r"records hold no value for it, give it a default: decode=\{'t': \{'default': \.\.\.\}\}"
    )
    if missing == 0:  # seen when the pipeline is built
        with pytest.raises(tfrecord.MissingFeatureError, match=message) as caught:
            tfrecord.dataset(path, 16, schema=schema)
        found = caught.value
    else:  # seen while reading, explained naming the file, record and feature
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            list(tfrecord.dataset(path, 16, schema=schema))
        found = tfrecord.explain_error(caught.value, path, schema)
        with pytest.raises(tfrecord.MissingFeatureError, match=message):
            raise found or caught.value
    assert (found.file, found.record, found.feature) == (path, missing, "t")
    # and the default it suggests reads the file
    got = column(
        tfrecord.dataset(
            path, 16, schema=schema, read_config=tfrecord.ReadConfig(decode={"t": {"default": 0.0}})
        ),
        "t",
    )
    assert got == expected_t(missing, 0.0)


# --- issue 17 item 5: the docs' Feature("xy", "float32", (2,), default=[0.0, 0.0]) -------

DOCS_XY = Feature("xy", "float32", (2,), default=[0.0, 0.0])


def xy_records(n: int) -> list[bytes]:
    """``xy`` as a float_list of 2, absent from records 0 and 5, an empty list in 3."""
    records = []
    for i in range(n):
        features = {"id": int64_feature([i])}
        if i == 3:
            features["xy"] = float_feature([])
        elif i not in (0, 5):
            features["xy"] = float_feature([i, -i])
        records.append(example(**features))
    return records


def expected_xy(n: int) -> list:
    return [[0.0, 0.0] if i in (0, 3, 5) else [float(i), float(-i)] for i in range(n)]


def test_docs_float_feature_with_a_default_reads_a_foreign_float_list(tmp_path):
    assert DOCS_XY.encoding == "float"
    path = write_records(tmp_path / "xy.tfrecord", xy_records(10))
    schema = Schema([Feature("id", "int64"), DOCS_XY])

    assert column(tfrecord.dataset(path, 4, schema=schema), "xy") == expected_xy(10)
    # the same declared on the inferred schema, where xy is of varying length
    decode = {"xy": {"default": [0.0, 0.0], "shape": (2,)}}
    assert tfrecord.infer_schema(path).replace(**decode)["xy"] == DOCS_XY
    for pipeline in ("dataset", "memory", "queue"):
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(
                path,
                4,
                **reader(pipeline),
                num_epochs=1,
                read_config=tfrecord.ReadConfig(num_parallel_reads=1, decode=decode),
            )
            assert batches.tensors["xy"].shape.as_list() == [None, 2], pipeline
            with new_session() as session:
                results = run_graph_batches(session, batches.tensors, batches.initializers)
        assert column(results, "xy") == expected_xy(10), pipeline


def test_docs_float_feature_with_a_default_reads_what_write_stores(tmp_path):
    # tfrecord.write stores a float array as raw bytes (schema.json says so): a feature
    # declared without an encoding reads it as stored
    xy = np.arange(20, dtype=np.float32).reshape(10, 2)
    tfrecord.write({"xy": xy, "id": np.arange(10)}, tmp_path / "data")
    assert tfrecord.load_schema(tmp_path / "data")["xy"].encoding == "raw"
    schema = Schema([DOCS_XY])

    got = column(tfrecord.dataset(tmp_path / "data", 4, schema=schema), "xy")
    assert got == xy.tolist()
    for pipeline in ("dataset", "memory"):
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(
                tmp_path / "data",
                4,
                **reader(pipeline),
                schema=schema,
                num_epochs=1,
            )
            assert batches.facts.schema["xy"].encoding == "raw"
            with new_session() as session:
                results = run_graph_batches(session, batches.tensors, batches.initializers)
        assert column(results, "xy") == xy.tolist(), pipeline
    # a declared encoding is kept, and checked against the stored one
    with pytest.raises(tfrecord.SchemaMismatchError, match=r"The 'raw' encoding would match"):
        tfrecord.dataset(
            tmp_path / "data", 4, schema=Schema([Feature("xy", "float32", (2,), "float", 0.0)])
        )


# tfrecord.convert: files of other producers rewritten as shards and schema.json


def read_all(files, decode=None, **kwargs) -> dict[str, np.ndarray]:
    """Every example of ``files``, in the stored order, as numpy arrays (or lists)."""
    config = tfrecord.ReadConfig(num_parallel_reads=1, decode=decode)
    batches = list(tfrecord.dataset(files, batch_size=64, read_config=config, **kwargs))
    columns = {}
    for name, first in batches[0].items():
        if isinstance(first, tf.RaggedTensor):
            columns[name] = [row for b in batches for row in b[name].to_list()]
        else:
            columns[name] = np.concatenate([b[name].numpy() for b in batches])
    return columns


def assert_same_columns(found: dict, wanted: dict) -> None:
    assert sorted(found) == sorted(wanted)
    for name, values in wanted.items():
        if isinstance(values, list):
            assert found[name] == values, name
        else:
            assert found[name].dtype == values.dtype, name
            np.testing.assert_array_equal(found[name], values, err_msg=name)


@pytest.mark.parametrize(
    "examples_per_record", [1, pytest.param(8, marks=pytest.mark.slow)]
)  # packed: about 2 s of CPU; the fast run packs in the tests below
def test_convert_the_seed_layout_reads_back_the_same_examples(tmp_path, examples_per_record):
    images = seed_images(70)
    source = tmp_path / "in"
    source.mkdir()
    write_seed_layout(source / "a.tfrecords", images[:40])
    write_seed_layout(source / "b.tfrecords", images[40:])
    decode = {"image_raw": ("uint8", (SIDE, SIDE, 1))}
    result = tfrecord.convert(
        str(source),
        tmp_path / "out",
        decode=decode,
        shards=3,
        examples_per_record=examples_per_record,
        chunk_size=16,  # chunks that span files and shards
    )
    assert result.num_records == 70 and len(result.files) == 3
    assert tfrecord.load_schema(result.schema_path)["image_raw"].shape == (SIDE, SIDE, 1)
    wanted = read_all(str(source), decode=decode)
    np.testing.assert_array_equal(wanted["image_raw"], images)
    # no decode: schema.json says what the raw bytes hold
    assert_same_columns(read_all(tmp_path / "out"), wanted)


def test_convert_detects_the_compression_of_a_gzip_file_of_float_lists(tmp_path):
    rng = np.random.default_rng(1)
    xy = rng.normal(size=(25, 3)).astype(np.float32)
    records = [example(xy=float_feature(v), t=float_feature([v[0]])) for v in xy]
    path = write_records(tmp_path / "floats.data", records, "GZIP")  # no telling suffix
    assert tfrecord.detect_compression(path) == "GZIP"
    result = tfrecord.convert(path, tmp_path / "out", compression="zlib")
    assert result.compression == "ZLIB"
    assert result.files[0].endswith(".tfrecord.zlib")
    assert_same_columns(read_all(tmp_path / "out"), read_all(path))
    np.testing.assert_array_equal(read_all(tmp_path / "out")["xy"], xy)


@pytest.mark.slow  # a conversion and a read back: about 1.7 s of CPU
def test_convert_keeps_jpeg_bytes_as_bytes(tmp_path):
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(12, 8, 8, 3), dtype=np.uint8)
    encoded = [tf.io.encode_jpeg(image).numpy() for image in images]
    records = [
        example(
            **{"image/encoded": bytes_feature([jpeg]), "image/class/label": int64_feature([i % 3])}
        )
        for i, jpeg in enumerate(encoded)
    ]
    path = write_records(tmp_path / "train-00000-of-00001", records)
    result = tfrecord.convert(path, tmp_path / "out", shards=2, examples_per_record=4)
    assert result.schema["image/encoded"].dtype == "bytes"
    converted = read_all(tmp_path / "out")
    assert_same_columns(converted, read_all(path))
    assert list(converted["image/encoded"]) == encoded
    decoded = tf.io.decode_jpeg(converted["image/encoded"][5]).numpy()
    assert decoded.shape == (8, 8, 3)


def tokens_file(tmp_path) -> str:
    records = [
        example(tokens=int64_feature(range(i % 4)), label=int64_feature([i])) for i in range(20)
    ]
    return write_records(tmp_path / "text.tfrecord", records)


def test_convert_keeps_a_varying_length_feature_unpacked(tmp_path):
    path = tokens_file(tmp_path)
    result = tfrecord.convert(path, tmp_path / "out", shards=2)
    assert result.schema["tokens"].shape == (None,)
    converted = read_all(tmp_path / "out")
    assert converted["tokens"] == [list(range(i % 4)) for i in range(20)]
    assert_same_columns(converted, read_all(path))


def test_convert_packs_a_varying_length_feature_with_its_row_lengths(tmp_path):
    path = tokens_file(tmp_path)
    result = tfrecord.convert(path, tmp_path / "out", examples_per_record=4)
    assert result.schema["tokens"].shape == (None,)
    record = next(tfrecord.iter_records(str(tmp_path / "out" / "data-00000-of-00001.tfrecord")))
    first = tf.train.Example.FromString(record).features.feature
    assert list(first["tokens/row_lengths"].int64_list.value) == [0, 1, 2, 3]
    assert list(first["tokens"].int64_list.value) == [0, 0, 1, 0, 1, 2]
    assert_same_columns(read_all(tmp_path / "out"), read_all(path))


def test_convert_refuses_to_write_over_its_input(tmp_path):
    path = tokens_file(tmp_path)
    with pytest.raises(ValueError, match="Expected `directory` to be another directory"):
        tfrecord.convert(path, tmp_path, overwrite=True)
