"""One order axis, ``shuffle=``, on every reader (issue 53).

``shuffle=None`` the stored order, ``shuffle=N`` a buffer of N, ``shuffle="global"`` the
global order, streamed and in memory alike; ``shuffle_buffer=N`` is the deprecated
spelling of ``shuffle=N``. The files come from a plain ``tf.io.TFRecordWriter``, the
examples in ``index`` order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf

from _tfrecord_data import example, int64_feature, write_records
from tfr_hooks import tfrecord

N = 200
BATCH = 16


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``N`` examples (``index`` 0..N-1) in one file, in order: the stored order."""
    path = tmp_path_factory.mktemp("ordered") / "part-0.tfrecord"
    return [write_records(path, [example(index=int64_feature([i])) for i in range(N)])]


def _epochs(data: tf.data.Dataset, epochs: int = 2) -> list[list[int]]:
    """The ``index`` values of ``epochs`` passes, a new iterator each."""
    return [[int(i) for b in data for i in b["index"].numpy()] for _ in range(epochs)]


def _graph_epochs(files: list[str], epochs: int = 2, **options: Any) -> list[list[int]]:
    """The ``index`` values of ``epochs`` initializations of ``read_batches``."""
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(files, BATCH, **options)
        index = batches.tensors["index"]
        out = []
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            for _ in range(epochs):
                session.run(batches.initializers)
                seen: list[int] = []
                while True:
                    try:
                        seen.extend(int(i) for i in session.run(index))
                    except tf.errors.OutOfRangeError:
                        break
                out.append(seen)
    return out


def _a_buffer_of(order: list[int], buffer: int) -> bool:
    """Whether ``order`` could come out of a shuffle buffer of ``buffer`` over 0, 1, ...

    A buffer holds the next ``buffer`` examples of the stream: the example at place p
    is one of the first ``p + buffer`` of it.
    """
    return all(index < place + buffer for place, index in enumerate(order))


SLOW = pytest.mark.slow  # the fast run keeps one case of each behaviour


@pytest.mark.parametrize(
    "reader",
    ["dataset", pytest.param("source", marks=SLOW), pytest.param("read_batches", marks=SLOW)],
)
def test_shuffle_buffer_warns_naming_shuffle_and_reads_the_batches_of_shuffle_n(
    files: list[str], reader: str
) -> None:
    if reader == "read_batches":
        with pytest.warns(DeprecationWarning, match=r"shuffle_buffer=32 .*write shuffle=32"):
            old = _graph_epochs(files, shuffle_buffer=32, seed=5)
        assert old == _graph_epochs(files, shuffle=32, seed=5)
    else:
        read = getattr(tfrecord, reader)
        with pytest.warns(DeprecationWarning, match=r"shuffle_buffer=32 .*write shuffle=32") as w:
            old_data = read(files, BATCH, shuffle_buffer=32, seed=5)
        assert w[0].filename == __file__  # shown to the script that wrote it
        new_data = read(files, BATCH, shuffle=32, seed=5)
        if reader == "source":
            old_data, new_data = old_data.dataset, new_data.dataset
        old = _epochs(old_data)
        assert old == _epochs(new_data)
    assert old[0] != old[1]  # shuffled: a new order each pass
    assert all(sorted(epoch) == list(range(N)) for epoch in old)


