"""Every way reading can fail raises an error that names the file, record and feature."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _tfrecord_data import (
    bytes_feature,
    example,
    float_feature,
    image_label_arrays,
    int64_feature,
    new_session,
    raw_image_records,
    run_graph_batches,
    write_records,
)
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord import Feature, Schema

RECORD_BYTES = 65  # one raw_image_records() record: 16 + 49 bytes
SCHEMA = Schema([Feature("image", "uint8", (16,)), Feature("label", "int64", (), "int64")])


def _damaged_copy(tmp_path, name, offset):
    """A copy of a 20-record file with one byte flipped at ``offset``."""
    good = write_records(tmp_path / "good.rec", raw_image_records(20))
    data = bytearray(Path(good).read_bytes())
    data[offset] ^= 0xFF
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _iterate(ds):
    return sum(1 for _ in ds)


# --- errors found while building the pipeline -----------------------------------------


def test_no_file_matches_the_glob(tmp_path):
    pattern = str(tmp_path / "nothing-*.tfrecord")
    with pytest.raises(tfrecord.NoFilesError, match=r"No files match the pattern '.*nothing-\*"):
        tfrecord.dataset(pattern, 8)
    with pytest.raises(FileNotFoundError):  # also the builtin
        tfrecord.inspect(pattern)


def test_missing_file_is_named(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    with pytest.raises(tfrecord.NoFilesError, match=r"TFRecord file '.*train.tfrecord' does not"):
        tfrecord.dataset([path], 8)


def test_missing_shard_of_a_written_dataset(tmp_path):
    result = tfrecord.write(image_label_arrays(10), tmp_path, shards=2)
    os.remove(result.files[1])
    with pytest.raises(tfrecord.NoFilesError, match=r"data-00001-of-00002.tfrecord' does not"):
        tfrecord.dataset(tmp_path, 4)


def test_unreadable_file_is_named(tmp_path, monkeypatch):
    path = write_records(tmp_path / "secret.rec", raw_image_records(3))
    real_gfile = tf.io.gfile.GFile

    def gfile(name, mode="r"):
        if os.fspath(name) == path:
            raise tf.errors.PermissionDeniedError(None, None, f"{name}; Permission denied")
        return real_gfile(name, mode)

    monkeypatch.setattr(tf.io.gfile, "GFile", gfile)
    with pytest.raises(
        tfrecord.UnreadableFileError, match=r"'.*secret.rec' cannot be read: .*Permission denied"
    ) as info:
        tfrecord.dataset(path, 8)
    assert isinstance(info.value, PermissionError)
    assert info.value.file == path


def test_empty_file(tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    with pytest.raises(tfrecord.EmptyFileError, match=r"'.*empty.tfrecord' is empty \(0 bytes\)"):
        tfrecord.dataset(str(path), 8)
    with pytest.raises(ValueError, match=r"is empty"):
        tfrecord.inspect(str(path))


def test_compressed_file_without_records(tmp_path):
    path = write_records(tmp_path / "none.tfrecord.gz", [], "GZIP")
    assert os.path.getsize(path) > 0
    with pytest.raises(tfrecord.EmptyFileError, match=r"'.*none.tfrecord.gz' holds no records"):
        tfrecord.dataset(path, 8)


@pytest.mark.parametrize(
    "content", [b"label,image\n1,0.5\n" * 20, gzip.compress(b"just some text\n" * 20, mtime=0)]
)
def test_file_that_is_not_tfrecord(tmp_path, content):
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    with pytest.raises(
        tfrecord.NotTFRecordError, match=r"File '.*data.csv' is not a TFRecord file"
    ) as info:
        tfrecord.dataset(str(path), 8)
    assert isinstance(info.value, tfrecord.CorruptRecordError)
    assert isinstance(info.value, ValueError)


def test_feature_absent_from_the_records(tmp_path):
    path = write_records(tmp_path / "a.rec", raw_image_records(5))
    schema = Schema([*SCHEMA, Feature("weight", "float32", (), "float")])
    with pytest.raises(
        tfrecord.MissingFeatureError,
        match=r"Feature 'weight' is missing from record 0 of file '.*a.rec': expected a "
        r"float_list of 1 value\(s\); found only the features \['image', 'label'\]",
    ) as info:
        tfrecord.dataset(path, 8, schema=schema)
    assert (info.value.file, info.value.record, info.value.feature) == (path, 0, "weight")


def test_kind_mismatch_in_the_records(tmp_path):
    records = [example(image=bytes_feature([b"x" * 16]), label=float_feature([1.0]))] * 3
    path = write_records(tmp_path / "f.rec", records)
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'label' in record 0 of file '.*f.rec' does not match the schema: "
        r"expected a int64_list of 1 value\(s\); found a float_list of 1 value\(s\)",
    ):
        tfrecord.dataset(path, 8, schema=SCHEMA)


def test_given_schema_disagrees_with_the_stored_one(tmp_path):
    tfrecord.write(image_label_arrays(6), tmp_path)
    wrong = Schema([Feature("image", "float32", (4, 4)), Feature("label", "int64", (), "int64")])
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'image' does not match the schema stored for '.*data-00000-of-00001"
        r".tfrecord': expected float32 of shape \(4, 4\) \(raw encoding\); found uint8 of "
        r"shape \(4, 4\) \(raw encoding\)",
    ):
        tfrecord.dataset(tmp_path, 4, schema=wrong)


def test_shard_cut_short_after_writing(tmp_path):
    result = tfrecord.write(image_label_arrays(30), tmp_path, shards=2)
    data = Path(result.files[0]).read_bytes()
    with open(result.files[0], "wb") as handle:
        handle.write(data[:-5])
    with pytest.raises(
        tfrecord.CorruptRecordError,
        match=r"'.*data-00000-of-00002.tfrecord' has changed since it was written: expected "
        rf"{len(data)} bytes .*; found {len(data) - 5} bytes",
    ):
        tfrecord.dataset(tmp_path, 4)


def test_files_with_different_compressions(tmp_path):
    a = write_records(tmp_path / "a.rec", raw_image_records(3))
    b = write_records(tmp_path / "b.rec.gz", raw_image_records(3), "GZIP")
    with pytest.raises(ValueError, match=r"same compression.*'none': '.*a.rec', 'GZIP'"):
        tfrecord.dataset([a, b], 4)
    assert (
        _iterate(tfrecord.dataset([b], 4, read_config=tfrecord.ReadConfig(compression="gzip"))) == 1
    )


# --- errors found while reading, explained by rescanning ------------------------------


def test_bad_crc_while_iterating_is_explained(tmp_path):
    path = _damaged_copy(tmp_path, "bad.rec", 5 * RECORD_BYTES + 20)
    ds = tfrecord.dataset(path, 4, schema=SCHEMA)  # the first record is fine
    with pytest.raises(tf.errors.DataLossError) as info:
        _iterate(ds)
    explained = tfrecord.explain_error(info.value, path, SCHEMA)
    assert isinstance(explained, tfrecord.CorruptRecordError)
    assert (explained.file, explained.record) == (path, 5)
    with pytest.raises(
        tfrecord.CorruptRecordError,
        match=r"'.*bad.rec' \(uncompressed\) is damaged at record 5: its checksum \(CRC\) "
        r"does not match",
    ):
        raise explained


def test_truncated_file_is_explained(tmp_path):
    good = write_records(tmp_path / "good.rec", raw_image_records(20))
    cut = tmp_path / "cut.rec"
    cut.write_bytes(Path(good).read_bytes()[: 7 * RECORD_BYTES + 30])
    with pytest.raises(tf.errors.DataLossError) as info:
        _iterate(tfrecord.dataset(str(cut), 4, schema=SCHEMA))  # reads only record 0 first
    with pytest.raises(
        tfrecord.CorruptRecordError, match=r"damaged at record 7: the file is trunc"
    ):
        raise tfrecord.explain_error(info.value, str(cut)) or info.value
    # without a schema, inferring one scans the records and finds it at once
    with pytest.raises(tfrecord.CorruptRecordError, match=r"'.*cut.rec' \(uncompressed\) is dam"):
        tfrecord.dataset(str(cut), 4)


def test_file_cut_inside_a_record_header(tmp_path):
    # TensorFlow itself stops silently here, after 6 records; the size gives it away
    good = write_records(tmp_path / "good.rec", raw_image_records(20))
    cut = tmp_path / "cut.rec"
    cut.write_bytes(Path(good).read_bytes()[: 6 * RECORD_BYTES + 5])
    with pytest.raises(
        tfrecord.CorruptRecordError,
        match=r"'.*cut.rec' \(uncompressed\) is damaged after record 5: the file is truncated"
        rf".*Expected {6 * RECORD_BYTES} bytes for its 6 complete record\(s\); found "
        rf"{6 * RECORD_BYTES + 5} bytes",
    ):
        tfrecord.inspect(str(cut))


def test_feature_missing_from_a_later_record_is_explained(tmp_path):
    records = raw_image_records(20, bad={9: example(image=bytes_feature([b"x" * 16]))})
    path = write_records(tmp_path / "m.rec", records)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        _iterate(tfrecord.dataset(path, 4, schema=SCHEMA))
    with pytest.raises(
        tfrecord.MissingFeatureError,
        match=r"Feature 'label' is missing from record 9 of file '.*m.rec'",
    ):
        raise tfrecord.explain_error(info.value, path, SCHEMA) or info.value


def test_wrong_length_in_a_later_record_is_explained(tmp_path):
    bad = example(image=bytes_feature([b"x" * 8]), label=int64_feature([1]))
    path = write_records(tmp_path / "w.rec", raw_image_records(20, bad={13: bad}))
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        _iterate(tfrecord.dataset(path, 4, schema=SCHEMA))
    with pytest.raises(
        tfrecord.SchemaMismatchError,
        match=r"Feature 'image' in record 13 of file '.*w.rec' does not match the schema: "
        r"expected one bytes value of 16 bytes \(uint8 of shape \(16,\), raw\); found one "
        r"bytes value of 8 bytes",
    ):
        raise tfrecord.explain_error(info.value, path, SCHEMA) or info.value


def test_wrong_length_never_changes_the_batch_shape(tmp_path):
    # every record has twice the bytes: a reshape to [-1, 16] would silently double the batch
    records = [
        example(image=bytes_feature([b"x" * 32]), label=int64_feature([i])) for i in range(8)
    ]
    path = write_records(tmp_path / "double.rec", records)
    with pytest.raises(tfrecord.SchemaMismatchError, match=r"found one bytes value of 32 bytes"):
        tfrecord.dataset(path, 4, schema=SCHEMA)  # caught on the first record
    parse_anyway = tf.data.TFRecordDataset(path).batch(4).map(SCHEMA.parse_batch)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"[Rr]eshape"):
        _iterate(parse_anyway)  # and the decoder itself refuses: no (8, 16) batch


def test_explain_error_ignores_errors_that_are_not_about_data(tmp_path):
    path = write_records(tmp_path / "ok.rec", raw_image_records(5))
    assert tfrecord.explain_error(ValueError("boom"), path, SCHEMA) is None
    unrelated = tf.errors.InvalidArgumentError(None, None, "Matrix size-incompatible: In[0]")
    assert tfrecord.explain_error(unrelated, path, SCHEMA) is None
    data_loss = tf.errors.DataLossError(None, None, "corrupted record at 12")
    assert tfrecord.explain_error(data_loss, path, SCHEMA) is None  # the files are fine


def test_hook_translates_graph_mode_dataset_errors(tmp_path):
    path = _damaged_copy(tmp_path, "bad.rec", 12 * RECORD_BYTES + 20)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(path, 4, schema=SCHEMA)
        with new_session() as session, pytest.raises(tf.errors.DataLossError) as info:
            run_graph_batches(session, batches.tensors, batches.initializers)
    hook = tfr_hooks.DataErrorHook.for_batches(batches)
    better = hook.translate_error(info.value)
    assert isinstance(better, tfrecord.CorruptRecordError)
    assert (better.file, better.record) == (path, 12)
    assert hook.translate_error(RuntimeError("not data")) is None


def test_hook_translates_graph_mode_queue_errors_without_hanging(tmp_path):
    good = write_records(tmp_path / "good.rec", raw_image_records(20))
    bad = _damaged_copy(tmp_path, "bad.rec", 12 * RECORD_BYTES + 20)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            [good, bad],
            4,
            schema=SCHEMA,
            pipeline="queue",
            num_epochs=1,
            shuffle=16,
            read_config=tfrecord.ReadConfig(num_parallel_reads=2),
        )
        with new_session() as session, pytest.raises(tf.errors.DataLossError) as info:
            run_graph_batches(session, batches.tensors)
    better = tfr_hooks.DataErrorHook.for_batches(batches).translate_error(info.value)
    assert isinstance(better, tfrecord.CorruptRecordError)
    assert (better.file, better.record) == (bad, 12)


@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_session_loop_raises_the_clear_error(tmp_path, pipeline):
    path = _damaged_copy(tmp_path, "bad.rec", 12 * RECORD_BYTES + 20)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(path, 4, schema=SCHEMA, pipeline=pipeline, num_epochs=1)
        total = tf.reduce_sum(tf.cast(batches.tensors["image"], tf.float32))
        step = tf.compat.v1.train.get_or_create_global_step()
        loop = tfr_hooks.SessionLoop(
            tf.compat.v1.assign_add(step, 1),
            fetches={"total": total},
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        with pytest.raises(
            tfrecord.CorruptRecordError, match=r"'.*bad.rec' \(uncompressed\) is damaged at rec"
        ) as info:
            loop.run(epochs=1)
    assert info.value.record == 12
    assert isinstance(info.value.__cause__, tf.errors.DataLossError)


def test_errors_keep_their_attributes_when_pickled():
    error = tfrecord.MissingFeatureError("msg", file="f.rec", record=3, feature="x")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is tfrecord.MissingFeatureError
    assert (str(back), back.file, back.record, back.feature) == ("msg", "f.rec", 3, "x")


def test_error_hierarchy_matches_the_builtins():
    assert issubclass(tfrecord.NoFilesError, FileNotFoundError)
    assert issubclass(tfrecord.UnreadableFileError, PermissionError)
    for cls in (
        tfrecord.EmptyFileError,
        tfrecord.CorruptRecordError,
        tfrecord.NotTFRecordError,
        tfrecord.SchemaMismatchError,
        tfrecord.MissingFeatureError,
    ):
        assert issubclass(cls, ValueError)
        assert issubclass(cls, tfrecord.TFRecordError)
    assert np.all([issubclass(c, tfrecord.TFRecordError) for c in (tfrecord.NoFilesError,)])
