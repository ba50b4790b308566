"""ArrayRecord files (issue 55's core): recognized, read a batch by index, written.

The files are written by ``array_record``'s own ``ArrayRecordWriter`` with ``group_size:1``,
as TensorFlow Datasets and Grain write them, and hold serialized ``tf.train.Example``s.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from array_record.python import array_record_data_source as data_source
from array_record.python import array_record_module

from _tfrecord_data import example, float_feature, int64_feature, write_records
from tfr_hooks import cli, tfrecord
from tfr_hooks.tfrecord.formats.arrayrecord import (
    ArrayRecordFiles,
    is_array_record,
    read_records,
    write_array_record,
)

SIZES = (70, 1, 129)  # a file of one record among them


def _write(path: Path, ids: range) -> str:
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for i in ids:
        writer.write(example(id=int64_feature([i])))
    writer.close()
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    directory = tmp_path_factory.mktemp("arrayrecord")
    paths, start = [], 0
    for n, size in enumerate(SIZES):
        name = f"ids-train.array_record-{n:05d}-of-{len(SIZES):05d}"
        paths.append(_write(directory / name, range(start, start + size)))
        start += size
    return paths


def _ids(records) -> list[int]:
    return [
        tf.train.Example.FromString(r).features.feature["id"].int64_list.value[0] for r in records
    ]


def test_records_are_read_by_global_index_across_files_in_any_order(files):
    read = ArrayRecordFiles(files)
    assert len(read) == sum(SIZES)
    assert read.counts == list(SIZES)
    keys = np.random.default_rng(0).permutation(len(read))
    assert _ids(read.read(keys)) == keys.tolist()
    assert _ids(read.read([70])) == [70]  # the file of one record
    assert read.read([]).shape == (0,)


def test_an_index_out_of_range_names_it_and_the_range(files):
    read = ArrayRecordFiles(files)
    with pytest.raises(IndexError, match=r"\[0, 200\).*Received: index=200"):
        read.read([3, 200])
    with pytest.raises(IndexError, match="Received: index=-1"):
        read.read([-1])


def test_a_batch_of_indices_is_one_tensor_of_records_in_tf_data(files):
    read = ArrayRecordFiles(files)
    keys = np.random.default_rng(1).permutation(len(read))
    batches = tf.data.Dataset.from_tensor_slices(keys.reshape(-1, 8)).map(
        lambda k: tf.io.parse_example(
            read_records(read, k), {"id": tf.io.FixedLenFeature([], tf.int64)}
        )["id"],
        num_parallel_calls=2,
    )
    assert np.concatenate([b.numpy() for b in batches]).tolist() == keys.tolist()


def test_the_reader_pickles_without_its_open_readers(files):
    read = ArrayRecordFiles(files)
    read.read([0, 150])
    again = pickle.loads(pickle.dumps(read))
    assert _ids(again.read([150, 0])) == [150, 0]


def test_files_are_recognized_by_name_or_content(files, tmp_path):
    assert is_array_record(files[0])
    renamed = tmp_path / "plain-name"
    shutil.copy(files[0], renamed)
    assert is_array_record(renamed)
    tfrecord_file = write_records(tmp_path / "x.tfrecord", [example(id=int64_feature([0]))])
    assert not is_array_record(tfrecord_file)
    assert not is_array_record(tmp_path / "missing")


def test_what_the_package_writes_is_read_by_array_records_own_data_source(tmp_path):
    path = tmp_path / "written.array_record"
    records = [example(id=int64_feature([i])) for i in range(40)]
    assert write_array_record(path, records) == 40
    source = data_source.ArrayRecordDataSource([str(path)])
    assert len(source) == 40
    assert _ids(source.__getitems__([39, 0, 17])) == [39, 0, 17]


# --- inspect and `tfr-hooks inspect` ------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def _mixed(path: Path, n: int) -> str:
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for i in range(n):
        tokens = int64_feature(list(range(i % 3 + 1)))
        writer.write(example(id=int64_feature([i]), score=float_feature([i / 2]), tokens=tokens))
    writer.close()
    return str(path)


def test_inspect_reads_an_array_record_file_by_name_or_content(tmp_path):
    named = _mixed(tmp_path / "scores.array_record", 7)
    plain = tmp_path / "scores-plain"
    shutil.copy(named, plain)
    for path in (named, str(plain)):
        (info,) = tfrecord.inspect(path)
        assert info.record_format == "array_record" and info.num_records == 7
        assert info.features["id"].kind == "int64" and info.features["score"].kind == "float"
        assert not info.features["tokens"].fixed_length
        assert info.to_dict()["record_format"] == "array_record"
    schema = tfrecord.infer_schema(named)
    assert schema["id"].shape == () and schema["tokens"].varying


def test_inspect_reads_every_record_of_a_file_past_one_batch(tmp_path):
    path = _mixed(tmp_path / "many.array_record", 2500)  # more than one read of 1,024
    (info,) = tfrecord.inspect(path, max_records=10)
    assert info.num_records == 2500 and info.scanned_records == 10


def test_the_command_inspects_array_record_files_beside_tfrecord_ones(tmp_path, capsys):
    _mixed(tmp_path / "a.array_record", 4)
    write_records(tmp_path / "b.tfrecord", [example(id=int64_feature([0]))])
    assert cli.main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "records: 4   format: ArrayRecord" in out
    assert "records: 1   compression: none" in out
    assert "Total: 5 records in 2 readable file(s) of 2" in out
    assert cli.main(["inspect", "--json", str(tmp_path / "a.array_record")]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["record_format"] == "array_record" and item["num_records"] == 4


def test_an_empty_array_record_file_is_an_error_naming_its_format(tmp_path):
    empty = tmp_path / "empty.array_record"
    write_array_record(empty, [])
    with pytest.raises(tfrecord.EmptyFileError, match=r"ArrayRecord file .* holds no records"):
        tfrecord.inspect(str(empty))


_BLOCKED = """
import sys
sys.modules["array_record"] = None  # as if the extra were not installed
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.formats.arrayrecord import is_array_record
assert is_array_record(sys.argv[1])  # recognized without the package
if sys.argv[2] == "api":
    try:
        tfrecord.inspect(sys.argv[1])
    except ImportError as error:
        print(error)
else:
    from tfr_hooks import cli
    sys.exit(cli.main(["inspect", sys.argv[1]]))
"""


@pytest.mark.parametrize("how", ["api", "cli"])
def test_without_array_record_installed_an_error_names_the_extra(files, how):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED, files[0], how],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == (0 if how == "api" else 1), done.stderr
    text = done.stdout if how == "api" else done.stderr
    assert "pip install 'tfr_hooks[arrayrecord]'" in text
    if how == "cli":
        assert "tfr-hooks inspect: error: Reading or writing ArrayRecord" in text
