"""ArrayRecord read by index (issue 55): a resume by seek reads nothing before its position.

ArrayRecord files are random access. A resumed unshuffled pass enters each file at its
record itself, and the global order reads a window's records in the window's order, a
piece at a time, by record number (``tfr_hooks/tfrecord/pipelines/orders/index_reads.py``),
so a pass entered at a position reads the records from it on, and nothing else.

What is read is counted at ``array_record``'s own reader (``tests/_arrayrecord_reads.py``):
every reader the format opens is a real ``ArrayRecordReader`` whose ``read`` calls are
recorded as ``(file, record)`` pairs.
The files are written by ``array_record``'s ``ArrayRecordWriter`` with ``group_size:1``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from array_record.python import array_record_module

from _arrayrecord_reads import counted_reads, stop_counting
from _tfrecord_data import example, int64_feature
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.formats.reading import format_of
from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalOrder

SIZES = (300, 1, 429, 170)  # blocks of 128 and short blocks, a file of one record


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    directory = tmp_path_factory.mktemp("index_reads")
    paths, start = [], 0
    for n, size in enumerate(SIZES):
        path = str(directory / f"part-{n}.array_record")
        writer = array_record_module.ArrayRecordWriter(path, "group_size:1")
        for i in range(start, start + size):
            writer.write(example(id=int64_feature([i])))
        writer.close()
        paths.append(path)
        start += size
    return paths


@pytest.fixture
def asked(monkeypatch) -> Iterator[list[tuple[str, int]]]:
    """The records ``array_record``'s readers are asked for, as ``(file, record)`` pairs."""
    yield counted_reads(monkeypatch)
    stop_counting(monkeypatch)


def _ids(batches) -> list[int]:
    return [int(i) for batch in batches for i in np.asarray(batch["id"]).reshape(-1)]


def _record_of(ids: list[int]) -> list[tuple[str, int]]:
    """Where each id was written: ``(file name, record number)``."""
    starts = np.cumsum((0, *SIZES))
    out = []
    for i in ids:
        n = int(np.searchsorted(starts, i, side="right")) - 1
        out.append((f"part-{n}.array_record", i - int(starts[n])))
    return out


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="unshuffled"),
        pytest.param({"shuffle": "global", "seed": 3}, id="global"),
    ],
)
def test_a_resume_by_seek_reads_exactly_the_records_from_its_position_on(files, asked, options):
    """Resumed at record ``at`` of an epoch, the pass reads the epoch's records from ``at``
    on, each once, and no record before ``at`` (not the rest of its block of 128, nor of
    its window)."""
    source = tfrecord.source(files, 10, num_epochs=1, **options)
    position = source.position
    assert position is not None  # a seek, not a replay
    position.seek(0, 0)
    whole = _ids(source.dataset)
    assert sorted(whole) == list(range(sum(SIZES)))
    for at in (0, 137, 455, 899):
        position.seek(0, at)
        asked.clear()
        rest = _ids(source.dataset)
        assert rest == whole[at:], at
        assert Counter(asked) == Counter(_record_of(rest)), at


@pytest.mark.slow  # windows and pieces read at five positions: about 3 s (fast-run budget)
def test_the_global_order_reads_a_window_in_its_order_a_piece_a_call(files):
    """The records and order of the window reads, in pieces of ``piece`` records read
    with one call each (across the windows' ends), from a position when it has one."""
    reading = format_of(files[0])
    order = GlobalOrder([reading.index(f, "") for f in files], seed=5, window=256)
    assert order.windows > 1
    for epoch, start in ((0, 0), (1, 0), (1, 300), (2, order.total - 1), (0, order.total)):
        windows = [v.numpy() for v in order.windows_of(epoch, start=start)]
        pieces = [v.numpy() for v in order.pieces_of(epoch, start=start, piece=100)]
        assert np.array_equal(np.concatenate([*pieces, []]), np.concatenate(windows)), start
        assert all(len(p) == 100 for p in pieces[:-1])  # cut across the windows
    whole = np.concatenate([v.numpy() for v in order.windows_of(1)])
    at = tf.constant(300, tf.int64)  # a resumed pass's position: read when it starts
    tensor = [v.numpy() for v in order.pieces_of(1, start=at, piece=64)]
    assert np.array_equal(np.concatenate(tensor), whole[300:])


def test_records_at_reads_any_records_of_several_files_in_the_order_asked(files):
    reading = format_of(files[0])
    assert reading.by_index
    which = tf.constant([3, 0, 2, 0, 1, 2], tf.int64)
    records = tf.constant([169, 299, 0, 7, 0, 428], tf.int64)
    got = reading.records_at(files, which, records).numpy()
    parsed = tf.io.parse_example(got, {"id": tf.io.FixedLenFeature([], tf.int64)})
    assert parsed["id"].numpy().tolist() == [899, 299, 301, 7, 300, 729]
    with pytest.raises((tf.errors.OpError, IndexError), match="record=429"):
        reading.records_at(files, tf.constant([2], tf.int64), tf.constant([429], tf.int64))


def test_a_stream_format_refuses_records_at_naming_it(tmp_path: Path):
    from _tfrecord_data import write_records

    path = write_records(tmp_path / "a.tfrecord", [example(id=int64_feature([1]))])
    with pytest.raises(ValueError, match="TFRecord files are read as a stream"):
        format_of(path).records_at([path], tf.constant([0]), tf.constant([0]))
