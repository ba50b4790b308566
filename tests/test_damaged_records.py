"""tfr_hooks.tfrecord.formats.damage: ``max_corrupt_records`` skips, counts and bounds damage.

Files written by a plain ``tf.io.TFRecordWriter`` (and GZIP), then damaged as disks and
networks damage them: a flipped byte in a record's data, in a length header, a truncated
tail, a damaged GZIP member, a record that is no Example. Each pipeline and both loops
train every epoch on the whole records and report the count; one more than allowed
stops the build with the named error; 0 keeps today's behaviour; nothing hangs.
"""

from __future__ import annotations

import logging
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.input_report import CORRUPT_RECORDS, InputStats, facts_of_read, verdict
from tfr_hooks.tfrecord.formats.damage import masked_crc32c, scan_damage, scan_file
from tfr_hooks.tfrecord.formats.reading import RecordFiles

v1 = tf.compat.v1
PER_FILE = 12  # records of a small file
BATCH = 5


def example(i: int, width: int = 2) -> bytes:
    """A record as any producer writes it: an id and a few floats (random past 2)."""
    noise = np.random.default_rng(i).random(max(0, width - 2)).tolist()
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i / 10] * 2 + noise)),
            }
        )
    ).SerializeToString()


def write(path: Path, ids: range, compression: str = "", width: int = 2) -> Path:
    with tf.io.TFRecordWriter(str(path), compression or None) as writer:
        for i in ids:
            writer.write(example(i, width))
    return path


def offsets(path: Path) -> list[int]:
    """The byte offset of each record of an uncompressed file."""
    data, found, at = path.read_bytes(), [], 0
    while at < len(data):
        found.append(at)
        at += 16 + struct.unpack("<Q", data[at : at + 8])[0]
    return found


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def flip_data(path: Path, index: int) -> Path:
    flip(path, offsets(path)[index] + 12 + 3)
    return path


def flip_header(path: Path, index: int) -> Path:
    flip(path, offsets(path)[index] + 1)  # the length: its CRC no longer matches
    return path


def truncate(path: Path, cut: int) -> Path:
    path.write_bytes(path.read_bytes()[:-cut])
    return path


def not_an_example(path: Path, ids: range, bad: int) -> Path:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in ids:
            writer.write(b"\xff\xff not a proto" if i == bad else example(i))
    return path


