"""Every private TensorFlow API of ``tfr_hooks/tf_private.py``, on the installed TensorFlow.

A release that moves one fails here, not in a run that would then hang. Real objects only.
"""

from __future__ import annotations

import threading
import time

import pytest
import tensorflow as tf

from tfr_hooks import tf_private

START = 120  # a server imports TensorFlow on two shared cores


def test_a_blocked_call_is_cancelled_from_another_thread() -> None:
    queue = tf.queue.FIFOQueue(1, tf.float32, shapes=[])

    @tf.function
    def wait_for_an_element() -> tf.Tensor:
        return queue.dequeue()  # nothing is ever enqueued: it blocks

    wait_for_an_element.get_concrete_function()  # traced before the clock starts
    manager = tf_private.cancellation_manager()
    assert not tf_private.is_cancelled(manager)
    timer = threading.Timer(0.5, tf_private.start_cancel, args=(manager,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(tf.errors.CancelledError):
        tf_private.call_cancellable(manager, wait_for_an_element)
    timer.join(timeout=10)
    assert time.monotonic() - started < 30
    assert tf_private.is_cancelled(manager)


def test_a_call_that_is_not_cancelled_returns_its_value() -> None:
    manager = tf_private.cancellation_manager()
    assert int(tf_private.call_cancellable(manager, tf.function(lambda: tf.constant(3)))) == 3


def test_a_dataset_without_a_service_names_none() -> None:
    assert tf_private.service_addresses(tf.data.Dataset.range(5).map(lambda x: x + 1)) == []
    with tf.Graph().as_default():
        assert tf_private.service_addresses(tf.data.Dataset.range(5).batch(2)) == []


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(4 * START)
def test_the_service_of_a_transformed_dataset_is_found_in_its_graph(shared_service: str) -> None:
    address = shared_service
    distribute = tf.data.experimental.service.distribute("distributed_epoch", address)
    data = tf.data.Dataset.range(10).apply(distribute)
    assert tf_private.service_addresses(data) == [address]
    options = tf.data.Options()
    options.deterministic = True
    mapped = data.map(lambda x: x * 2).prefetch(1).with_options(options).take(3)
    assert tf_private.service_addresses(mapped) == [address]
    # read inside a function of the pipeline (flat_map): in the function library
    inner = tf.data.Dataset.range(1).flat_map(lambda _: tf.data.Dataset.range(4).apply(distribute))
    assert tf_private.service_addresses(inner) == [address]
    with tf.Graph().as_default():
        graph_data = tf.data.Dataset.range(10).apply(distribute).map(lambda x: x)
        assert tf_private.service_addresses(graph_data) == [address]
