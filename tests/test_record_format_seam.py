"""A record format added as one module, read by every reader that can (issue 53).

``tests/_length_prefixed.py`` frames records by an 8-byte length, a format the package
knows nothing of; registered through the seam, its files read as TFRecord files do:
streamed, in memory and in the global order (each id once an epoch, in the very order
a TFRecord copy of the same records gives), and a pass entered at a record by a seek
gives exactly the records from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf

from _length_prefixed import SUFFIX, LengthPrefixed, write_length_prefixed
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.formats.reading import format_of, register_format, unregister_format

COUNTS = (100, 57, 130)
# the fast run keeps one read streamed and one resumed in the global order; CI runs the rest
SLOW = pytest.mark.slow  # a short block, a file under a block, blocks and a tail


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    register_format(LengthPrefixed)
    yield
    unregister_format(LengthPrefixed)


def _example(i: int) -> bytes:
    example = tf.train.Example()
    example.features.feature["id"].int64_list.value.append(i)
    return example.SerializeToString()


@pytest.fixture
def twins(tmp_path: Path) -> tuple[list[str], list[str]]:
    """The same records as length-prefixed files and as TFRecord files."""
    mine, theirs, first = [], [], 0
    for f, count in enumerate(COUNTS):
        records = [_example(i) for i in range(first, first + count)]
        first += count
        mine.append(write_length_prefixed(tmp_path / f"part-{f}{SUFFIX}", records))
        path = str(tmp_path / f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        theirs.append(path)
    return mine, theirs


def _ids(data: Any) -> list[int]:
    return [int(i) for batch in data for i in batch["id"].numpy()]


def test_the_format_is_recognized_by_name(twins: tuple[list[str], list[str]]) -> None:
    mine, theirs = twins
    assert format_of(mine[0]).name == "length-prefixed"
    assert format_of(theirs[0]).name == "TFRecord"
    assert next(LengthPrefixed().iter_records(mine[1], "")) == _example(100)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="streamed"),
        pytest.param({"in_memory": True}, id="memory", marks=SLOW),
        pytest.param(
            {"in_memory": True, "shuffle": 8, "seed": 4}, id="memory-shuffled", marks=SLOW
        ),
    ],
)
def test_read_streamed_and_in_memory_as_its_tfrecord_twin(
    twins: tuple[list[str], list[str]], options: dict[str, Any]
) -> None:
    mine, theirs = twins
    got = _ids(tfrecord.dataset(mine, 16, **options))  # schema inferred through the format
    assert sorted(got) == list(range(sum(COUNTS)))
    assert got == _ids(tfrecord.dataset(theirs, 16, **options))


@SLOW
def test_the_global_order_reads_each_id_once_an_epoch(
    twins: tuple[list[str], list[str]],
) -> None:
    mine, theirs = twins
    data = tfrecord.dataset(mine, 16, shuffle="global", seed=3, num_epochs=2)
    got = _ids(data)
    total = sum(COUNTS)
    first, second = got[:total], got[total:]
    assert sorted(first) == sorted(second) == list(range(total))
    assert first != second  # a new order each epoch
    twin = tfrecord.dataset(theirs, 16, shuffle="global", seed=3, num_epochs=2)
    assert got == _ids(twin)  # the order depends on the records, not on their framing


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"shuffle": "global", "seed": 3}, id="global"),
        pytest.param({}, id="file", marks=SLOW),
    ],
)
def test_a_pass_entered_at_a_record_by_a_seek_gives_the_records_from_there(
    twins: tuple[list[str], list[str]], options: dict[str, Any]
) -> None:
    mine, _ = twins
    source = tfrecord.source(mine, 13, **options)
    position = source.position
    assert position is not None  # a seek, not a replay

    def ids_from(records: int) -> list[int]:
        position.seek(1, records)
        return _ids(source.dataset)

    whole = ids_from(0)
    assert sorted(whole) == list(range(sum(COUNTS)))
    for at in (1, 13, 99, 100, 128, 129, 200, sum(COUNTS) - 1, sum(COUNTS)):
        assert ids_from(at) == whole[at:], at


def test_the_queue_refuses_a_format_it_cannot_read(twins: tuple[list[str], list[str]]) -> None:
    mine, _ = twins
    with tf.Graph().as_default(), pytest.raises(ValueError, match="length-prefixed files"):
        tfrecord.read_batches(mine, 8, pipeline="queue")
