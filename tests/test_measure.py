"""``tfr-hooks measure``: the pipelines a user's own files allow, timed here, and a choice."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _tfrecord_data import bytes_feature, example, float_feature, int64_feature, write_records
from tfr_hooks import cli, tfrecord
from tfr_hooks.measure import Measurement, PipelineRate, measure, recommend


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 16)).astype(np.float32)
    directory = tmp_path_factory.mktemp("written") / "data"
    tfrecord.write({"x": x, "y": np.arange(600)}, directory, shards=2)
    return directory


_STARTS = {
    "in_memory": "Hold the data in memory",
    "packed": "Write packed shards",
    "streamed": "Stream from the files",
    "service": "Read through the tf.data service",
}


def assert_follows_rates(result: dict[str, Any]) -> None:
    """The recommendation names the fastest measured pipeline of those that fit."""
    rates = [r for r in result["rates"] if r["examples_per_sec"]]
    if not result["fits"]:
        rates = [r for r in rates if r["pipeline"] != "in_memory"]
    fastest = max(rates, key=lambda r: r["examples_per_sec"])["pipeline"]
    assert result["recommendation"].startswith(_STARTS[fastest]), result["recommendation"]
    assert "examples/s measured here: " in result["recommendation"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.slow  # both pipelines timed: about 1.3 s of CPU
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
    assert_follows_rates(result)


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
    assert "they read fastest (examples/s measured here: packed " in lines[-1]
    assert "x streamed; packed timed here on a sample)" in lines[-1]
    assert "--examples-per-record 64" in lines[-1]


@pytest.mark.slow  # times every pipeline; about 2 s of CPU
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
    assert result.decoded_as == "parsed records"  # the JPEG bytes are not decoded
    assert_follows_rates(result.to_dict())
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
    assert_follows_rates(records)
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


# --- the user's decoding function, and the choice ----------------------------------------

SIDE = 16
DECODE_MODULE = """
import tensorflow as tf

CALLS = []


def decode(example):
    CALLS.append(sorted(example))  # traced: once per pipeline that applies it
    image = tf.io.decode_jpeg(tf.reshape(example["image/encoded"], []), channels=3)
    image = tf.reshape(image, [{side}, {side}, 3])
    return {{"image": image, "label": tf.reshape(example["image/class/label"], [])}}


NOT_CALLABLE = 3
"""


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 small JPEGs and their labels, written by a plain TFRecordWriter."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    records = [
        example(
            **{
                "image/encoded": bytes_feature(
                    [
                        tf.io.encode_jpeg(
                            rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
                        ).numpy()
                    ]
                ),
                "image/class/label": int64_feature([i % 10]),
            }
        )
        for i in range(400)
    ]
    return Path(write_records(tmp_path_factory.mktemp("jpegs") / "train.tfrecord", records))


@pytest.fixture
def decode_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of the user's, ``decode_<n>``, in the current directory (``tmp_path``)."""
    name = f"decode_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(DECODE_MODULE.format(side=SIDE))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


@pytest.mark.slow  # times every pipeline; about 3 s of CPU
def test_measure_map_fn_applies_the_users_decode_to_every_pipeline(
    jpegs: Path, decode_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(jpegs), "--batch-size", "32", "--batches", "5"]
    result = json.loads(run([*argv, "--map-fn", f"{decode_module}:decode", "--json"], capsys))
    calls = sys.modules[decode_module].CALLS  # imported from the current directory
    # traced by the streamed, packed and in-memory pipelines (and the size estimate)
    assert len(calls) >= 4 and calls[0] == ["image/class/label", "image/encoded"]
    assert result["map_fn"] == f"{decode_module}:decode"
    # the size held in memory is the decoded images', not the JPEG bytes'
    assert result["decoded_as"] == "map_fn output"
    assert result["decoded_bytes"] == 400 * (SIDE * SIDE * 3 + 8)  # uint8 RGB, int64 label
    assert result["fits"] is True
    rates = {r["pipeline"]: r for r in result["rates"]}
    assert all(rates[p]["examples_per_sec"] > 0 for p in ("streamed", "packed", "in_memory"))
    assert_follows_rates(result)
    # without it: the same files' parsed records, the JPEG bytes, labelled as such
    lines = run(argv, capsys).splitlines()
    assert lines[1].startswith("Parsed records (features still encoded bytes, not decoded): ")
    decoded = run([*argv, "--map-fn", f"{decode_module}:decode"], capsys).splitlines()
    assert decoded[1].startswith(
        f"Decoded by {decode_module}:decode: {400 * (SIDE * SIDE * 3 + 8)} bytes"
    )


