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
import numpy as np
from tfr_hooks import cli, tfrecord
from tfr_hooks.tfrecord.formats.arrayrecord import is_array_record
path, how, out = sys.argv[1:]
assert is_array_record(path)  # recognized without the package
if how == "inspect":
    try:
        tfrecord.inspect(path)
    except ImportError as error:
        print(error)
elif how == "write":
    try:
        tfrecord.write(np.arange(3), out, format="array_record")
    except ImportError as error:
        print(error)
elif how == "cli-inspect":
    sys.exit(cli.main(["inspect", path]))
else:
    np.savez(out + ".npz", x=np.arange(3))
    sys.exit(cli.main(["convert", out + ".npz", out, "--format", "array_record"]))
"""


@pytest.mark.parametrize(
    "how",
    [
        "inspect",
        pytest.param("write", marks=pytest.mark.slow),
        pytest.param("cli-inspect", marks=pytest.mark.slow),
        "cli-convert",
    ],
)
def test_without_array_record_installed_an_error_names_the_extra(files, tmp_path, how):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED, files[0], how, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    command = how.startswith("cli-")
    assert done.returncode == (1 if command else 0), done.stderr
    text = done.stderr if command else done.stdout
    assert "pip install 'tfr_hooks[arrayrecord]'" in text
    if command:
        name = how.removeprefix("cli-")
        assert f"tfr-hooks {name}: error: Reading or writing ArrayRecord" in text


# --- writing: tfrecord.write, convert, `tfr-hooks convert --format array_record` -----------


def _arrays(n: int) -> dict[str, np.ndarray]:
    return {
        "image": np.arange(n * 6, dtype=np.uint8).reshape(n, 3, 2),
        "label": np.arange(n, dtype=np.int64) % 5,
        "name": np.array([f"item {i}".encode() for i in range(n)]),
    }


def _read_back(paths: list[str], schema: tfrecord.Schema) -> dict[str, np.ndarray]:
    """Every record, in order, through array_record's ArrayRecordDataSource (what TFDS's
    ``data_source`` and Grain read with), parsed by ``schema``."""
    source = data_source.ArrayRecordDataSource(paths)
    records = source.__getitems__(list(range(len(source))))
    parsed = schema.parse_batch(tf.constant(records))
    return {name: value.numpy() for name, value in parsed.items()}


def test_write_array_record_shards_that_grain_reads_back_as_written(tmp_path):
    arrays = _arrays(23)
    result = tfrecord.write(arrays, tmp_path / "out", shards=3, format="array_record")
    assert [os.path.basename(f) for f in result.files] == [
        f"data-0000{i}-of-00003.array_record" for i in range(3)
    ]
    assert result.format == "array_record" and result.num_records == 23
    stored = json.loads(Path(result.schema_path).read_text())
    assert stored["record_format"] == "array_record"
    assert [s["num_records"] for s in stored["shards"]] == [8, 7, 8]
    back = _read_back(result.files, result.schema)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back[name], array)
    assert [len(data_source.ArrayRecordDataSource([f])) for f in result.files] == [8, 7, 8]
    assert sum(info.num_records for info in tfrecord.inspect(tmp_path / "out")) == 23
    with pytest.raises(ValueError, match="do not read ArrayRecord shards yet"):
        tfrecord.dataset(tmp_path / "out", 4)
    again = tfrecord.write(arrays, tmp_path / "out", format="array_record", overwrite=True)
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["data-00000-of-00001.array_record", "schema.json"]
    assert again.num_records == 23


def test_grain_reads_what_write_wrote(tmp_path):
    if sys.version_info < (3, 11):
        pytest.skip("Grain requires Python 3.11; the test extra installs it from there on")
    import grain.python as grain

    result = tfrecord.write(_arrays(9), tmp_path / "out", shards=2, format="array_record")
    source = grain.ArrayRecordDataSource(result.files)
    assert len(source) == 9
    parsed = result.schema.parse_batch(tf.constant([source[i] for i in (8, 0)]))
    assert parsed["name"].numpy().tolist() == [b"item 8", b"item 0"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "riegeli"}, "Received: format='riegeli'"),
        ({"format": "array_record", "compression": "gzip"}, "Received: compression='GZIP'"),
        ({"format": "array_record", "examples_per_record": 4}, "examples_per_record=4"),
    ],
)
def test_write_refuses_what_array_record_shards_cannot_hold(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tfrecord.write(_arrays(8), tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_convert_tfrecord_files_to_array_record(tmp_path, capsys):
    records = [example(id=int64_feature([i]), score=float_feature([i / 4])) for i in range(30)]
    source = write_records(tmp_path / "in.tfrecord", records)
    result = tfrecord.convert(source, tmp_path / "out", shards=2, format="array_record")
    assert all(f.endswith(".array_record") for f in result.files)
    back = _read_back(result.files, result.schema)
    assert back["id"].tolist() == list(range(30))
    np.testing.assert_allclose(back["score"], np.arange(30) / 4)
    out = tmp_path / "cli"
    assert cli.main(["convert", str(source), str(out), "--format", "array_record"]) == 0
    assert "(format: ArrayRecord)" in capsys.readouterr().out
    (info,) = tfrecord.inspect(out)
    assert info.record_format == "array_record" and info.num_records == 30
    back_to_tfrecord = tfrecord.convert(out, tmp_path / "again")  # ArrayRecord input
    assert back_to_tfrecord.format == "tfrecord"
    ids = np.concatenate([b["id"].numpy() for b in tfrecord.dataset(tmp_path / "again", 7)])
    assert ids.tolist() == list(range(30))
    with pytest.raises(ValueError, match=r"ArrayRecord input.*max_corrupt_records=2"):
        tfrecord.convert(out, tmp_path / "damaged", max_corrupt_records=2)


def test_the_tf_data_readers_refuse_array_record_files_naming_their_format(files, tmp_path):
    renamed = tmp_path / "ids-plain"  # told by content too
    shutil.copy(files[0], renamed)
    for given in (files, str(renamed)):
        with pytest.raises(tfrecord.NotTFRecordError, match="is an ArrayRecord file, which"):
            tfrecord.dataset(given, 4)
