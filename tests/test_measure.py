"""``tfr-hooks measure``: the pipelines a user's own files allow, timed here, and a choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _tfrecord_data import bytes_feature, example, float_feature, int64_feature, write_records
from tfr_hooks import cli, tfrecord
from tfr_hooks.measure import measure


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 16)).astype(np.float32)
    directory = tmp_path_factory.mktemp("written") / "data"
    tfrecord.write({"x": x, "y": np.arange(600)}, directory, shards=2)
    return directory


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_measure_json_times_both_pipelines_and_holds_fitting_data_in_memory(
    written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(["measure", str(written), "--batch-size", "32", "--batches", "20", "--json"], capsys)
    result = json.loads(out)
    assert result["num_examples"] == 600 and len(result["files"]) == 2
    assert result["decoded_bytes"] == 600 * (16 * 4 + 8)  # float32 x 16, int64 y
    assert result["fits"] is True
    rates = {r["pipeline"]: r for r in result["rates"]}
    assert list(rates) == ["streamed", "packed", "in_memory"]
    assert all(r["examples_per_sec"] > 0 and r["batches"] == 20 for r in rates.values())
    # the packed rate is timed, on the files' first examples written as packed shards
    assert rates["packed"]["note"].startswith("estimate: the first 600 examples converted")
    assert result["recommendation"].startswith("Hold the data in memory")
    assert "in_memory=True" in result["recommendation"]


def test_measure_table_without_memory_recommends_packed_shards_for_small_records(
    written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 50 batches a round: enough to time the two pipelines apart on a busy machine
    argv = ["measure", str(written), "--batch-size", "32", "--batches", "50"]
    lines = run([*argv, "--memory-budget", "1000"], capsys).splitlines()
    assert lines[0].startswith("600 examples in 2 file(s)")
    assert "does not fit the memory budget of 1000 bytes" in lines[1]
    table = {line.split()[0]: line for line in lines[3:6]}
    assert "not measured: the decoded data does not fit" in table["in_memory"]
    assert table["streamed"].split()[1] != "-"  # a rate
    assert table["packed"].split()[1] != "-" and "estimate" in table["packed"]
    # 16 floats a record: parsing 64 a record reads several times faster (5-8x), timed here
    assert lines[-1].startswith("Recommendation: Write packed shards")
    assert "faster than the files streamed (timed here on a sample)" in lines[-1]
    assert "--examples-per-record 64" in lines[-1]


def test_measure_reads_a_foreign_file(tmp_path: Path) -> None:
    # written by a plain TFRecordWriter: no schema.json, JPEG bytes as TensorFlow's image
    # pipelines store them, and a feature of varying length
    import tensorflow as tf

    rng = np.random.default_rng(0)
    records = [
        example(
            **{
                "image/encoded": bytes_feature(
                    [tf.io.encode_jpeg(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).numpy()]
                ),
                "image/object/score": float_feature([0.5] * (1 + i % 3)),
                "image/class/label": int64_feature([i % 2]),
            }
        )
        for i in range(200)
    ]
    path = write_records(tmp_path / "foreign.tfrecord", records)
    result = measure(str(path), 16, max_batches=5, memory_budget=10**9)
    assert result.num_examples == 200 and result.examples_per_record == 1
    streamed, packed, in_memory = result.rates
    assert streamed.pipeline == "streamed" and streamed.examples_per_sec
    # the JPEG bytes and the varying scores pack (values beside row lengths): timed too
    assert packed.pipeline == "packed" and packed.examples_per_sec
    assert packed.note.startswith("estimate: the first 96 examples converted")
    # the varying scores are held as values and row offsets: measured in memory too
    assert in_memory.pipeline == "in_memory" and in_memory.examples_per_sec
    assert result.decoded_bytes >= 200 * (8 + 4)  # the label and at least a score each
    assert result.recommendation.startswith("Hold the data in memory")
    assert list(tmp_path.iterdir()) == [tmp_path / "foreign.tfrecord"]  # nothing left


@pytest.mark.slow
def test_measure_runs_on_the_benchmarks_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the data bench/run.py writes at run time: one example a record, and packed shards
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_data

    bench_data.write_dataset(tmp_path, 512)
    argv = ["--batch-size", "128", "--batches", "5", "--json"]
    records = json.loads(run(["measure", str(tmp_path / "records"), *argv], capsys))
    assert records["num_examples"] == 512 and records["examples_per_record"] == 1
    assert records["decoded_bytes"] == 512 * (784 + 8)  # uint8 x 784, int64 label
    assert all(r["examples_per_sec"] > 0 for r in records["rates"])
    assert records["recommendation"].startswith("Hold the data in memory")
    packed = json.loads(run(["measure", str(tmp_path / "packed"), *argv], capsys))
    per_record = bench_data.PACKED_PER_RECORD
    assert packed["num_examples"] == 512 and packed["examples_per_record"] == per_record
    rates = {r["pipeline"]: r for r in packed["rates"]}
    assert rates["streamed"]["examples_per_sec"] > 0 and rates["in_memory"]["examples_per_sec"] > 0
    assert rates["packed"]["examples_per_sec"] is None  # they are packed already
    assert "packed shards already" in rates["packed"]["note"]


@pytest.mark.parametrize(
    "flags", [["--batch-size", "0"], ["--batch-size", "8", "--batches", "0"], []]
)
def test_measure_usage_errors_exit_with_status_2(
    written: Path, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["measure", str(written), *flags])
    assert info.value.code == 2
    assert "usage: tfr-hooks" in capsys.readouterr().err


def test_measure_counts_the_examples_of_packed_shards_from_their_schema(tmp_path: Path) -> None:
    # 100 examples, 16 a record: 7 records, the last of 4 examples (not 7 * 16 = 112)
    data = {"x": np.arange(100 * 4, dtype=np.float32).reshape(100, 4), "y": np.arange(100)}
    tfrecord.write(data, tmp_path / "packed", examples_per_record=16)
    result = measure(str(tmp_path / "packed"), 10, max_batches=2)
    assert result.examples_per_record == 16 and result.num_examples == 100
    assert result.decoded_bytes == 100 * (4 * 4 + 8)
