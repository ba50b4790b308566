"""Shared fixtures: tiny TFRecord data written into tmp_path, and graph-mode helpers.

TensorFlow is imported on first use, not at import: pytest-xdist's controller process loads
this file too, and runs no test (importing TensorFlow there would cost about 13 s of CPU
while the workers start).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from _watchdog import pytest_runtest_protocol  # noqa: F401 (the hook, registered here)

if TYPE_CHECKING:
    import tensorflow as tf


def pytest_configure(config: pytest.Config) -> None:
    """The fast run's budget (``tests/_budget.py``): on when tox's ``fast`` environment sets it."""
    from _budget import configure

    configure(config)


def write_records(path: Path, n: int, *, width: int = 4, seed: int = 0) -> Path:
    """Write ``n`` Examples with an int64 ``index``, a float ``x`` of ``width`` and a label."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, width)).astype(np.float32)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=xs[i])),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
                    }
                )
            )
            writer.write(example.SerializeToString())
    return path


def features() -> dict[str, Any]:
    """The parse spec of :func:`write_records`' Examples."""
    import tensorflow as tf

    return {
        "index": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([4], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    }


def __getattr__(name: str) -> Any:
    """``FEATURES``, the parse spec of :func:`write_records`, built on first use."""
    if name == "FEATURES":
        return features()
    raise AttributeError(name)


@pytest.fixture(scope="session")
def records_1000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 records: with batch 128, 7 full batches and one of 104."""
    return write_records(tmp_path_factory.mktemp("data") / "train.tfrecord", 1000)


@pytest.fixture(scope="session")
def records_100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_records(tmp_path_factory.mktemp("data") / "small.tfrecord", 100, seed=1)


@pytest.fixture
def graph() -> Iterator[tf.Graph]:
    """A fresh graph as the default graph (the rest of the suite stays eager)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(0)
        yield g


@pytest.fixture
def no_leaked_threads() -> Iterator[None]:
    """Fail the test if it leaves threads running.

    A thread the test started and stopped may still be on its way out when the test
    returns: each new thread gets a few seconds to end (a join with a timeout), and one
    still running after that is a leak.
    """
    before = set(threading.enumerate())
    yield
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=10)
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not left, left


def dataset_batches(path: Path, batch_size: int) -> tuple[dict[str, tf.Tensor], tf.Operation]:
    """Graph-mode initializable-iterator batches of ``path``; returns (tensors, initializer)."""
    import tensorflow as tf

    spec = features()
    ds = tf.data.TFRecordDataset(str(path)).batch(batch_size)
    ds = ds.map(lambda s: tf.io.parse_example(s, spec))
    it = tf.compat.v1.data.make_initializable_iterator(ds)
    return it.get_next(), it.initializer


def queue_batches(
    path: Path,
    batch_size: int,
    num_epochs: int | None,
    *,
    shuffle: bool = False,
    capacity: int = 64,
) -> dict[str, tf.Tensor]:
    """Graph-mode queue-runner batches of ``path`` (string_input_producer + reader + batch)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    files = v1.train.string_input_producer([str(path)], num_epochs=num_epochs, shuffle=False)
    _, serialized = v1.TFRecordReader().read(files)
    example = tf.io.parse_single_example(serialized, features())
    if shuffle:
        return v1.train.shuffle_batch(
            example,
            batch_size,
            capacity=capacity,
            min_after_dequeue=batch_size,
            num_threads=2,
            allow_smaller_final_batch=True,
        )
    return v1.train.batch(
        example, batch_size, capacity=capacity, num_threads=1, allow_smaller_final_batch=True
    )


@pytest.fixture
def default_signal_handlers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Python's own SIGINT and SIGTERM handlers for the test, as in a user's script.

    The signal tests check what a run does to a process whose Ctrl-C raises
    ``KeyboardInterrupt`` and whose SIGTERM ends it; a worker process of the suite may
    have inherited other dispositions (an ignored SIGINT). The handlers found are kept
    in the test's ``user_properties`` and put back afterwards.
    """
    assert threading.current_thread() is threading.main_thread(), "signals need the main thread"
    found = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    request.node.user_properties.append(("signal handlers found", repr(found)))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in found.items():
            signal.signal(sig, handler)


@pytest.fixture(scope="session")
def shared_service() -> Iterator[str]:
    """The address of a tf.data service (a dispatcher and 2 workers) that no test harms.

    Started once per test process, on first use, for the tests that only read through a
    service; a test that kills servers starts its own :class:`LocalService`.
    """
    from tfr_hooks.service.local import LocalService

    with LocalService(workers=2, timeout=240) as local:
        yield local.address
