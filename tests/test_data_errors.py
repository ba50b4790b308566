"""Corrupt and bad data through both graph-mode pipelines (issue 7, item 1), and a fuzz test.

A good shard is followed by a damaged one; training runs a few epochs of 3 steps with an
``EpochCheckpoint`` before the reader reaches the damage. The run must end with an error
of :mod:`tfr_hooks.tfrecord` that names the damaged file (and the feature, where one is
at fault), with every thread joined and the last checkpoint intact and loadable.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_hooks
from _faults import LinearModel
from conftest import write_records
from helpers import FaultRecorder as Recorder
from tfr_hooks import tfrecord
from tfr_hooks.graph.checkpoint import resume_position_of

v1 = tf.compat.v1
pytestmark = pytest.mark.timeout(120)

BAD_AT = 25  # index of the damaged record in the bad shard
STEPS = 3  # steps per epoch, batches of 10


def _example(i: int, *, x_len: int = 4, drop: str | None = None) -> bytes:
    feature = {
        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * x_len)),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
    }
    if drop is not None:
        del feature[drop]
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _record_offsets(data: bytes) -> list[tuple[int, int]]:
    """(offset of the payload, its length) of each record of an uncompressed TFRecord file."""
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        offsets.append((pos + 12, length))
        pos += 12 + length + 4
    return offsets


def _bad_shard(path: Path, defect: str, n: int = 40) -> Path:
    records = [_example(1000 + i) for i in range(n)]
    if defect == "missing_feature":
        records[BAD_AT] = _example(1000 + BAD_AT, drop="x")
    elif defect == "wrong_length":
        records[BAD_AT] = _example(1000 + BAD_AT, x_len=3)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    data = bytearray(path.read_bytes())
    start, length = _record_offsets(bytes(data))[BAD_AT]
    if defect == "flipped_byte":
        data[start + length // 2] ^= 0xFF
    elif defect == "truncated":
        data = data[: start + length // 2]  # cut inside a record, as an interrupted copy does
    elif defect == "truncated_header":
        data = data[: start - 7]  # cut inside the length header of a record
    path.write_bytes(bytes(data))
    return path


QUEUE_SLOW = {"flipped_byte", "wrong_length"}
EXPECTED = {
    "truncated": (tfrecord.CorruptRecordError, None),
    "flipped_byte": (tfrecord.CorruptRecordError, None),
    "missing_feature": (tfrecord.MissingFeatureError, "x"),
    "wrong_length": (tfrecord.SchemaMismatchError, "x"),
}


# every defect through the dataset; through the queue, a damaged record and a schema error
# (the other two, about 0.2 s of CPU each, run with the slow tests)
@pytest.mark.parametrize(
    ("defect", "pipeline"),
    [
        *[pytest.param(d, "dataset", id=f"{d}-dataset") for d in sorted(EXPECTED)],
        *[
            pytest.param(d, "queue", id=f"{d}-queue", marks=[pytest.mark.slow] * (d in QUEUE_SLOW))
            for d in sorted(EXPECTED)
        ],
    ],
)
def test_bad_record_stops_the_run_naming_the_file(graph, tmp_path, defect, pipeline):
    good = write_records(tmp_path / "a_good.tfrecord", 100)
    bad = _bad_shard(tmp_path / "b_bad.tfrecord", defect)
    logdir = tmp_path / "ckpt"
    before = threading.active_count()
    options: dict[str, Any] = dict(pipeline=pipeline, as_tuple=("x", "y"))
    options.update(read_config=tfrecord.ReadConfig(num_parallel_reads=1))
    if pipeline == "queue":  # a small endless queue: the reader is a few batches ahead
        config = tfrecord.ReadConfig(num_parallel_reads=1, capacity=20)
        options.update(read_config=config, num_epochs=None)
    schema = tfrecord.infer_schema(str(good))  # as stored; inferring would scan the bad file
    batches = tfrecord.read_batches([good, bad], 10, schema=schema, **options)
    x, y = batches.tensors
    model = LinearModel(x, y)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        model.train_op,
        {"loss": model.loss},
        hooks=[tfr_hooks.EpochCheckpoint(logdir), rec],
        steps_per_epoch=STEPS,
        data=batches,
        run_timeout_secs=30,  # a hang fails the test instead of blocking it
    )
    error_type, feature = EXPECTED[defect]
    with pytest.raises(error_type) as info:
        loop.run(epochs=50)
    error = info.value
    assert error.file == str(bad) and str(bad) in str(error)
    assert error.feature == feature
    if feature is not None:
        assert repr(feature) in str(error)
    assert rec.events[-1] == "end"
    assert threading.active_count() == before  # queue threads joined

    # the last good checkpoint is intact and loadable
    latest = tf.train.latest_checkpoint(str(logdir))
    assert latest is not None
    epochs_done, _, _ = resume_position_of(latest)
    assert epochs_done >= 1
    reader = tf.train.load_checkpoint(latest)
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    assert values["global_step"] == epochs_done * STEPS
    assert np.all(np.isfinite(values["w"]))


@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_a_shard_cut_inside_a_record_header_is_refused_before_training(graph, tmp_path, pipeline):
    # TensorFlow's readers would stop silently at the partial header and train on fewer
    # records; the pipeline checks the framing of files it has no stored sizes for
    good = write_records(tmp_path / "a_good.tfrecord", 20)
    bad = _bad_shard(tmp_path / "b_bad.tfrecord", "truncated_header")
    schema = tfrecord.infer_schema(str(good))
    with pytest.raises(tfrecord.CorruptRecordError, match=r"is damaged after record") as info:
        tfrecord.read_batches([good, bad], 10, schema=schema, pipeline=pipeline)
    assert info.value.file == str(bad) and info.value.record == BAD_AT
    with pytest.raises(tfrecord.CorruptRecordError, match=r"b_bad.tfrecord"):
        tfrecord.dataset([good, bad], 10, schema=schema)


def test_a_shard_cut_inside_a_record_header_is_found_by_explain_error(tmp_path):
    # TensorFlow's readers stop silently at a partial record header (both pipelines then
    # train on fewer records without an error): the file check still names the file.
    good = write_records(tmp_path / "a_good.tfrecord", 20)
    bad = _bad_shard(tmp_path / "b_bad.tfrecord", "truncated_header")
    found = tfrecord.explain_error(None, [good, bad])
    assert isinstance(found, tfrecord.CorruptRecordError)
    assert found.file == str(bad) and found.record == BAD_AT
    assert "truncated" in str(found)


@pytest.mark.parametrize(
    ("content", "error_type"),
    [(b"", tfrecord.EmptyFileError), (b"name,value\n1,2\n" * 8, tfrecord.NotTFRecordError)],
    ids=["empty_file", "not_tfrecord"],
)
@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_empty_and_foreign_files_are_refused_before_training(
    graph, tmp_path, content, error_type, pipeline
):
    good = write_records(tmp_path / "a_good.tfrecord", 20)
    bad = tmp_path / "b_bad.tfrecord"
    bad.write_bytes(content)
    before = threading.active_count()
    with pytest.raises(error_type, match=str(bad)) as info:
        tfrecord.read_batches([good, bad], 10, pipeline=pipeline, num_epochs=1)
    assert info.value.file == str(bad)
    assert threading.active_count() == before
    assert not v1.get_collection(v1.GraphKeys.QUEUE_RUNNERS)  # nothing half-built


# -- fuzz ------------------------------------------------------------------------------

_VALID: bytes | None = None


def _valid_file() -> bytes:
    global _VALID
    if _VALID is None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "v.tfrecord"
            write_records(path, 6)
            _VALID = path.read_bytes()
    return _VALID


@st.composite
def _files(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))  # random bytes
    data = bytearray(_valid_file())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "zero"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        else:
            data[pos : pos + 8] = bytes(min(8, len(data) - pos))
    return bytes(data)


@pytest.mark.slow
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(content=_files())
def test_fuzz_reader_raises_only_documented_errors(tmp_path, content):
    path = tmp_path / "fuzz.tfrecord"
    path.write_bytes(content)
    schema = tfrecord.infer_schema(str(_write_valid(tmp_path)))
    try:
        ds = tfrecord.dataset(
            str(path), batch_size=4, schema=schema, read_config=tfrecord.ReadConfig(compression="")
        )
        for _ in ds:
            pass
    except tfrecord.TFRecordError as error:
        assert error.file == str(path)
    except tf.errors.OpError as error:
        explained = tfrecord.explain_error(error, str(path), schema, compression="")
        assert isinstance(explained, tfrecord.TFRecordError), f"unexplained: {error!r}"
        assert explained.file == str(path)


def _write_valid(tmp_path: Path) -> Path:
    path = tmp_path / "valid.tfrecord"
    if not path.exists():
        path.write_bytes(_valid_file())
    return path


def test_fuzz_harness_sees_a_valid_file_as_valid(tmp_path):
    path = _write_valid(tmp_path)
    schema = tfrecord.infer_schema(str(path))
    batches = list(tfrecord.dataset(str(path), batch_size=4, schema=schema))
    assert sum(int(b["index"].shape[0]) for b in batches) == 6
    assert os.path.getsize(path) == len(_valid_file())