@SLOW
def test_shuffle_buffer_zero_warns_and_reads_the_stored_order(files: list[str]) -> None:
    with pytest.warns(DeprecationWarning, match=r"shuffle_buffer=0 .*write shuffle=None"):
        data = tfrecord.dataset(files, BATCH, shuffle_buffer=0)
    assert _epochs(data, 1) == [list(range(N))]
    with pytest.warns(DeprecationWarning):  # no buffer: nothing to choose between
        data = tfrecord.dataset(files, BATCH, shuffle="global", shuffle_buffer=0, seed=1)
    assert sorted(_epochs(data, 1)[0]) == list(range(N))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"shuffle": 8, "shuffle_buffer": 16}, r"Received: shuffle=8, shuffle_buffer=16"),
        (
            {"shuffle": "global", "shuffle_buffer": 4},
            r"shuffle_buffer=N is the deprecated spelling of shuffle=N.*"
            r"Received: shuffle='global', shuffle_buffer=4",
        ),
        ({"shuffle": 0}, r"Received: shuffle=0"),
        ({"shuffle": -3}, r"Received: shuffle=-3"),
        ({"shuffle": True}, r"Received: shuffle=True"),
        ({"shuffle": 2.5}, r"Received: shuffle=2.5"),
        ({"shuffle": "local"}, r"None.*a positive int.*'global'.*Received: shuffle='local'"),
        ({"shuffle_buffer": -1}, r"Received: shuffle_buffer=-1"),
        ({"shuffle_buffer": True}, r"Received: shuffle_buffer=True"),
    ],
)
def test_bad_orders_are_errors_naming_the_arguments(
    files: list[str], options: dict[str, Any], match: str
) -> None:
    for reader in (tfrecord.dataset, tfrecord.source):
        with pytest.raises(ValueError, match=match):
            reader(files, BATCH, **options)
    with tf.Graph().as_default(), pytest.raises(ValueError, match=match):
        tfrecord.read_batches(files, BATCH, **options)


@SLOW  # the fast run serves a buffer in tests/test_tfrecord_memory.py
def test_in_memory_shuffle_n_is_a_buffer_over_the_held_examples(files: list[str]) -> None:
    data = tfrecord.dataset(files, BATCH, in_memory=True, shuffle=8, seed=2)
    epochs = _epochs(data, 3)
    for order in epochs:
        assert sorted(order) == list(range(N))  # every example once
        assert order != list(range(N))  # shuffled
        assert _a_buffer_of(order, 8)  # no example comes out before it enters the buffer
    assert epochs[0] != epochs[1] != epochs[2]  # reshuffled each pass
    again = _epochs(tfrecord.dataset(files, BATCH, in_memory=True, shuffle=8, seed=2), 3)
    assert again == epochs  # the seed fixes the sequence of orders
    graph = _graph_epochs(files, 2, in_memory=True, shuffle=8, seed=2)
    assert all(sorted(o) == list(range(N)) and _a_buffer_of(o, 8) for o in graph)
    assert graph[0] != graph[1]


@SLOW
def test_in_memory_shuffle_one_is_the_stored_order(files: list[str]) -> None:
    data = tfrecord.dataset(files, BATCH, in_memory=True, shuffle=1, seed=2)
    assert _epochs(data) == [list(range(N))] * 2


@SLOW
def test_in_memory_global_is_a_full_permutation_each_pass(files: list[str]) -> None:
    data = tfrecord.dataset(files, BATCH, in_memory=True, shuffle="global", seed=2)
    epochs = _epochs(data)
    for order in epochs:
        assert sorted(order) == list(range(N))
        assert not _a_buffer_of(order, N // 4)  # examples from anywhere, even the end
        assert max(order[:BATCH]) >= N // 2  # the first batch reaches the second half
    assert epochs[0] != epochs[1]
    assert _epochs(tfrecord.dataset(files, BATCH, in_memory=True), 1) == [list(range(N))]


@SLOW
def test_in_memory_shuffle_n_resumes_by_replay_and_global_by_seek(files: list[str]) -> None:
    buffer = tfrecord.source(files, BATCH, in_memory=True, shuffle=8, seed=1)
    assert buffer.position is None  # as streamed: a buffer's order is replayed
    whole = tfrecord.source(files, BATCH, in_memory=True, shuffle="global", seed=1)
    assert whole.position is not None


def test_the_docs_no_longer_write_shuffle_buffer() -> None:
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            assert "shuffle_buffer=" not in line or "deprecated" in line, (page, line)


@SLOW
def test_in_memory_shuffle_n_under_a_global_seed_of_zero(files: list[str]) -> None:
    tf.random.set_seed(0)  # a common script's first line
    try:
        data = tfrecord.dataset(files, BATCH, in_memory=True, shuffle=8, seed=2)
        order = _epochs(data, 1)[0]
    finally:
        tf.random.set_seed(None)
    assert sorted(order) == list(range(N)) and _a_buffer_of(order, 8)
