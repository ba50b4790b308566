"""Faults of a tf.data service under the loops: an error naming the address, never a hang.

Real servers (:class:`LocalService` processes on loopback), no mocks. A hook kills
workers (or the dispatcher) after the first steps; TensorFlow 2.21 would then wait
forever, and the loop's service watch (``service_timeout``, small here) ends it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import FunctionLoop, Hook, SessionLoop, tfrecord
from tfr_hooks.service.local import LocalService
from tfr_hooks.tfrecord import ReadFacts, Source

#: seconds a server may take to start on a loaded 2-core machine (it imports TensorFlow)
START = 120
BOUND = 10.0
#: what the watch may take beyond its checks: an RPC's timeout, the cancellation
MARGIN = 15.0


def distributed(address: str, size: int, batch: int) -> tf.data.Dataset:
    """A user's own pipeline through the service: ``distribute`` called directly."""
    return (
        tf.data.Dataset.range(size)
        .batch(batch)
        .apply(
            tf.data.experimental.service.distribute(
                processing_mode="distributed_epoch", service=address
            )
        )
    )


def served(address: str, size: int, batch: int) -> Source:
    """The same, with the facts a reader would give: the service and the epoch's size."""
    facts = ReadFacts(service=address, examples=size, batch_size=batch)
    return Source(distributed(address, size, batch), facts)


def step(batch: tf.Tensor) -> dict[str, tf.Tensor]:
    return {"mean": tf.reduce_mean(tf.cast(batch, tf.float32))}


class KillAt(Hook):
    """Calls ``kill`` after step ``at`` (once); counts the steps and the end."""

    def __init__(self, at: int, kill: Any) -> None:
        self.at, self.kill = at, kill
        self.steps = 0
        self.ended = False
        self.killed_at: float | None = None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1
        if self.steps == self.at:
            self.kill()
            self.killed_at = time.monotonic()

    def end(self, session: Any) -> None:
        self.ended = True


class EpochCounts(Hook):
    """Records each epoch's examples, as the loop reports them."""

    def __init__(self) -> None:
        self.examples: list[int] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.examples.append(self.loop.epoch_examples)


def kill_all(service: LocalService) -> None:
    for i in range(len(service.workers)):
        service.kill_worker(i)


def kill_dispatcher(service: LocalService) -> None:
    assert service.dispatcher is not None
    service.dispatcher.kill()
    service.dispatcher.wait(timeout=30)


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ServiceWatch")]


#: steps before the kill: late enough that the lost worker mostly holds a share of the
#: first pass, which then stalls; on a loaded machine it may not have started it yet
KILL_AT = 40
#: the passes of a lost-worker run: the first or the second stalls, and one follows it
LOST_EPOCHS = 3


def check_lost_worker_run(
    records: list[logging.LogRecord], address: str, examples: list[int], size: int
) -> None:
    """One pass stalled and was warned of with its lost examples; every other read all.

    The lost worker stalls the first pass when it held a share of it; when it was killed
    before it took any (a loaded machine), the first pass reads all from the worker left
    and the second stalls instead: TensorFlow 2.21's dispatcher gives its new job a task
    on the lost worker, whose end never comes. Either way the passes after the stall end
    at the epoch's size, with no second wait.
    """
    stalls = [r.getMessage() for r in records if re.search(r"epoch \d+ ends here", r.getMessage())]
    assert len(stalls) == 1, stalls
    found = re.search(r"epoch (\d+) ends here", stalls[0])
    assert found is not None
    stalled = int(found.group(1))
    assert stalled in (0, 1), stalls
    assert f"tf.data service at {address}: no batch for 10 s" in stalls[0]
    read = examples[stalled]
    assert f"{size - read} of its {size} examples were lost ({read} read)" in stalls[0]
    assert len(examples) == LOST_EPOCHS
    assert [n for i, n in enumerate(examples) if i != stalled] == [size] * (LOST_EPOCHS - 1)


@pytest.mark.slow  # a served read: about 1.5 s of CPU
def test_no_attribute_is_set_on_a_tf_data_object(tmp_path: Any) -> None:
    tfrecord.write({"x": np.arange(10, dtype=np.int64)}, tmp_path)
    for data in (
        tfrecord.dataset(str(tmp_path), 4),
        tfrecord.source(str(tmp_path), 4).dataset,
        tfrecord.dataset(str(tmp_path), 4, in_memory=True),
    ):
        ours = [name for name in vars(data) if name.startswith("_tfr_hooks")]
        assert not ours, ours


def test_service_timeout_is_checked() -> None:
    dataset = tf.data.Dataset.range(3).batch(1)
    with pytest.raises(ValueError, match="Received: service_timeout=0"):
        FunctionLoop(dataset, step_fn=step, service_timeout=0)
    with pytest.raises(TypeError, match="Received: service_timeout='1'"):
        FunctionLoop(dataset, step_fn=step, service_timeout="1")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
