"""SequenceExample files from a plain writer: schema, inspection and warnings (issue 26).

Every file here is written with ``tf.io.TFRecordWriter`` directly (no ``schema.json``):
300 ``tf.train.SequenceExample`` records with the context features ``id`` (one int64)
and ``labels`` (0 to 4 int64 values), and the feature lists ``rgb`` (per frame 8 uint8
values stored as one bytes value, YouTube-8M's quantized layout) and ``audio`` (per
frame 4 floats), 5 to 40 frames each. Also: SequenceExamples without feature lists,
with empty feature lists (0 frames), and with a feature list missing from some records,
and files whose records are no protos at all.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import (
    example,
    int64_feature,
    sequence_frames,
    sequence_values,
    write_records,
    write_sequences,
)
from tfr_hooks import cli, tfrecord
from tfr_hooks.tfrecord.schema.schema import Feature, Schema

N = 300
SCHEMA_LOGGER = "tfr_hooks.tfrecord.schema.schema"
INSPECT_LOGGER = "tfr_hooks.tfrecord.sources.scan"


_record = sequence_values
_frames = sequence_frames
_write = write_sequences


@pytest.fixture
def written(tmp_path):
    """The 300-record file and the values written into it."""
    values = [_record(i, _frames(i)) for i in range(N)]
    return _write(tmp_path / "videos.tfrecord", values), values


DECLARED = Schema(
    [
        Feature("id", "int64"),
        Feature("labels", "int64", (None,)),
        Feature("audio", "float32", (4,), sequence=True),
        Feature("rgb", "uint8", (8,), sequence=True),
    ]
)


def _parse(schema: Schema, path: str) -> dict:
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    return schema.parse_batch(tf.constant(records))


def _assert_read_as_written(batch: dict, values: list[dict]) -> None:
    assert batch["id"].numpy().tolist() == [v["id"] for v in values]
    assert batch["labels"].to_list() == [v["labels"] for v in values]
    for name, dtype in (("rgb", tf.uint8), ("audio", tf.float32)):
        ragged = batch[name]
        assert isinstance(ragged, tf.RaggedTensor) and ragged.dtype == dtype
        assert ragged.shape.as_list() == [len(values), None, 8 if name == "rgb" else 4]
        written = [v[name] if v[name] is not None else np.zeros((0, 1)) for v in values]
        assert ragged.row_lengths().numpy().tolist() == [len(w) for w in written]
        total = sum(float(w.astype(np.float64).sum()) for w in written)
        assert float(tf.reduce_sum(tf.cast(ragged.flat_values, tf.float64))) == pytest.approx(total)


# --- the schema: declaring a feature list, its JSON form ------------------------------


def test_a_feature_list_is_declared_per_frame():
    rgb = Feature("rgb", "uint8", (1024,), sequence=True)
    assert rgb.encoding == "raw"  # one bytes value per frame, as YouTube-8M stores it
    assert rgb.describe() == "feature list of uint8 of shape (1024,) per frame"
    assert Feature("audio", "float32", (4,), sequence=True).encoding == "float"
    assert Feature("token", "int64", sequence=True).encoding == "int64"
    assert DECLARED.names == ["id", "labels", "audio", "rgb"]
    assert [f.name for f in DECLARED.sequence_features] == ["audio", "rgb"]
    assert [f.name for f in DECLARED.context_features] == ["id", "labels"]
    with pytest.raises(ValueError, match=r"feature list 'rgb' \(sequence=True\) to have no def"):
        Feature("rgb", "uint8", (8,), default=0, sequence=True)
    with pytest.raises(TypeError, match=r"`sequence` of feature 'rgb' to be a bool"):
        Feature("rgb", "uint8", (8,), sequence=1)  # type: ignore[arg-type]


def test_the_json_form_is_unchanged_without_feature_lists():
    old = [
        {"name": "image", "dtype": "uint8", "shape": [2, 3], "encoding": "raw"},
        {"name": "label", "dtype": "int64", "shape": [], "encoding": "int64"},
    ]
    assert Schema.from_list(old).to_list() == old
    listed = DECLARED.to_list()
    assert listed[0] == {"name": "id", "dtype": "int64", "shape": [], "encoding": "int64"}
    assert listed[3] == {
        "name": "rgb",
        "dtype": "uint8",
        "shape": [8],
        "encoding": "raw",
        "sequence": True,
    }
    assert Schema.from_list(json.loads(json.dumps(listed))) == DECLARED


def test_replace_keeps_a_feature_list_a_feature_list():
    inferred = Schema([Feature("rgb", "bytes", (), "bytes", sequence=True)])
    replaced = inferred.replace(rgb=("uint8", (8,)))
    assert replaced["rgb"] == Feature("rgb", "uint8", (8,), sequence=True)
    assert inferred.replace(rgb={"dtype": "uint8", "shape": (8,)})["rgb"].sequence
    assert not inferred.replace(rgb={"sequence": False})["rgb"].sequence


# --- parse_batch ------------------------------------------------------------------------


def test_parse_batch_returns_each_feature_list_ragged_in_its_frames(written):
    path, values = written
    batch = _parse(DECLARED, path)
    assert list(batch) == DECLARED.names
    _assert_read_as_written(batch, values)
    first = values[0]
    np.testing.assert_array_equal(batch["rgb"][0].numpy(), first["rgb"])
    np.testing.assert_array_equal(batch["audio"][0].numpy(), first["audio"])


def test_parse_batch_in_a_tf_function_keeps_the_per_frame_shape(written):
    path, values = written
    records = tf.constant([r.numpy() for r in tf.data.TFRecordDataset(path)][:16])
    batch = tf.function(DECLARED.parse_batch)(records)
    assert batch["rgb"].shape.as_list() == [16, None, 8]
    assert batch["audio"].shape.as_list() == [16, None, 4]
    _assert_read_as_written(batch, values[:16])


def test_parse_batch_without_feature_lists_parses_examples_as_before(written):
    path, values = written
    context = DECLARED.select(["id", "labels"])
    graph = tf.function(context.parse_batch).get_concrete_function(tf.TensorSpec([None], tf.string))
    ops = {op.type for op in graph.graph.get_operations()}
    assert "ParseExampleV2" in ops and "ParseSequenceExampleV2" not in ops
    batch = _parse(context, path)
    assert batch["id"].numpy().tolist() == list(range(N))
    assert batch["labels"].to_list() == [v["labels"] for v in values]


def test_empty_and_missing_feature_lists_read_as_0_frames(tmp_path):
    values = [_record(i, [0, 3, 6][i % 3], audio=i % 4 != 1) for i in range(12)]
    path = _write(tmp_path / "some.tfrecord", values)
    schema = tfrecord.infer_schema(path)
    assert schema["audio"].sequence and schema["rgb"].sequence
    batch = _parse(schema.replace(rgb=("uint8", (8,))), path)
    _assert_read_as_written(batch, values)
    assert batch["audio"].row_lengths().numpy().tolist()[:5] == [0, 0, 6, 0, 3]


def test_a_sequence_example_without_feature_lists_reads_as_an_example(tmp_path):
    values = [_record(i, 0, audio=False, rgb=False) for i in range(10)]
    path = _write(tmp_path / "context.tfrecord", values)
    (info,) = tfrecord.inspect(path)
    assert info.record_kind == "Example" and info.feature_lists == {}
    schema = tfrecord.infer_schema(path)
    assert schema.names == ["id", "labels"] and not schema.sequence_features
    batch = next(iter(tfrecord.dataset(path, 10)))
    assert batch["id"].numpy().tolist() == list(range(10))


def test_a_feature_list_of_the_wrong_frame_size_fails_the_parse(tmp_path):
    values = [_record(i, 5) for i in range(3)]
    path = _write(tmp_path / "x.tfrecord", values)
    wrong = DECLARED.replace(audio=("float32", (3,)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"feature list 'audio'"):
        _parse(wrong, path)


# --- inspect and infer_schema -------------------------------------------------------------


def test_inspect_reports_context_features_and_feature_lists(written):
    path, _ = written
    (info,) = tfrecord.inspect(path)
    assert info.record_kind == "SequenceExample"
    assert (info.num_records, info.scanned_records, info.other_records) == (N, N, 0)
    assert list(info.features) == ["id", "labels"]
    assert info.features["labels"].length_text() == "0..4"
    assert list(info.feature_lists) == ["audio", "rgb"]
    rgb, audio = info.feature_lists["rgb"], info.feature_lists["audio"]
    assert (rgb.kind, rgb.length_text(), rgb.frame.min_bytes, rgb.frame.max_bytes) == (
        "bytes",
        "1",
        8,
        8,
    )
    assert (audio.kind, audio.length_text()) == ("float", "4")
    assert (rgb.min_frames, rgb.max_frames, rgb.records) == (5, 40, N)
    assert rgb.frames_text() == "5..40"
    assert rgb.frame.records == sum(_frames(i) for i in range(N))
    data = json.loads(json.dumps(info.to_dict()))
    assert data["record_kind"] == "SequenceExample"
    assert [f["name"] for f in data["features"]] == ["id", "labels"]
    assert data["feature_lists"][1] == {
        "name": "rgb",
        "kind": "bytes",
        "records": N,
        "min_frames": 5,
        "max_frames": 40,
        "frames": rgb.frame.records,
        "min_length": 1,
        "max_length": 1,
        "fixed_length": True,
        "min_bytes": 8,
        "max_bytes": 8,
    }


def test_infer_schema_returns_the_feature_lists(written):
    path, values = written
    schema = tfrecord.infer_schema(path)
    assert schema == Schema(
        [
            Feature("id", "int64", (), "int64"),
            Feature("labels", "int64", (None,), "int64"),
            Feature("audio", "float32", (4,), "float", sequence=True),
            Feature("rgb", "bytes", (), "bytes", sequence=True),
        ]
    )
    # the quantized bytes decoded per frame, as YouTube-8M's rgb
    decoded = schema.replace(rgb=("uint8", (8,)))
    assert decoded["rgb"] == DECLARED["rgb"]
    _assert_read_as_written(_parse(decoded, path), values)
    raw = _parse(schema, path)["rgb"]
    assert raw.shape.as_list() == [N, None] and raw.dtype == tf.string


def test_inspect_prints_the_feature_lists(written, capsys):
    path, _ = written
    assert cli.main(["inspect", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  record kind: tf.train.SequenceExample (2 context feature(s), 2 feature list(s))" in (
        lines
    )
    header = lines.index("  feature list  kind   length  bytes  frames  dtype    shape  in records")
    assert lines[header + 1 : header + 3] == [
        "  audio         float  4              5..40   float32  (4,)   300/300",
        "  rgb           bytes  1       8      5..40   bytes    ()     300/300",
    ]
    assert cli.main(["inspect", path, "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in item["feature_lists"]] == ["audio", "rgb"]
    assert item["feature_lists"][0]["max_frames"] == 40


# --- never silent ---------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["serialize_tensor", "random"])
def test_records_that_are_no_protos_are_an_error_naming_the_file(tmp_path, content):
    if content == "serialize_tensor":
        records = [tf.io.serialize_tensor(tf.fill([2, 3], float(i))).numpy() for i in range(4)]
        found = r"of a serialized TensorProto of dtype float32 and shape \[2, 3\], as tf.io.ser"
    else:
        records = [np.random.default_rng(i).bytes(64) for i in range(4)]
        found = r"that do not parse as a protocol buffer"
    path = write_records(tmp_path / "tensors.tfrecord", records)
    message = (
        r"Record 0 of file '.*tensors.tfrecord' is not a tf.train.Example or "
        r"tf.train.SequenceExample: expected a serialized proto of either; found "
        rf"{len(records[0])} bytes \(starting .*\) {found}"
    )
    with pytest.raises(tfrecord.CorruptRecordError, match=message) as info:
        tfrecord.inspect(path)
    assert (info.value.file, info.value.record) == (path, 0)
    with pytest.raises(tfrecord.CorruptRecordError, match=message):
        tfrecord.infer_schema(path)
    schema = Schema([Feature("x", "float32", (None,))])
    with pytest.raises(tfrecord.CorruptRecordError, match=message):
        schema.check_example(records[0], file=path, record=0)


def test_a_record_that_is_neither_kind_later_in_a_file_is_a_warning(tmp_path, caplog):
    tensor = tf.io.serialize_tensor(tf.constant([1.0, 2.0])).numpy()
    records = [example(label=int64_feature([i])) for i in range(5)]
    records[3] = tensor
    path = write_records(tmp_path / "mixed.tfrecord", records)
    with caplog.at_level(logging.WARNING, logger=INSPECT_LOGGER):
        (info,) = tfrecord.inspect(path)
    assert info.other_records == 1
    assert info.schema() == Schema([Feature("label", "int64", (), "int64")])
    (warning,) = [r for r in caplog.records if r.name == INSPECT_LOGGER]
    assert warning.levelno == logging.WARNING
    assert "mixed.tfrecord': 1 of the 5 records scanned are neither a tf.train.Example" in (
        warning.getMessage()
    )
    assert f"the first is record 3: {len(tensor)} bytes" in warning.getMessage()
    assert "a serialized TensorProto of dtype float32 and shape [2]" in warning.getMessage()


def test_a_feature_list_the_schema_leaves_out_is_a_warning(written, caplog):
    path, _ = written
    record = next(iter(tf.data.TFRecordDataset(path))).numpy()
    context = DECLARED.select(["id", "labels", "rgb"])
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        context.check_example(record, file=path, record=0)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == SCHEMA_LOGGER]
    assert warning.startswith(f"Record 0 of file {path!r}: it holds the feature lists ['audio']")
    assert "which the schema leaves out and the reader will not return" in warning
    caplog.clear()
    # the readers parse the first record as a tf.train.Example: the lists are still found
    parsed = tf.train.Example.FromString(record)
    assert context.warn_unread(parsed, file=path, record=0) == context.unread(record)
    assert "['audio']" in caplog.records[0].getMessage()
    caplog.clear()
    DECLARED.check_example(parsed, file=path, record=0)
    assert DECLARED.unread(record) == [] and not caplog.records


def test_a_feature_list_some_records_lack_is_a_warning_not_an_error(tmp_path, caplog):
    values = [_record(i, 4, audio=i % 2 == 1) for i in range(4)]
    path = _write(tmp_path / "some.tfrecord", values)
    record = next(iter(tf.data.TFRecordDataset(path))).numpy()
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        DECLARED.check_example(record, file=path, record=0)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == SCHEMA_LOGGER]
    assert "it lacks the feature lists ['audio'] of the schema (it holds ['rgb'])" in warning


def test_a_stored_schema_that_leaves_out_feature_lists_is_a_warning(tmp_path, caplog):
    tfrecord.write({"label": np.arange(4)}, tmp_path)
    path = str(tmp_path / "data-00000-of-00001.tfrecord")
    sequence = tf.train.SequenceExample()
    sequence.context.feature["label"].int64_list.value.append(0)
    sequence.feature_lists.feature_list["tokens"].feature.add().int64_list.value.append(7)
    write_records(path, [sequence.SerializeToString()] * 4)
    with caplog.at_level(logging.WARNING, logger=INSPECT_LOGGER):
        (info,) = tfrecord.inspect(path)
    assert list(info.feature_lists) == ["tokens"]
    messages = [r.getMessage() for r in caplog.records if r.name == INSPECT_LOGGER]
    assert messages == [
        f"File {path!r} holds the feature lists ['tokens'], which its schema.json leaves "
        "out: the reader will not return them."
    ]


def test_a_declared_context_feature_the_file_lacks_is_an_error_naming_it(written):
    path, _ = written
    record = next(iter(tf.data.TFRecordDataset(path))).numpy()
    # a context feature of fixed shape, as before
    with pytest.raises(
        tfrecord.MissingFeatureError,
        match=r"Feature 'video_id' is missing from record 0 of file '.*videos.tfrecord'",
    ) as info:
        Schema([Feature("video_id", "int64")]).check_example(record, file=path, record=0)
    assert (info.value.file, info.value.feature) == (path, "video_id")


def test_a_feature_list_a_record_lacks_is_a_warning_it_may_have_0_frames(caplog):
    plain = example(id=int64_feature([1]))
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        DECLARED.select(["id", "rgb"]).check_example(plain, file="x.rec", record=0)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == SCHEMA_LOGGER]
    assert warning == (
        "Record 0 of file 'x.rec': it lacks the feature lists ['rgb'] of the schema (it "
        "holds no feature lists); a record without them reads as 0 frames of them (if no "
        "record holds them, check their names with tfr-hooks inspect)."
    )


def test_a_feature_list_declared_as_a_context_feature_is_an_error(written):
    path, _ = written
    record = next(iter(tf.data.TFRecordDataset(path))).numpy()
    as_context = Schema([Feature("rgb", "bytes", (None,))])
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'rgb' in record 0 of file '.*' does not match the schema: expected "
        r"a context feature \(a bytes_list of any length\); found a feature list. Declare "
        r"it with sequence=True.",
    ) as info:
        as_context.check_example(record, file=path, record=0)
    assert info.value.feature == "rgb"
    as_list = Schema([Feature("id", "int64", sequence=True)])
    with pytest.raises(tfrecord.SchemaMismatchError, match=r"found a context feature"):
        as_list.check_example(record, file=path, record=0)


def test_a_wrong_frame_is_an_error_with_the_encoding_that_matches(written):
    path, _ = written
    record = next(iter(tf.data.TFRecordDataset(path))).numpy()
    raw_audio = DECLARED.replace(audio=("float32", (4,), "raw"))
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'audio' in record 0 of file '.*' does not match the schema: expected "
        r"a feature list of frames each holding one bytes value of 16 bytes \(float32 of "
        r"shape \(4,\), raw\); found in frame 0, a float_list of 4 value\(s\). The 'float' "
        r"encoding would match: Feature\('audio', 'float32', \(4,\), encoding='float', "
        r"sequence=True\).",
    ):
        raw_audio.check_example(record, file=path, record=0)


def test_explain_error_checks_feature_lists(written):
    path, _ = written
    wrong = DECLARED.replace(rgb=("uint8", (6,)))
    explained = tfrecord.explain_error(None, path, wrong)
    assert isinstance(explained, tfrecord.SchemaMismatchError)
    assert (explained.file, explained.record, explained.feature) == (path, 0, "rgb")
    assert tfrecord.explain_error(None, path, DECLARED) is None


def test_token_ids_and_frames_of_varying_length(tmp_path):
    records = []
    for n in range(6):
        sequence = tf.train.SequenceExample()
        lists = sequence.feature_lists.feature_list
        for i in range(n):
            lists["token"].feature.add().int64_list.value.append(10 * n + i)
            lists["spans"].feature.add().int64_list.value.extend(range(i % 3))
        records.append(sequence.SerializeToString())
    path = write_records(tmp_path / "text.tfrecord", records)
    schema = tfrecord.infer_schema(path)
    assert schema == Schema(
        [
            Feature("spans", "int64", (None,), "int64", sequence=True),
            Feature("token", "int64", (), "int64", sequence=True),
        ]
    )
    batch = _parse(schema, path)
    assert batch["token"].shape.as_list() == [6, None]
    assert batch["token"].to_list()[3] == [30, 31, 32]
    assert batch["spans"].ragged_rank == 2
    assert batch["spans"].to_list()[4] == [[], [0], [0, 1], []]
    assert batch["spans"].dtype == tf.int64


# --- the readers: a declared feature list is looked for past a file's first record -------

PLAN_LOGGER = "tfr_hooks.tfrecord.sources.files"


def test_the_readers_find_a_list_the_first_records_lack_and_do_not_warn(tmp_path, caplog):
    values = [_record(i, 3, audio=i >= 3) for i in range(8)]  # records 0-2 lack audio
    path = _write(tmp_path / "late.tfrecord", values)
    with caplog.at_level(logging.WARNING):
        batch = next(iter(tfrecord.dataset(path, 8, schema=DECLARED, shuffle=None)))
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tfr_hooks")] == []
    ids, lengths = batch["id"].numpy().tolist(), batch["audio"].row_lengths().numpy()
    by_id = dict(zip(ids, lengths, strict=True))
    assert by_id == {i: 0 if i < 3 else 3 for i in range(8)}


def test_a_declared_list_no_record_holds_is_an_error_naming_file_and_feature(tmp_path):
    path = _write(tmp_path / "no_audio.tfrecord", [_record(i, 2, audio=False) for i in range(5)])
    with pytest.raises(
        tfrecord.MissingFeatureError,
        match=r"Feature list 'audio' of the schema is missing from file '.*no_audio.tfrecord': "
        r"expected some records to hold it; all 5 records read lack it. Check its name",
    ) as info:
        tfrecord.dataset(path, 4, schema=DECLARED)
    assert (info.value.file, info.value.feature) == (path, "audio")
    with tf.Graph().as_default(), pytest.raises(tfrecord.MissingFeatureError, match="'audio'"):
        tfrecord.read_batches(path, 4, schema=DECLARED)


def test_a_list_one_file_lacks_and_another_holds_is_a_warning_naming_the_file(tmp_path, caplog):
    held = _write(tmp_path / "a.tfrecord", [_record(i, 2) for i in range(4)])
    lacking = _write(tmp_path / "b.tfrecord", [_record(i, 2, audio=False) for i in range(4, 8)])
    with caplog.at_level(logging.WARNING, logger=PLAN_LOGGER):
        batches = list(tfrecord.dataset([held, lacking], 8, schema=DECLARED, shuffle=None))
    (warning,) = [r.getMessage() for r in caplog.records if r.name == PLAN_LOGGER]
    assert warning == (
        f"Feature list 'audio' is missing from all 4 records of file {lacking!r}, though "
        "other files hold it: those records read as 0 frames of it."
    )
    frames = batches[0]["audio"].row_lengths().numpy().tolist()
    assert sorted(frames) == [0, 0, 0, 0, 2, 2, 2, 2]


def test_the_input_report_sizes_feature_lists_by_their_frames(written):
    from tfr_hooks.input_report import measure_files
    from tfr_hooks.tfrecord import ReadFacts
    from tfr_hooks.tfrecord.pipelines.options import PipelineKind

    path, values = written
    read = ReadFacts(kind=PipelineKind.STREAMED, files=(path,), schema=DECLARED, examples=N)
    facts = measure_files(read)
    sample = values[:256]  # the frames are sampled from the first 256 records
    frames = sum(len(v["rgb"]) for v in sample) / len(sample)
    labels = sum(len(v["labels"]) for v in sample) / len(sample)
    # id: 8 bytes; labels: 8 per value; audio: 4 floats a frame; rgb: 8 bytes a frame
    expected = N * (8 + 8 * labels + (16 + 8) * frames)
    assert facts.decoded_nbytes == pytest.approx(expected, abs=1)