def test_measure_map_fn_errors_name_the_argument(
    jpegs: Path, decode_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(jpegs), "--batch-size", "8", "--map-fn"]
    for spec, said in [
        ("no_such_module_xyz:decode", "importable module"),
        (f"{decode_module}:missing", "'missing' in"),
        (f"{decode_module}:NOT_CALLABLE", "naming a callable"),
        (decode_module, 'of the form "MODULE:FUNCTION"'),
    ]:
        with pytest.raises(SystemExit) as info:
            cli.main([*argv, spec])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "Expected `--map-fn` to be" in err and said in err and spec in err


def _measurement(rates: dict[str, float | None], *, fits: bool = True) -> Measurement:
    result = Measurement(
        files=["f"],
        batch_size=32,
        num_examples=2000,
        examples_per_record=1,
        file_bytes=2000 * 2000,
        record_bytes=2000.0,
        decoded_bytes=10**6,
        memory_budget=10**9 if fits else 10**5,
        service="grpc://h:5050",
    )
    result.rates = [PipelineRate(name, rate) for name, rate in rates.items()]
    return result


def test_the_recommendation_is_the_highest_measured_rate_of_those_that_fit() -> None:
    # the rates of the issue: packed faster than in memory, which is faster than streamed
    issue = {"streamed": 46806.0, "packed": 137013.0, "in_memory": 115352.0}
    text = recommend(_measurement(issue))
    assert text.startswith("Write packed shards")
    assert "packed 137,013, in memory 115,352, streamed 46,806" in text  # what it compared
    assert "2.9x streamed" in text
    faster = recommend(_measurement({**issue, "in_memory": 200000.0}))
    assert faster.startswith("Hold the data in memory") and "4.3x streamed" in faster
    # in memory does not count when the data does not fit (even with a rate given)
    assert recommend(_measurement({**issue, "in_memory": 10**6}, fits=False)).startswith(
        "Write packed shards"
    )
    slow_packed = recommend(_measurement({"streamed": 5e4, "packed": 4e4, "in_memory": None}))
    assert slow_packed.startswith("Stream from the files") and "streamed 50,000" in slow_packed
    service = recommend(_measurement({**issue, "service": 3e5}, fits=False))
    assert service.startswith("Read through the tf.data service")
    assert 'service="grpc://h:5050"' in service


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(300)
def test_measure_service_times_the_streamed_pipeline_through_a_running_service(
    jpegs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfr_hooks.service.local import LocalService

    argv = ["measure", str(jpegs), "--batch-size", "32", "--batches", "5", "--json"]
    with LocalService(workers=1) as service:
        result = json.loads(run([*argv, "--service", service.address], capsys))
    rates = {r["pipeline"]: r for r in result["rates"]}
    assert list(rates) == ["streamed", "packed", "in_memory", "service"]
    assert rates["service"]["examples_per_sec"] > 0 and rates["service"]["batches"] == 5
    assert service.address in rates["service"]["note"]
    assert result["service"] == service.address
    assert_follows_rates(result)


def test_measure_service_errors_at_once_for_a_wrong_address(
    jpegs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["measure", str(jpegs), "--batch-size", "8", "--service"]
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "grpc://localhost"])  # no port
    assert info.value.code == 2
    assert "Expected `--service` to be" in capsys.readouterr().err
    from tfr_hooks.service.servers import free_port

    assert cli.main([*argv, f"grpc://127.0.0.1:{free_port()}"]) == 1  # nothing listens
    err = capsys.readouterr().err
    assert "tfr-hooks measure: error: --service: No tf.data service dispatcher answers" in err
