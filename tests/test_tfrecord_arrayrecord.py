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

import tfr_hooks
from _arrayrecord_reads import counted_reads, stop_counting
from _tfrecord_data import (
    example,
    float_feature,
    int64_feature,
    new_session,
    run_graph_batches,
    write_records,
)
from tfr_hooks import FunctionLoop, cli, tfrecord
from tfr_hooks.tfrecord.formats.arrayrecord import (
    ArrayRecordFiles,
    is_array_record,
    read_records,
    write_array_record,
)
from tfr_hooks.tfrecord.formats.reading import format_of

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
        pytest.param("inspect", marks=pytest.mark.slow),
        pytest.param("write", marks=pytest.mark.slow),
        pytest.param("cli-inspect", marks=pytest.mark.slow),
        pytest.param("cli-convert", marks=pytest.mark.slow),
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


@pytest.mark.slow  # array_record's reader beside ours: the Grain test covers it fast
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
    read = list(tfrecord.dataset(tmp_path / "out", 4, shuffle="global", seed=1))  # its schema.json
    names_read = np.concatenate([b["name"].numpy() for b in read])
    assert sorted(names_read.tolist()) == sorted(arrays["name"].tolist())
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


# --- the readers: ArrayRecord through the record seam, in every order ---------------------

TWIN_SIZES = (300, 1, 429)  # blocks of 128 and tails, and a file of one record


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[list[str], list[str]]:
    """The same Examples as ArrayRecord files (``group_size:1``) and as TFRecord files."""
    directory = tmp_path_factory.mktemp("twins")
    mine, theirs, start = [], [], 0
    for n, size in enumerate(TWIN_SIZES):
        ids = range(start, start + size)
        records = [example(id=int64_feature([i]), x=float_feature([i / 2])) for i in ids]
        writer = array_record_module.ArrayRecordWriter(
            str(directory / f"part-{n}.array_record"), "group_size:1"
        )
        for record in records:
            writer.write(record)
        writer.close()
        mine.append(str(directory / f"part-{n}.array_record"))
        theirs.append(write_records(directory / f"part-{n}.tfrecord", records))
        start += size
    return mine, theirs


def _read_ids(data) -> list[int]:
    return [int(i) for batch in data for i in np.asarray(batch["id"]).reshape(-1)]


def test_the_seam_recognizes_counts_and_indexes_array_record_files(twins, tmp_path):
    mine, theirs = twins
    renamed = tmp_path / "plain-name"  # told by content too
    shutil.copy(mine[0], renamed)
    for path in (mine[0], str(renamed)):
        reading = format_of(path)
        assert reading.name == "ArrayRecord" and reading.seekable("")
        assert reading.count(path, "") == TWIN_SIZES[0]
        assert reading.index(path, "").count == TWIN_SIZES[0]  # nothing built beside it
    assert format_of(theirs[0]).name == "TFRecord"
    assert not any(p.name.endswith(".tfrindex") for p in Path(mine[0]).parent.iterdir())