def gzip_damaged(path: Path, ids: range) -> Path:
    """A GZIP file with bytes overwritten at 3/4 of its stream.

    Its records hold random floats, so that the stream is longer than TensorFlow's
    inflate buffers (256 KiB): the records before the damage can be read.
    """
    write(path, ids, "GZIP", width=64)
    rng = np.random.default_rng(0)
    data = bytearray(path.read_bytes())
    at = len(data) * 3 // 4
    data[at : at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


#: Each kind of damage: how to make it in a file of ids 12..23, and the ids it loses.
KINDS: dict[str, tuple[Callable[[Path], Path], set[int]]] = {
    "data_crc": (lambda p: flip_data(write(p, range(12, 24)), 4), {16}),
    "length_header": (lambda p: flip_header(write(p, range(12, 24)), 7), {19}),
    "truncated_data": (lambda p: truncate(write(p, range(12, 24)), 5), {23}),
    "truncated_header": (lambda p: truncate(write(p, range(12, 24)), 30), {23}),
    "not_an_example": (lambda p: not_an_example(p, range(12, 24), 20), {20}),
}


@pytest.fixture
def clean(tmp_path: Path) -> list[Path]:
    """Two undamaged files: ids 0..11 and 24..35."""
    return [
        write(tmp_path / "a.tfrecord", range(12)),
        write(tmp_path / "c.tfrecord", range(24, 36)),
    ]


def three(clean: list[Path], kind: str) -> tuple[list[str], set[int]]:
    """The clean files with a damaged one between them, and the ids read from them."""
    make, lost = KINDS[kind]
    damaged = make(clean[0].parent / "b.tfrecord")
    return [str(clean[0]), str(damaged), str(clean[1])], set(range(36)) - lost


def ids_of(data: Any) -> list[int]:
    return [int(i) for batch in data for i in batch["id"].numpy()]


# -- the scan -----------------------------------------------------------------------------


def test_masked_crc32c_matches_what_tensorflow_writes(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord", range(3))
    data = path.read_bytes()
    for at in offsets(path):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        assert masked_crc32c(data[at : at + 8]) == struct.unpack("<I", data[at + 8 : at + 12])[0]
        body, crc = data[at + 12 : at + 12 + length], data[at + 12 + length : at + 16 + length]
        assert masked_crc32c(body) == struct.unpack("<I", crc)[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_damage_is_found_and_its_record_skipped(
    tmp_path: Path, clean: list[Path], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    files, kept = three(clean, kind)
    with caplog.at_level(logging.WARNING, "tfr_hooks.tfrecord.formats.damage"):
        data = tfrecord.dataset(files, BATCH, max_corrupt_records=1)
    assert sorted(ids_of(data)) == sorted(kept)
    found = scan_file(files[1], "")
    assert len(found.corrupt) == 1 and found.records == 11
    (record,) = found.corrupt
    skipped = [r for r in caplog.records if "Skipping damaged record" in r.getMessage()]
    assert len(skipped) == 1  # logged once, naming the file and the record
    assert files[1] in skipped[0].getMessage()
    assert f"record {record.index} " in skipped[0].getMessage()


@pytest.mark.slow  # every way of asking: about 1 s of CPU
def test_one_record_files_value_reads_the_whole_records_however_it_is_asked(
    clean: list[Path],
) -> None:
    files, kept = three(clean, "data_crc")
    whole = RecordFiles(files, "", scan_damage(files, "", 1))
    assert whole.damaged() and not whole.damaged([files[0], files[2]])
    assert whole.clean() == [files[0], files[2]]

    def ids(records: tf.data.Dataset) -> list[int]:
        parsed = [tf.train.Example.FromString(r) for r in records.as_numpy_iterator()]
        return [int(e.features.feature["id"].int64_list.value[0]) for e in parsed]

    assert ids(whole.records()) == sorted(kept)  # file after file, the damaged one skipped
    paths, read = whole.per_file(files[1:])  # the elements interleave reads, one a file
    assert ids(paths.flat_map(read)) == sorted(kept)[12:]
    assert ids(whole.file_records(files[1], whole.position(files[1]))) == sorted(kept)[12:23]
    unscanned = RecordFiles(files, "")  # no map: every record is read, as without damage
    assert not unscanned.damaged() and unscanned.clean() == files
    assert len(ids(unscanned.file_records(files[0], unscanned.position(files[0])))) == 12


def test_a_damaged_gzip_member_skips_the_rest_of_its_file_as_one_record(
    tmp_path: Path,
) -> None:
    damaged = gzip_damaged(tmp_path / "b.tfrecord.gz", range(100, 2100))
    good = write(tmp_path / "c.tfrecord.gz", range(3000, 3010), "GZIP", width=64)
    found = scan_file(str(damaged), "GZIP")
    (record,) = found.corrupt
    assert "GZIP stream" in record.reason and 0 < found.records < 2000
    assert record.index == found.records  # the first record it could not read
    data = tfrecord.dataset([str(damaged), str(good)], 16, max_corrupt_records=1)
    # the readable prefix of the damaged file, then every record of the good one
    assert sorted(ids_of(data)) == [*range(100, 100 + found.records), *range(3000, 3010)]


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_truncated_compressed_file_keeps_the_records_before_the_cut(
    tmp_path: Path, compression: str
) -> None:
    path = write(tmp_path / "b.tfrecord.z", range(2000), compression, width=64)
    truncate(path, len(path.read_bytes()) // 4)
    found = scan_file(str(path), compression)
    assert len(found.corrupt) == 1 and 0 < found.records < 2000
    assert f"the {compression} stream" in found.corrupt[0].reason
    data = tfrecord.dataset(str(path), 100, max_corrupt_records=1)
    assert ids_of(data) == list(range(found.records))


def test_one_damaged_record_more_than_allowed_stops_the_build_naming_it(
    clean: list[Path],
) -> None:
    files, _ = three(clean, "data_crc")
    flip_data(clean[1], 2)  # a second damaged record, in the last file
    with pytest.raises(tfrecord.CorruptRecordError, match=r"c\.tfrecord.* record 2\b") as info:
        tfrecord.dataset(files, BATCH, max_corrupt_records=1)
    assert info.value.file == str(clean[1]) and info.value.record == 2
    assert "max_corrupt_records=1" in str(info.value)
    assert len(scan_damage(files, "", 2).corrupt) == 2  # allowed with 2


def test_zero_keeps_todays_behaviour(clean: list[Path]) -> None:
    files, _ = three(clean, "truncated_header")
    with pytest.raises(tfrecord.CorruptRecordError, match="truncated"):  # at build, as before
        tfrecord.dataset(files, BATCH)
    files, _ = three(clean, "data_crc")
    with pytest.raises(tfrecord.CorruptRecordError, match=r"b\.tfrecord.* record 4\b"):
        tfrecord.dataset(files, BATCH, max_corrupt_records=0)
    assert tfrecord.source([str(clean[0])], BATCH).facts.corrupt_records is None


def test_max_corrupt_records_is_checked_where_it_enters(clean: list[Path]) -> None:
    with pytest.raises(ValueError, match="Received: max_corrupt_records=-1"):
        tfrecord.dataset([str(clean[0])], BATCH, max_corrupt_records=-1)
    with pytest.raises(ValueError, match="Received: max_corrupt_records=True"):
        tfrecord.source([str(clean[0])], BATCH, max_corrupt_records=True)


def test_the_same_damage_gives_the_same_shuffled_order_again(clean: list[Path]) -> None:
    # what exact resume relies on: the build at resume finds the same whole records
    files, kept = three(clean, "length_header")

    def order() -> list[int]:
        data = tfrecord.dataset(files, BATCH, shuffle=8, seed=3, max_corrupt_records=1)
        return ids_of(data)

    first = order()
    assert first == order() and sorted(first) == sorted(kept)


@pytest.mark.timeout(240)
@pytest.mark.slow  # trains and resumes; about 2 s of CPU
def test_a_run_stopped_mid_epoch_resumes_exactly_on_damaged_files(tmp_path: Path) -> None:
    from _graph_resume_child import EXAMPLES, StopAt, run, write_data

    data = write_data(str(tmp_path / "data"))
    shutil.copytree(data["plain"], tmp_path / "damaged")
    shard = sorted((tmp_path / "damaged").glob("*.tfrecord"))[0]
    lost = 3  # tfrecord.write's first shard holds ids 0..21 in order
    flip_data(shard, lost)
    data["damaged"] = str(tmp_path / "damaged")
    reference = run(data, "damaged", None)
    first = run(data, "damaged", str(tmp_path / "ckpt"), StopAt(epoch=1, step=2))
    second = run(data, "damaged", str(tmp_path / "ckpt"))
    assert second["initial"] == (1, 2)
    # the whole records again at resume: the batches of the uninterrupted run, in order
    assert first["steps"] + second["steps"] == reference["steps"]
    for epoch in range(3):
        ids = [i for e, _, batch in reference["steps"] if e == epoch for i in batch]
        assert sorted(ids) == [i for i in range(EXAMPLES) if i != lost]
    assert second["history"][CORRUPT_RECORDS] == [1, 1]


# -- the pipelines and the loops --------------------------------------------------------


class EpochExamples(tfr_hooks.Hook):
    """The examples of each epoch, as the loop counted them."""

    def begin(self) -> None:
        self.examples: list[int] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.examples.append(self.loop.epoch_examples)


def function_loop(data: Any) -> tuple[dict[str, list[Any]], list[int]]:
    w = tf.Variable(tf.zeros([2]))

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.reduce_sum(batch["x"][:, :2] * w, 1) - 1.0))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return {"id": tf.reduce_mean(tf.cast(batch["id"], tf.float32))}

    counts = EpochExamples()
    history = FunctionLoop(data, step_fn=step, hooks=[counts]).run(epochs=2)
    return history, counts.examples


def session_loop(make: Callable[[], Any]) -> tuple[dict[str, list[Any]], list[int]]:
    with tf.Graph().as_default():
        batches = make()
        w = v1.get_variable("w", [2], initializer=tf.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.reduce_sum(batches.tensors["x"][:, :2] * w, 1) - 1.0))
        train_op = v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        mean_id = tf.reduce_mean(tf.cast(batches.tensors["id"], tf.float32))
        counts = EpochExamples()
        loop = tfr_hooks.SessionLoop(train_op, {"id": mean_id}, hooks=[counts], data=batches)
        history = loop.run(epochs=2)
    return history, counts.examples


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("in_memory", "mapped"), [(False, False), (True, False), ("auto", False), ("auto", True)]
)
@pytest.mark.slow  # trains 4 times; about 3 s of CPU
def test_function_loop_trains_every_epoch_on_the_whole_records(
    clean: list[Path], in_memory: bool | str, mapped: bool
) -> None:
    files, kept = three(clean, "data_crc")
    flip_header(clean[1], 9)  # two damaged records, N = 3
    kept -= {33}
    map_fn = (lambda example: {"id": example["id"], "x": example["x"] * 2}) if mapped else None
    data = tfrecord.source(files, BATCH, in_memory=in_memory, map_fn=map_fn, max_corrupt_records=3)
    assert [(c.file, c.index) for c in data.facts.corrupt_records] == [
        (files[1], 4),
        (files[2], 9),
    ]
    assert data.facts.examples == len(kept)  # counted by the scan: exact steps up front
    history, examples = function_loop(data)
    assert examples == [len(kept)] * 2
    assert history["id"] == pytest.approx([np.mean(sorted(kept))] * 2)
    assert history[CORRUPT_RECORDS] == [2, 2]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pipeline", ["dataset", "queue", "in_memory"])
@pytest.mark.slow  # trains 3 times; about 1 s of CPU
def test_session_loop_trains_every_epoch_on_the_whole_records(
    clean: list[Path], pipeline: str
) -> None:
    files, kept = three(clean, "truncated_data")  # a truncated file in the middle
    options: dict[str, Any] = {"max_corrupt_records": 1}
    if pipeline == "in_memory":
        options["in_memory"] = True
    else:
        options["pipeline"] = pipeline
    if pipeline == "queue":  # one stream of passes, split into epochs by the loop
        options["num_epochs"] = 2

    history, examples = session_loop(lambda: tfrecord.read_batches(files, BATCH, **options))
    assert examples == [len(kept)] * 2
    if pipeline == "queue":  # readers run ahead: a pass's records may end up in the next
        assert np.mean(history["id"]) == pytest.approx(np.mean(sorted(kept)))
    else:
        assert history["id"] == pytest.approx([np.mean(sorted(kept))] * 2)
    assert history[CORRUPT_RECORDS] == [1, 1]


@pytest.fixture(scope="module")
def gzip_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[int]]:
    """A GZIP file damaged at 3/4 of its stream and an undamaged one; the ids read."""
    root = tmp_path_factory.mktemp("gzip")
    damaged = gzip_damaged(root / "b.tfrecord.gz", range(100, 2100))
    good = write(root / "c.tfrecord.gz", range(3000, 3050), "GZIP", width=64)
    readable = scan_file(str(damaged), "GZIP").records
    return [str(damaged), str(good)], [*range(100, 100 + readable), *range(3000, 3050)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", ["function", "function_memory", "session", "session_queue"])
@pytest.mark.slow  # trains 4 times; about 2 s of CPU
def test_a_damaged_gzip_member_under_both_loops(
    gzip_files: tuple[list[str], list[int]], loop: str
) -> None:
    files, kept = gzip_files
    if loop.startswith("function"):
        data = tfrecord.source(
            files, 100, in_memory=loop == "function_memory", max_corrupt_records=1
        )
        history, examples = function_loop(data)
    else:
        pipeline = "queue" if loop == "session_queue" else "dataset"
        epochs = 2 if pipeline == "queue" else 1

        def make() -> Any:
            return tfrecord.read_batches(
                files, 100, pipeline=pipeline, num_epochs=epochs, max_corrupt_records=1
            )

        history, examples = session_loop(make)
    assert sum(examples) == 2 * len(kept) and len(examples) == 2
    assert np.average(history["id"], weights=examples) == pytest.approx(np.mean(kept))
    assert history[CORRUPT_RECORDS] == [1, 1]


@pytest.mark.timeout(120)
def test_a_queue_over_damaged_files_only_ends_every_epoch(clean: list[Path]) -> None:
    files, kept = three(clean, "length_header")
    flip_data(clean[0], 0)  # its first record: the compression cannot be detected
    kept -= {0}
    damaged = [files[1], files[0]]  # no file left for the queue's own readers
    with pytest.raises(tfrecord.NotTFRecordError):  # today's error, for N=0
        tfrecord.source(damaged, BATCH)

    def make() -> Any:
        return tfrecord.read_batches(
            damaged,
            BATCH,
            pipeline="queue",
            num_epochs=2,
            max_corrupt_records=2,
        )

    history, examples = session_loop(make)
    expected = sorted(kept & set(range(24)))
    # one stream of 2 passes, its epochs ended at the first batch past each pass's size
    assert sum(examples) == 2 * len(expected) and len(examples) == 2
    assert np.average(history["id"], weights=examples) == pytest.approx(np.mean(expected))
    assert history[CORRUPT_RECORDS] == [2, 2]


@pytest.mark.timeout(120)
@pytest.mark.slow  # packs and reads back; the command's conversion below stays fast
def test_convert_leaves_the_damaged_records_out_of_packed_shards(
    clean: list[Path], tmp_path: Path
) -> None:
    files, kept = three(clean, "not_an_example")
    tfrecord.convert(files, tmp_path / "packed", examples_per_record=4, max_corrupt_records=1)
    data = tfrecord.source(str(tmp_path / "packed"), BATCH)
    assert data.facts.kind is tfrecord.PipelineKind.PACKED
    assert ids_of(data.dataset) == sorted(kept)


@pytest.mark.timeout(120)
@pytest.mark.slow  # converts and trains; about 2 s of CPU
def test_a_damaged_block_of_packed_shards_is_skipped_under_function_loop(
    tmp_path: Path,
) -> None:
    columns = {"id": np.arange(40), "x": np.ones((40, 2), np.float32)}
    tfrecord.write(columns, tmp_path / "packed", shards=2, examples_per_record=4)
    shard = sorted((tmp_path / "packed").glob("*.tfrecord"))[1]  # ids 20..39, 5 blocks
    flip_data(shard, 2)  # the block of ids 28..31
    data = tfrecord.source(str(tmp_path / "packed"), BATCH, max_corrupt_records=1)
    assert data.facts.kind is tfrecord.PipelineKind.PACKED
    kept = [i for i in range(40) if not 28 <= i < 32]
    history, examples = function_loop(data)
    assert examples == [len(kept)] * 2
    assert history["id"] == pytest.approx([np.mean(kept)] * 2)
    assert history[CORRUPT_RECORDS] == [1, 1]


@pytest.mark.slow  # the converter over damaged files, then a read: about 4 s (fast-run budget)
def test_the_cli_converts_with_max_corrupt_records(clean: list[Path], tmp_path: Path) -> None:
    from tfr_hooks.cli import main

    files, kept = three(clean, "data_crc")
    out = tmp_path / "out"
    assert main(["convert", *files, str(out), "--max-corrupt-records", "1"]) == 0
    assert ids_of(tfrecord.dataset(str(out), BATCH)) == sorted(kept)


def test_the_input_report_names_the_records_skipped(clean: list[Path]) -> None:
    files, _ = three(clean, "data_crc")
    facts = facts_of_read(tfrecord.source(files, BATCH, max_corrupt_records=5).facts)
    assert facts.corrupt_records == 1
    stats = InputStats(epoch=0, steps=7, examples=35, wait_secs=0.01, step_secs=1.0)
    assert "Damaged records skipped (max_corrupt_records): 1" in verdict(stats, facts)
    plain = facts_of_read(tfrecord.source(files[:1], BATCH).facts)
    assert "Damaged" not in verdict(stats, plain)


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(420)
def test_a_served_pipeline_reads_the_whole_records(shared_service: str, clean: list[Path]) -> None:
    files, kept = three(clean, "length_header")
    data = tfrecord.source(files, BATCH, service=shared_service, max_corrupt_records=1)
    history, examples = function_loop(data)
    assert examples == [len(kept)] * 2
    assert history["id"] == pytest.approx([np.mean(sorted(kept))] * 2)
    assert history[CORRUPT_RECORDS] == [1, 1]

    def served() -> Any:
        return tfrecord.read_batches(files, BATCH, service=shared_service, max_corrupt_records=1)

    history, examples = session_loop(served)  # graph mode: the same whole records
    assert examples == [len(kept)] * 2  # an epoch: each initialization of the iterator
    assert history["id"] == pytest.approx([np.mean(sorted(kept))] * 2)
    assert history[CORRUPT_RECORDS] == [1, 1]
