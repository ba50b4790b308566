"""Faults of a tf.data service under the loops: an error naming the address, never a hang.

Real servers (:class:`LocalService` processes on loopback), no mocks. A hook kills
workers (or the dispatcher) after the first steps; TensorFlow 2.21 would then wait
forever, and the loop's service watch (``service_timeout``, small here) ends it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import FunctionLoop, Hook, SessionLoop, tfrecord
from tfr_hooks.data_service import LocalService
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
    with LocalService(workers=2, timeout=START) as service:
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
        hook = KillAt(5, lambda: service.kill_worker(0))
        counts = EpochCounts()
        loop = FunctionLoop(
            served(service.address, size, 10),
            step_fn=step,
            hooks=[hook, counts],
            service_timeout=BOUND,
        )
        with caplog.at_level(logging.WARNING):
            history = loop.run(epochs=2)
        assert len(history["mean"]) == 2
        assert hook.ended
        assert not watch_threads()
    stalls = [r.getMessage() for r in caplog.records if "epoch 0 ends here" in r.getMessage()]
    assert len(stalls) == 1, caplog.text
    assert f"tf.data service at {service.address}: no batch for 10 s" in stalls[0]
    first, second = counts.examples
    assert f"{size - first} of its {size} examples were lost ({first} read)" in stalls[0]
    # the next epoch, on the worker left, reads each example and ends at the epoch's
    # size: its end is not waited for (the dispatcher gives the new job a task on the
    # lost worker too, whose end never comes)
    assert second == size
    logging.getLogger(__name__).warning("FunctionLoop lost-worker epochs: %s", stalls)


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
        hook = KillAt(5, lambda: service.kill_worker(0))
        counts = EpochCounts()
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(str(tmp_path), 10, service=service.address)
            mean = tf.reduce_mean(tf.cast(batches.tensors["id"], tf.float32))
            loop = SessionLoop(
                mean, {"mean": mean}, hooks=[hook, counts], data=batches, service_timeout=BOUND
            )
            with caplog.at_level(logging.WARNING):
                history = loop.run(epochs=2)
        assert len(history["mean"]) == 2
        assert hook.ended
    stalls = [r.getMessage() for r in caplog.records if "epoch 0 ends here" in r.getMessage()]
    assert len(stalls) == 1, caplog.text
    assert f"tf.data service at {service.address}: no batch for 10 s" in stalls[0]
    first, second = counts.examples
    assert f"{size - first} of its {size} examples were lost ({first} read)" in stalls[0]
    # the next epoch, on the worker left, reads each example, and its end is not waited
    # for (the dispatcher gives the new job a task on the lost worker too)
    assert second == size
    logging.getLogger(__name__).warning("SessionLoop lost-worker epochs: %s", stalls)
