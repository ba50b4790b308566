"""Packed shards: N examples per record, unpacked transparently, shuffled block-wise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import cli, tfrecord

v1 = tf.compat.v1
N = 103  # 3 shards of 34/35 examples: with 8 per record, each shard ends in a short block


def _all_dtypes(n: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    arrays: dict[str, np.ndarray] = {"index": np.arange(n, dtype=np.int64)}
    for dtype in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
        info = np.iinfo(dtype)
        arrays[dtype] = rng.integers(info.min, info.max, size=(n, 2, 3), dtype=dtype, endpoint=True)
        arrays[f"{dtype}_scalar"] = rng.integers(info.min, info.max, size=n, dtype=dtype)
    for dtype in ("float16", "float32", "float64"):
        arrays[dtype] = rng.normal(size=(n, 4)).astype(dtype)
        arrays[f"{dtype}_scalar"] = rng.normal(size=n).astype(dtype)
    arrays["bool"] = rng.random((n, 5)) > 0.5
    arrays["bool_scalar"] = rng.random(n) > 0.5
    arrays["text"] = np.array([f"example {i}" * (i % 4) for i in range(n)])
    arrays["blobs"] = np.array([[bytes([i % 256]) * (i % 3), b"x"] for i in range(n)], dtype=object)
    return arrays


def _check_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        if value.dtype.kind in "UO":
            expected = np.vectorize(
                lambda v: v.encode() if isinstance(v, str) else v, otypes=[object]
            )(value)
            assert got[name].tolist() == expected.tolist(), name
        else:
            assert got[name].dtype == value.dtype, name
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def _collect(ds: tf.data.Dataset) -> dict[str, np.ndarray]:
    batches = list(ds)
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["", "gzip", "zlib"])
def test_round_trip_every_dtype_and_shape_with_short_blocks(tmp_path, compression):
    arrays = _all_dtypes()
    result = tfrecord.write(
        arrays, tmp_path, shards=3, compression=compression, examples_per_record=8
    )
    sidecar = json.loads(Path(result.schema_path).read_text())
    assert sidecar["examples_per_record"] == 8 and sidecar["num_examples"] == N
    assert [s["num_examples"] for s in sidecar["shards"]] == [34, 35, 34]
    assert [s["num_records"] for s in sidecar["shards"]] == [5, 5, 5]  # 4 full + 1 short each
    # streamed, one file at a time in stored order
    _check_equal(
        _collect(
            tfrecord.dataset(tmp_path, 10, read_config=tfrecord.ReadConfig(num_parallel_reads=1))
        ),
        arrays,
    )
    # loaded into memory
    _check_equal(_collect(tfrecord.dataset(tmp_path, 10, in_memory=True)), arrays)
    # graph mode, tf.data pipeline
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            tmp_path, 10, pipeline="dataset", read_config=tfrecord.ReadConfig(num_parallel_reads=1)
        )
        with v1.Session() as session:
            session.run(batches.initializers)
            got = []
            while True:
                try:
                    got.append(session.run(batches.tensors))
                except tf.errors.OutOfRangeError:
                    break
    _check_equal({k: np.concatenate([g[k] for g in got]) for k in got[0]}, arrays)


def test_other_readers_see_plain_examples(tmp_path):
    arrays = {"x": np.arange(30, dtype=np.float32).reshape(10, 3), "y": np.arange(10)}
    result = tfrecord.write(arrays, tmp_path, examples_per_record=4)
    records = [
        tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(result.files)
    ]
    assert len(records) == 3
    last = records[-1].features.feature  # the short block: examples 8 and 9
    assert list(last["y"].int64_list.value) == [8, 9]
    assert np.frombuffer(last["x"].bytes_list.value[0], "<f4").tolist() == list(range(24, 30))


def test_batches_and_cardinality_are_exact(tmp_path):
    tfrecord.write({"i": np.arange(1000)}, tmp_path, shards=3, examples_per_record=64)
    ds = tfrecord.dataset(tmp_path, 128, shuffle=256, seed=0)
    assert [int(b["i"].shape[0]) for b in ds] == [128] * 7 + [104]
    assert int(ds.cardinality()) == 8
    three = tfrecord.dataset(tmp_path, 128, num_epochs=3, drop_remainder=True)
    assert int(three.cardinality()) == 23 == sum(1 for _ in three)


@pytest.mark.slow  # reads several shuffled epochs twice; about 1 s of CPU
def test_shuffle_by_file_block_and_window_each_epoch_reproducibly(tmp_path):
    tfrecord.write({"i": np.arange(1000)}, tmp_path, shards=4, examples_per_record=16)

    def orders(seed: int) -> list[np.ndarray]:
        ds = tfrecord.dataset(tmp_path, 100, shuffle=200, seed=seed)
        return [np.concatenate([b["i"].numpy() for b in ds]) for _ in range(3)]

    first = orders(3)
    for order in first:
        assert sorted(order.tolist()) == list(range(1000))
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    # examples of one block no longer sit together (the window's permutation)
    assert np.mean(np.abs(np.diff(first[0])) == 1) < 0.2
    assert all(np.array_equal(a, b) for a, b in zip(first, orders(3), strict=True))
    assert not np.array_equal(first[0], orders(4)[0])


def test_graph_dataset_pipeline_reshuffles_each_initialization(tmp_path):
    tfrecord.write({"i": np.arange(500)}, tmp_path, shards=2, examples_per_record=16)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tmp_path, 50, pipeline="dataset", seed=1, shuffle=64)
        orders = []
        with v1.Session() as session:
            for _ in range(2):
                session.run(batches.initializers)
                got = []
                while True:
                    try:
                        got.append(session.run(batches.tensors["i"]))
                    except tf.errors.OutOfRangeError:
                        break
                orders.append(np.concatenate(got))
    assert sorted(orders[0].tolist()) == sorted(orders[1].tolist()) == list(range(500))
    assert not np.array_equal(orders[0], orders[1])


def test_queue_pipeline_refuses_packed_shards(tmp_path):
    tfrecord.write({"i": np.arange(50)}, tmp_path, examples_per_record=8)
    with (
        tf.Graph().as_default(),
        pytest.raises(ValueError, match=r"Expected `pipeline` to be 'dataset' for packed shards"),
    ):
        tfrecord.read_batches(tmp_path, 8, pipeline="queue")


def test_write_refuses_bad_packing(tmp_path):
    with pytest.raises(
        ValueError, match=r"Expected `examples_per_record` to be a positive integer"
    ):
        tfrecord.write({"i": np.arange(5)}, tmp_path, examples_per_record=0)
    with pytest.raises(ValueError, match=r"non-empty shape.*feature 'e' of shape \(0,\)"):
        tfrecord.write({"e": np.zeros((5, 0))}, tmp_path / "e", examples_per_record=2)


def test_truncated_packed_shard_is_named(tmp_path):
    result = tfrecord.write(
        {"x": np.zeros((100, 8), np.float32)}, tmp_path, shards=2, examples_per_record=10
    )
    data = Path(result.files[1]).read_bytes()
    Path(result.files[1]).write_bytes(data[:-7])
    for in_memory in (False, True):
        with pytest.raises(
            tfrecord.CorruptRecordError,
            match=r"'.*data-00001-of-00002.tfrecord' has changed since it was written",
        ):
            tfrecord.dataset(tmp_path, 8, in_memory=in_memory)


def _corrupt_second_block(tmp_path: Path) -> str:
    result = tfrecord.write(
        {"x": np.zeros((100, 8), np.float32)}, tmp_path, shards=2, examples_per_record=10
    )
    data = bytearray(Path(result.files[0]).read_bytes())
    record = len(data) // 5  # five records of the same size
    data[record + 40] ^= 0xFF  # inside record 1's data: its checksum no longer matches
    Path(result.files[0]).write_bytes(bytes(data))
    return result.files[0]


def test_corrupt_packed_shard_is_named_when_loading_into_memory(tmp_path):
    path = _corrupt_second_block(tmp_path)
    with pytest.raises(
        tfrecord.CorruptRecordError, match=r"'.*data-00000-of-00002.tfrecord' \(uncom"
    ) as info:
        tfrecord.dataset(tmp_path, 8, in_memory=True)
    assert (info.value.file, info.value.record) == (path, 1)


def test_corrupt_packed_shard_is_named_by_the_session_loop(tmp_path):
    import tfr_hooks

    path = _corrupt_second_block(tmp_path)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tmp_path, 8, pipeline="dataset")
        step = v1.train.get_or_create_global_step()
        loop = tfr_hooks.SessionLoop(
            v1.assign_add(step, 1),
            fetches={"total": tf.reduce_sum(batches.tensors["x"])},
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        with pytest.raises(tfrecord.CorruptRecordError, match=r"is damaged at record 1") as info:
            loop.run(epochs=1)
    assert info.value.file == path


def test_block_that_breaks_the_layout_is_named(tmp_path):
    tfrecord.write(
        {"x": np.zeros((20, 2), np.float32), "y": np.arange(20)}, tmp_path, examples_per_record=10
    )
    path = tfrecord.resolve_files(tmp_path)[0]
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    bad = tf.train.Example.FromString(records[1])
    del bad.features.feature["y"].int64_list.value[-1]  # 9 labels for 10 examples
    size = Path(path).stat().st_size
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(records[0])
        writer.write(bad.SerializeToString())
    sidecar = Path(tmp_path, "schema.json")
    text = json.loads(sidecar.read_text())
    text["shards"][0]["bytes"] = Path(path).stat().st_size  # as if written so
    sidecar.write_text(json.dumps(text))
    assert Path(path).stat().st_size != size
    match = r"Feature 'y' in packed record 1 of file '.*' does not match the schema: expected"
    with pytest.raises(tfrecord.SchemaMismatchError, match=match):
        tfrecord.dataset(tmp_path, 4, in_memory=True)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        sum(1 for _ in tfrecord.dataset(tmp_path, 4))
    with pytest.raises(tfrecord.SchemaMismatchError, match=match):
        raise tfrecord.explain_error(info.value, tmp_path) or info.value


def test_cli_converts_and_inspects_packed_shards(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.zeros((50, 3), np.float32), y=np.arange(50))
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                "convert",
                str(tmp_path / "in.npz"),
                str(out),
                "--examples-per-record",
                "16",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "Packed: 16 examples per record" in capsys.readouterr().out
    assert json.loads((out / "schema.json").read_text())["examples_per_record"] == 16
    assert cli.main(["inspect", str(out)]) == 0
    assert "packed: 16 examples per record (50 examples)" in capsys.readouterr().out
    assert cli.main(["inspect", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["examples_per_record"] == 16