ORDERS = [
    pytest.param({}, id="files"),
    pytest.param({"shuffle": "global", "seed": 3}, id="global"),
    pytest.param({"shuffle": 16, "seed": 2}, id="buffer", marks=pytest.mark.slow),
    pytest.param({"in_memory": True}, id="memory", marks=pytest.mark.slow),
    pytest.param(
        {"in_memory": True, "shuffle": "global", "seed": 3},
        id="memory-global",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        {"shuffle": "global", "seed": 3, "bucket_by": "id", "bucket_boundaries": [400]},
        id="global-bucketed",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("options", ORDERS)
def test_every_order_reads_each_id_once_an_epoch_as_its_tfrecord_twin(twins, options):
    mine, theirs = twins
    total = sum(TWIN_SIZES)
    got = _read_ids(tfrecord.dataset(mine, 16, num_epochs=2, **options))
    if "bucket_by" in options:  # pools fill across the epochs' end
        assert sorted(got) == sorted([*range(total), *range(total)])
    else:
        assert sorted(got[:total]) == sorted(got[total:]) == list(range(total))
    assert got == _read_ids(tfrecord.dataset(theirs, 16, num_epochs=2, **options))


def test_the_values_are_parsed_a_batch_at_a_time_as_written(twins):
    mine, _ = twins
    batches = list(
        tfrecord.source(mine, 32, shuffle="global", seed=1, as_tuple=("id", "x")).dataset
    )
    ids = np.concatenate([i.numpy() for i, _ in batches])
    xs = np.concatenate([x.numpy() for _, x in batches])
    assert np.array_equal(xs.reshape(-1), ids.reshape(-1) / 2)


@pytest.mark.slow  # a pass of 100,000 records
def test_a_global_order_resumed_in_a_late_window_reads_none_of_the_windows_before(
    tmp_path, monkeypatch
):
    """(The exact count of what a resumed pass reads: tests/test_index_reads.py.)"""
    from tfr_hooks.tfrecord.pipelines.orders.global_order import DEFAULT_WINDOW

    n = 3 * DEFAULT_WINDOW + 500
    files = [_write(tmp_path / f"big-{f}.array_record", range(f, n, 2)) for f in (0, 1)]
    source = tfrecord.source(files, 500, shuffle="global", seed=7, num_epochs=1)
    position = source.position
    assert position is not None
    position.seek(0, 0)
    whole = _read_ids(source.dataset)
    assert sorted(whole) == list(range(n))
    at = 3 * DEFAULT_WINDOW + 100  # in the last window
    asked = counted_reads(monkeypatch)
    position.seek(0, at)
    assert _read_ids(source.dataset) == whole[at:]
    stop_counting(monkeypatch)
    assert sorted(asked) == sorted((f"big-{i % 2}.array_record", i // 2) for i in whole[at:])


class _Epochs(tfr_hooks.Hook):
    def __init__(self) -> None:
        self.examples: list[int] = []

    def epoch_end(self, epoch, logs) -> None:
        self.examples.append(self.loop.epoch_examples)


def test_read_batches_in_graph_mode_reads_each_id_once(twins):
    mine, _ = twins
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(mine, 16, shuffle="global", seed=3)
        with new_session() as session:
            got = _read_ids(run_graph_batches(session, batches.tensors, batches.initializers))
    assert sorted(got) == list(range(sum(TWIN_SIZES)))


def test_session_loop_runs_array_record_files_with_exact_epochs(twins):
    mine, _ = twins
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(mine, 16, shuffle="global", seed=3)
        total = tf.compat.v1.get_variable("total", [], tf.int64, tf.zeros_initializer())
        train = total.assign_add(tf.reduce_sum(batches.tensors["id"]))
        counter = _Epochs()
        loop = tfr_hooks.SessionLoop(
            train, hooks=[counter], data=batches, run_timeout_secs=60, handle_signals=False
        )
        loop.run(epochs=2)
    assert counter.examples == [sum(TWIN_SIZES)] * 2


def test_function_loop_runs_array_record_files_with_exact_epochs(twins):
    mine, _ = twins

    def step(batch) -> dict:
        return {"n": tf.size(batch["id"])}

    counter = _Epochs()
    source = tfrecord.source(mine, 16, shuffle="global", seed=3)
    FunctionLoop(source, step_fn=step, hooks=[counter], handle_signals=False).run(epochs=2)
    assert counter.examples == [sum(TWIN_SIZES)] * 2


def test_what_array_record_files_cannot_do_is_refused_naming_it(twins):
    mine, _ = twins
    with tf.Graph().as_default(), pytest.raises(ValueError, match="ArrayRecord files"):
        tfrecord.read_batches(mine, 8, pipeline="queue")
    with pytest.raises(ValueError, match=r"array_record checks its own chunks.*max_corrupt"):
        tfrecord.dataset(mine, 8, max_corrupt_records=2)
    with pytest.raises(ValueError, match=r"ArrayRecord files are read through tf.numpy_function"):
        tfrecord.dataset(mine, 8, service="grpc://127.0.0.1:1")


@pytest.mark.slow  # two workers on 127.0.0.1, four clusters; about a minute and a half of CPU
def test_mwms_workers_read_their_shares_as_of_tfrecord_files_and_resume_by_a_seek(tmp_path):
    """shuffle='global' under MultiWorkerMirroredStrategy: each worker its part of each
    global batch, the very parts of the same records in TFRecord files; a worker
    SIGTERMed mid-epoch, and the cluster resumed by a seek."""
    from _cluster import run_cluster

    n = 600  # 2 files of 300: each worker's share 300 records, 19 batches of 16
    for fmt in ("array_record", "tfrecord"):
        tfrecord.write({"index": np.arange(n)}, tmp_path / fmt / "train", shards=2, format=fmt)
    env = {"GLOBAL_BATCH": "16", "ORDER_READ": "global"}

    def cluster(fmt: str, out: str, extra: dict[str, str]) -> list:
        args = ["tests/_multi_worker_child.py", "order", str(tmp_path / fmt), out]
        return run_cluster(args, 2, timeout=300, env={**env, **extra})

    reference = [w.result() for w in cluster("array_record", str(tmp_path / "ref"), {})]
    twin = [w.result() for w in cluster("tfrecord", str(tmp_path / "twin"), {})]
    assert [r["seen"] for r in reference] == [t["seen"] for t in twin]
    term = {"TERM_AT_EPOCH": "1", "TERM_AT_BATCH": "5", "TERM_TASK": "1"}
    workers = cluster("array_record", str(tmp_path / "run"), term)
    before = []
    for worker in workers:
        assert worker.returncode == 42, worker.stderr[-3000:]
        line = [x for x in worker.stdout.splitlines() if x.startswith("PREEMPTED ")][-1]
        before.append(json.loads(line[len("PREEMPTED ") :]))
    step = before[0]["step"]
    after = [w.result() for w in cluster("array_record", str(tmp_path / "run"), {})]
    for ref, old, new in zip(reference, before, after, strict=True):
        assert old["seen"]["1"][:step] + new["seen"]["1"] == ref["seen"]["1"]
        assert new["seen"]["2"] == ref["seen"]["2"]
    shares = [i for r in reference for b in r["seen"]["1"] for i in b]
    assert sorted(shares) == list(range(n))


@pytest.mark.slow  # two formats planned and mixed: about 3 s of CPU
def test_a_mixture_mixes_array_record_and_tfrecord_sources(tmp_path):
    tfrecord.write({"id": np.arange(100)}, tmp_path / "a", shards=2, format="array_record")
    tfrecord.write({"id": np.arange(1000, 1100)}, tmp_path / "b", shards=2)
    sources = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    data = tfrecord.dataset(sources, 10, weights={"a": 1, "b": 1}, shuffle="global", seed=1)
    ids = _read_ids(data)
    assert sorted(i for i in ids if i < 1000) == list(range(100))  # each once
    assert sorted(i for i in ids if i >= 1000) == list(range(1000, 1100))