@pytest.mark.parametrize(
    ("kill", "reason", "build"),
    [
        (kill_dispatcher, "dispatcher unreachable", "source"),
        (kill_all, "no worker left", "reader-map"),
    ],
    ids=["dispatcher", "all-workers-reader-then-map"],
)
def test_function_loop_ends_with_the_address_once_the_service_is_gone(
    kill: Any, reason: str, build: str, tmp_path: Any
) -> None:
    # one worker: the dispatcher's loss, or the loss of every worker, is the same with
    # more (the tests below lose one of two), and each server is a process importing TF
    with LocalService(workers=1, timeout=START) as service:
        hook = KillAt(5, lambda: kill(service))
        data: Any = served(service.address, 1_000_000, 10)
        if build == "reader-map":  # the case: augmentation after a served reader
            tfrecord.write({"x": np.arange(50_000, dtype=np.int64)}, tmp_path, shards=4)
            data = tfrecord.dataset(
                str(tmp_path), 16, as_tuple=("x",), num_epochs=None, service=service.address
            ).map(lambda x: x * 1)
        loop = FunctionLoop(
            data,
            step_fn=step,
            hooks=[hook],
            service_timeout=BOUND,
        )
        with pytest.raises(
            ConnectionError, match=f"tf.data service at {service.address}: {reason}"
        ):
            loop.run(epochs=1)
        assert hook.killed_at is not None
        waited = time.monotonic() - hook.killed_at
        logging.getLogger(__name__).warning("FunctionLoop %s: error after %.1f s", reason, waited)
        assert waited < BOUND + MARGIN
        assert hook.ended
        assert not watch_threads()


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_function_loop_goes_on_with_the_other_worker_and_warns_of_the_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    size = 4_000
    with LocalService(workers=2, timeout=START, worker_timeout_ms=1000) as service:
        hook = KillAt(KILL_AT, lambda: service.kill_worker(0))
        counts = EpochCounts()
        loop = FunctionLoop(
            served(service.address, size, 10),
            step_fn=step,
            hooks=[hook, counts],
            service_timeout=BOUND,
        )
        with caplog.at_level(logging.WARNING):
            history = loop.run(epochs=LOST_EPOCHS)
        assert len(history["mean"]) == LOST_EPOCHS
        assert hook.ended
        assert not watch_threads()
    check_lost_worker_run(caplog.records, service.address, counts.examples, size)
    logging.getLogger(__name__).warning("FunctionLoop lost-worker epochs: %s", counts.examples)


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_session_loop_ends_with_the_address_once_no_worker_is_left() -> None:
    with LocalService(workers=1, timeout=START) as service:
        hook = KillAt(5, lambda: kill_all(service))
        with tf.Graph().as_default():
            # the user's own pipeline, transformed after the service: found in the graph
            dataset = distributed(service.address, 1_000_000, 10).map(lambda x: x + 1)
            iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
            batch = iterator.get_next()
            loop = SessionLoop(
                tf.reduce_mean(tf.cast(batch, tf.float32)),
                hooks=[hook],
                initializers=[iterator.initializer],
                service_timeout=BOUND,
            )
            assert loop.service == service.address  # found in the graph
            with pytest.raises(ConnectionError, match=f"tf.data service at {service.address}"):
                loop.run(epochs=1)
        assert hook.killed_at is not None
        waited = time.monotonic() - hook.killed_at
        logging.getLogger(__name__).warning("SessionLoop: error after %.1f s", waited)
        assert waited < BOUND + MARGIN
        assert hook.ended
        assert not watch_threads()


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_session_loop_goes_on_with_the_other_worker_and_warns_of_the_lost(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    size = 4_000
    tfrecord.write({"id": np.arange(size, dtype=np.int64)}, tmp_path, shards=8)
    with LocalService(workers=2, timeout=START, worker_timeout_ms=1000) as service:
        hook = KillAt(KILL_AT, lambda: service.kill_worker(0))
        counts = EpochCounts()
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(str(tmp_path), 10, service=service.address)
            mean = tf.reduce_mean(tf.cast(batches.tensors["id"], tf.float32))
            loop = SessionLoop(
                mean, {"mean": mean}, hooks=[hook, counts], data=batches, service_timeout=BOUND
            )
            with caplog.at_level(logging.WARNING):
                history = loop.run(epochs=LOST_EPOCHS)
        assert len(history["mean"]) == LOST_EPOCHS
        assert hook.ended
    check_lost_worker_run(caplog.records, service.address, counts.examples, size)
    logging.getLogger(__name__).warning("SessionLoop lost-worker epochs: %s", counts.examples)
