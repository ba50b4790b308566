"""SequenceExample files converted: packed shards keep every feature list (issue 26).

Every input file is written with ``tf.io.TFRecordWriter`` directly (no ``schema.json``):
300 ``tf.train.SequenceExample`` records with the context features ``id`` (one int64)
and ``labels`` (0 to 4 int64 values), and the feature lists ``rgb`` (per frame 8 uint8
values in one bytes value, YouTube-8M's quantized layout) and ``audio`` (per frame 4
floats), 5 to 40 frames each; every tenth record has empty feature lists (0 frames),
and ``audio`` is missing from other records. ``tfrecord.convert`` writes them again,
packed (``examples_per_record > 1``: each block's frames one after the other beside
each example's frame count) or as SequenceExamples; reading the result back gives, per
feature, the sum over one pass and the frame counts per id that were written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import write_records
from tfr_hooks import cli, tfrecord
from tfr_hooks.input_report import measure_files
from tfr_hooks.measure import measure
from tfr_hooks.tfrecord.errors import SchemaMismatchError
from tfr_hooks.tfrecord.formats import packed
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines import packed_batches
from tfr_hooks.tfrecord.pipelines.options import PipelineKind
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import load_sidecar

N = 300
#: How the files are read: rgb's bytes as 8 uint8 values a frame.
DECODE = {"rgb": ("uint8", (8,))}


def _frames(index: int) -> int:
    return 0 if index % 10 == 3 else 5 + (index * 7) % 36  # 0 (empty lists), else 5..40


def _values(index: int) -> dict:
    """The values of record ``index``, as written (``audio`` None: the list is absent)."""
    rng = np.random.default_rng(index)
    frames = _frames(index)
    return {
        "id": index,
        "labels": rng.integers(0, 1000, index % 5).tolist(),
        "rgb": rng.integers(0, 256, (frames, 8)).astype(np.uint8),
        "audio": None if index % 10 == 7 else rng.normal(size=(frames, 4)).astype(np.float32),
    }


def _serialize(values: dict) -> bytes:
    sequence = tf.train.SequenceExample()
    context = sequence.context.feature
    context["id"].int64_list.value.append(values["id"])
    context["labels"].int64_list.value.extend(values["labels"])
    lists = sequence.feature_lists.feature_list
    rgb = lists["rgb"]  # created even with 0 frames: an empty feature list
    for frame in values["rgb"]:
        rgb.feature.add().bytes_list.value.append(frame.tobytes())
    if values["audio"] is not None:
        audio = lists["audio"]
        for frame in values["audio"]:
            audio.feature.add().float_list.value.extend(frame.tolist())
    return sequence.SerializeToString()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict]]:
    """The 300-record file and the values written into it."""
    values = [_values(i) for i in range(N)]
    path = tmp_path_factory.mktemp("videos") / "videos.tfrecord"
    return write_records(path, [_serialize(v) for v in values]), values


@pytest.fixture(scope="module")
def packed_dir(written, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "packed"
    tfrecord.convert(written[0], out, decode=DECODE, examples_per_record=16, shards=2)
    return out


def _expected(values: list[dict]) -> dict:
    """Per id: the frames of each feature list; and per feature, the sum over the pass."""
    frames = {
        v["id"]: {
            "rgb": len(v["rgb"]),
            "audio": 0 if v["audio"] is None else len(v["audio"]),
        }
        for v in values
    }
    sums = {
        "id": sum(v["id"] for v in values),
        "labels": sum(sum(v["labels"]) for v in values),
        "rgb": sum(int(v["rgb"].astype(np.int64).sum()) for v in values),
        "audio": sum(float(v["audio"].sum()) for v in values if v["audio"] is not None),
    }
    return {"frames": frames, "sums": sums}


def _one_pass(batches) -> dict:
    """What a pass of batches held: frames per id and per-feature sums."""
    frames: dict[int, dict[str, int]] = {}
    sums = {"id": 0, "labels": 0, "rgb": 0, "audio": 0.0}
    for batch in batches:
        ids = batch["id"].numpy().tolist()
        for name in ("rgb", "audio"):
            ragged = batch[name]
            assert isinstance(ragged, tf.RaggedTensor)
            assert ragged.shape.as_list()[2:] == [8 if name == "rgb" else 4]
            for i, count in zip(ids, ragged.row_lengths().numpy().tolist(), strict=True):
                frames.setdefault(i, {})[name] = count
        assert batch["rgb"].dtype == tf.uint8 and batch["audio"].dtype == tf.float32
        sums["id"] += sum(ids)
        sums["labels"] += int(tf.reduce_sum(batch["labels"].flat_values))
        sums["rgb"] += int(tf.reduce_sum(tf.cast(batch["rgb"].flat_values, tf.int64)))
        sums["audio"] += float(tf.reduce_sum(tf.cast(batch["audio"].flat_values, tf.float64)))
    return {"frames": frames, "sums": sums}


def _assert_as_written(found: dict, values: list[dict]) -> None:
    want = _expected(values)
    assert found["frames"] == want["frames"]
    for name in ("id", "labels", "rgb"):
        assert found["sums"][name] == want["sums"][name], name
    assert found["sums"]["audio"] == pytest.approx(want["sums"]["audio"], rel=1e-5)


def _packed_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.tfrecord"))


def test_packed_shards_keep_every_feature_list(packed_dir, written):
    sidecar = load_sidecar(packed_dir / "schema.json")
    assert sidecar.examples_per_record == 16 and sidecar.num_examples == N
    lists = {f.name: f for f in sidecar.schema.sequence_features}
    assert set(lists) == {"rgb", "audio"}
    assert (lists["rgb"].dtype, lists["rgb"].shape, lists["rgb"].encoding) == ("uint8", (8,), "raw")
    stored = json.loads((packed_dir / "schema.json").read_text())
    assert {f["name"] for f in stored["features"] if f.get("sequence")} == {"rgb", "audio"}
    # on disk: a tf.train.Example per block, each feature list's frames beside their counts
    first = next(iter(tf.data.TFRecordDataset(_packed_files(packed_dir)[0]))).numpy()
    block = tf.train.Example.FromString(first).features.feature
    counts = list(block["rgb/frame_counts"].int64_list.value)
    assert counts == [_frames(i) for i in range(16)]
    assert len(block["rgb"].bytes_list.value[0]) == 8 * sum(counts)
    audio_counts = [0 if i % 10 == 7 else _frames(i) for i in range(16)]
    assert list(block["audio/frame_counts"].int64_list.value) == audio_counts
    assert len(block["audio"].float_list.value) == 4 * sum(audio_counts)
    assert packed.check_block(sidecar.schema, tf.train.Example.FromString(first), 16) == 16


@pytest.mark.slow  # reads every packed pipeline; about 1 s of CPU
def test_packed_dataset_returns_the_values_and_frame_counts_written(packed_dir, written):
    schema = load_sidecar(packed_dir / "schema.json").schema
    ds = packed_batches.packed_dataset(
        RecordFiles(_packed_files(packed_dir), ""),
        schema,
        16,
        batch_size=32,
        shuffle_buffer=0,
        seed=None,
        num_parallel_reads=1,
        drop_remainder=False,
        num_epochs=1,
        prefetch=None,
    )
    batches = list(ds)
    assert [int(b["id"].shape[0]) for b in batches] == [32] * 9 + [12]
    assert batches[0]["id"].numpy().tolist() == list(range(32))  # the stored order
    first = batches[0]["rgb"][0].numpy()
    np.testing.assert_array_equal(first, written[1][0]["rgb"])
    _assert_as_written(_one_pass(batches), written[1])


@pytest.mark.slow  # reads every shuffled pass; about 1 s of CPU
def test_shuffled_packed_read_through_dataset_is_one_whole_pass(packed_dir, written):
    ds = tfrecord.dataset(packed_dir, 24, shuffle=64, seed=3, num_epochs=1)
    batches = list(ds)
    ids = [i for b in batches for i in b["id"].numpy().tolist()]
    assert sorted(ids) == list(range(N)) and ids != list(range(N))
    _assert_as_written(_one_pass(batches), written[1])


def test_plain_convert_writes_sequence_examples_that_read_whole(written, tmp_path):
    result = tfrecord.convert(written[0], tmp_path / "plain", decode=DECODE)
    assert [f.name for f in result.schema.sequence_features] == ["audio", "rgb"]
    record = next(iter(tf.data.TFRecordDataset(result.files[0]))).numpy()
    sequence = tf.train.SequenceExample.FromString(record)
    assert list(sequence.context.feature["id"].int64_list.value) == [0]
    frames = sequence.feature_lists.feature_list["rgb"].feature
    assert len(frames) == _frames(0) and frames[0].bytes_list.value[0] == (
        written[1][0]["rgb"][0].tobytes()
    )
    batches = list(tfrecord.dataset(tmp_path / "plain", 50, shuffle=None, num_epochs=1))
    _assert_as_written(_one_pass(batches), written[1])


@pytest.mark.slow  # converts twice; about 4 s of CPU
def test_packed_shards_convert_again(packed_dir, written, tmp_path):
    # packed input (read with its stored schema) to SequenceExamples, then to packed
    tfrecord.convert(packed_dir, tmp_path / "again")
    result = tfrecord.convert(tmp_path / "again", tmp_path / "repacked", examples_per_record=7)
    batches = list(tfrecord.dataset(tmp_path / "repacked", 64, shuffle=None, num_epochs=1))
    assert load_sidecar(tmp_path / "repacked" / "schema.json").examples_per_record == 7
    assert result.num_records == N
    _assert_as_written(_one_pass(batches), written[1])


@pytest.mark.slow  # a packed block rewritten and checked: about 1.5 s of CPU
def test_check_block_names_frames_that_do_not_add_up(packed_dir):
    schema = load_sidecar(packed_dir / "schema.json").schema
    first = next(iter(tf.data.TFRecordDataset(_packed_files(packed_dir)[0]))).numpy()
    block = tf.train.Example.FromString(first)
    block.features.feature["rgb/frame_counts"].int64_list.value[0] += 1
    with pytest.raises(SchemaMismatchError, match=r"'rgb'.*where 'rgb/frame_counts' counts"):
        packed.check_block(schema, block, 16, file="f", record=0)
    del block.features.feature["audio/frame_counts"]
    with pytest.raises(SchemaMismatchError, match=r"no 'audio/frame_counts' feature"):
        packed.check_block(schema, block, 16, file="f", record=0)
    # the reader checks the same: a block whose frames do not add up is an error
    ds = tf.data.Dataset.from_tensors(tf.constant([block.SerializeToString()]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not hold the frames"):
        list(ds.map(lambda s: packed.unpack(schema, s, 16)))


def test_feature_lists_that_cannot_be_packed_are_refused():
    varying = Schema([Feature("id", "int64"), Feature("tokens", "int64", (None,), sequence=True)])
    with pytest.raises(ValueError, match=r"feature list 'tokens' of shape \(None,\) per frame"):
        packed.check_packable(varying, 8)
    packed.check_packable(varying, 1)  # as SequenceExamples it is written
    taken = Schema(
        [Feature("rgb", "uint8", (8,), sequence=True), Feature("rgb/frame_counts", "int64")]
    )
    with pytest.raises(ValueError, match=r"frame counts of the feature list 'rgb'"):
        packed.check_packable(taken, 8)


@pytest.mark.slow  # converts through the command; about 1 s of CPU
def test_cli_convert_packs_a_sequence_example_file(written, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["convert", written[0], str(out), "--examples-per-record", "32"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    schema = load_sidecar(out / "schema.json").schema
    assert {f.name for f in schema.sequence_features} == {"rgb", "audio"}
    batches = list(tfrecord.dataset(out, 100, shuffle=None, num_epochs=1))
    assert sum(int(tf.reduce_sum(b["audio"].row_lengths())) for b in batches) == sum(
        f["audio"] for f in _expected(written[1])["frames"].values()
    )


@pytest.mark.slow  # times every pipeline; about 6 s of CPU
def test_measure_times_sequence_example_files_and_counts_their_frames(written, packed_dir):
    result = measure(written[0], 16, max_batches=5)
    assert result.num_examples == N
    rates = {r.pipeline: r for r in result.rates}
    assert rates["streamed"].examples_per_sec and rates["packed"].examples_per_sec
    frames = sum(_frames(i) for i in range(N))
    # rgb inferred as one bytes value a frame (8 bytes + 8 for the pointer), audio 16 bytes
    assert result.decoded_bytes > frames * (16 + 16)
    assert result.decoded_bytes < frames * (16 + 16) * 1.5 + N * 100
    # the data fits: the recommendation never says otherwise, timed in memory or not
    assert result.fits and "does not stay in memory" not in result.recommendation
    on_packed = measure(packed_dir, 16, max_batches=5)
    assert on_packed.examples_per_record == 16 and on_packed.num_examples == N
    assert {r.pipeline: r for r in on_packed.rates}["streamed"].examples_per_sec
    assert on_packed.decoded_bytes > frames * (8 + 16)


def test_input_report_facts_of_sequence_example_files(written, packed_dir):
    schema = load_sidecar(packed_dir / "schema.json").schema
    files = _packed_files(packed_dir)
    read = tfrecord.ReadFacts(
        kind=PipelineKind.PACKED,
        files=tuple(files),
        schema=schema,
        examples=N,
        examples_per_record=16,
    )
    facts = measure_files(read)
    assert facts.record_nbytes == sum(os.path.getsize(f) for f in files) / (N // 16)


@pytest.mark.slow  # graph-mode pipelines over packed shards; about 1 s of CPU
def test_read_batches_unpacks_feature_lists_in_graph_mode(packed_dir, written):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(packed_dir, 32, shuffle=64, seed=1, num_epochs=1)
        tensors = batches.tensors
        assert tensors["rgb"].shape.as_list() == [None, None, 8]
        fetch = {
            "id": tensors["id"],
            "rgb": tensors["rgb"].row_lengths(),
            "audio": tensors["audio"].row_lengths(),
            "rgb_sum": tf.reduce_sum(tf.cast(tensors["rgb"].flat_values, tf.int64)),
        }
        frames: dict[int, dict[str, int]] = {}
        rgb_sum = 0
        with tf.compat.v1.Session() as session:
            session.run(batches.initializers)
            while True:
                try:
                    got = session.run(fetch)
                except tf.errors.OutOfRangeError:
                    break
                for i, rgb, audio in zip(got["id"], got["rgb"], got["audio"], strict=True):
                    frames[int(i)] = {"rgb": int(rgb), "audio": int(audio)}
                rgb_sum += int(got["rgb_sum"])
    want = _expected(written[1])
    assert frames == want["frames"] and rgb_sum == want["sums"]["rgb"]


@pytest.mark.slow  # converts twice; about 1 s of CPU
def test_token_feature_lists_convert_plain_and_packed(tmp_path):
    # per-frame lists of varying length ("words") are written again as SequenceExamples;
    # packing refuses them (naming the list) and packs one-string frames ("names")
    records = []
    for i in range(20):
        sequence = tf.train.SequenceExample()
        sequence.context.feature["id"].int64_list.value.append(i)
        words = sequence.feature_lists.feature_list["words"]
        for j in range(i % 4):
            words.feature.add().int64_list.value.extend(range(j + i % 3))
        names = sequence.feature_lists.feature_list["names"]
        for j in range(i % 3):
            names.feature.add().bytes_list.value.append(b"n%d" % j)
        records.append(sequence.SerializeToString())
    path = write_records(tmp_path / "tokens.tfrecord", records)
    tfrecord.convert(path, tmp_path / "plain")
    written = next(iter(tfrecord.dataset(path, 20, shuffle=None)))
    plain = next(iter(tfrecord.dataset(tmp_path / "plain", 20, shuffle=None)))
    assert plain["words"].to_list() == written["words"].to_list()
    assert plain["names"].to_list() == written["names"].to_list()
    with pytest.raises(ValueError, match=r"feature list 'words' of shape \(None,\) per frame"):
        tfrecord.convert(path, tmp_path / "packed", examples_per_record=8)
    names = tfrecord.infer_schema(path).select(["id", "names"])
    tfrecord.convert(path, tmp_path / "packed", schema=names, examples_per_record=8)
    packed_names = next(iter(tfrecord.dataset(tmp_path / "packed", 20, shuffle=None)))
    assert packed_names["names"].to_list() == written["names"].to_list()
