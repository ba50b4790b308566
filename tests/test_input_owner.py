"""One owner per resource: the queues, their cancel, the coordinator, the signal watcher.

``QueueRunnerHook`` owns a graph's input queues and offers the cancel that
``StopOnSignal``'s watcher calls through ``loop.cancel_input()``; the watcher thread runs
only when the loop has such input; a run has one ``Coordinator``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import tensorflow as tf

import tfr_hooks

v1 = tf.compat.v1
WATCHER = "tfr_hooks-signal-watcher"


class Threads(tfr_hooks.Hook):
    """Notes the thread names during the first step, and the coordinator it was given."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.coord: Any = None

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.coord = coord

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if not self.names:
            self.names = [t.name for t in threading.enumerate()]


def test_function_loop_starts_no_signal_watcher() -> None:
    data = tf.data.Dataset.from_tensor_slices(np.ones((8, 2), np.float32)).batch(4)
    seen = Threads()
    loop = tfr_hooks.FunctionLoop(
        data, step_fn=lambda batch: {"s": tf.reduce_sum(batch)}, hooks=[seen]
    )
    loop.run(epochs=1)
    assert seen.names and WATCHER not in seen.names  # nothing it could unblock
    assert loop.loop.input_cancels == ()


def test_session_loop_without_queues_starts_no_signal_watcher() -> None:
    with tf.Graph().as_default():
        it = v1.data.make_initializable_iterator(tf.data.Dataset.range(6).batch(2))
        step = v1.train.get_or_create_global_step()
        train_op = v1.assign_add(step, it.get_next()[0])
        seen = Threads()
        tfr_hooks.SessionLoop(train_op, hooks=[seen], initializers=[it.initializer]).run()
    assert seen.names and WATCHER not in seen.names


def _queue_graph() -> tuple[Any, Any]:
    """A queue that five batches prefill and a runner that never feeds (it waits)."""
    gate = tf.queue.FIFOQueue(10, [tf.float32], shapes=[[2]])  # nobody ever fills it
    v1.train.add_queue_runner(v1.train.QueueRunner(gate, [gate.enqueue(gate.dequeue())]))
    queue = tf.queue.FIFOQueue(100, [tf.float32], shapes=[[2]])
    v1.train.add_queue_runner(v1.train.QueueRunner(queue, [queue.enqueue(gate.dequeue())]))
    prefill = queue.enqueue_many([tf.ones([5, 2])])
    step = v1.train.get_or_create_global_step()
    train_op = v1.assign_add(step, tf.cast(tf.reduce_sum(queue.dequeue()), tf.int64))
    return train_op, prefill


class CancelWhenBlocked(Threads):
    """After the last prefilled batch, does what the signal watcher does, from its thread."""

    def __init__(self) -> None:
        super().__init__()
        self.timer: threading.Timer | None = None
        self.cancelled: list[bool] = []

    def _unblock(self) -> None:
        self.loop.request_stop("the test's watcher")
        self.cancelled.append(self.loop.cancel_input())

    def after_run(self, run_context: Any, run_values: Any) -> None:
        super().after_run(run_context, run_values)
        if self.loop.epoch_steps == 4:  # the next step blocks on the empty queue
            self.timer = threading.Timer(0.5, self._unblock)
            self.timer.start()


def test_queue_runner_hook_owns_the_cancel_that_unblocks_a_blocked_step() -> None:
    with tf.Graph().as_default():
        train_op, prefill = _queue_graph()
        hook = CancelWhenBlocked()
        loop = tfr_hooks.SessionLoop(
            train_op, hooks=[hook], initializers=[prefill], run_timeout_secs=60
        )
        history = loop.run(epochs=3)
    assert hook.timer is not None
    hook.timer.join(timeout=10)
    # the blocked dequeue failed as the end of the data: one epoch of the five batches
    assert hook.cancelled == [True]
    assert loop.loop.global_step == 5
    assert history == {}  # no fetches asked, one epoch closed
    owners = [h for h in loop.hooks if isinstance(h, tfr_hooks.QueueRunnerHook)]
    assert len(owners) == 1 and loop.loop.input_cancels == (owners[0].cancel,)
    # the signal watcher ran, as there was input it could cancel
    assert WATCHER in hook.names


def test_a_run_has_one_coordinator_which_the_queue_runners_use() -> None:
    with tf.Graph().as_default():
        train_op, prefill = _queue_graph()
        owner = tfr_hooks.QueueRunnerHook()

        class Check(Threads):
            def after_run(self, run_context: Any, run_values: Any) -> None:
                super().after_run(run_context, run_values)
                self.owners_coord = owner.coord

        seen = Check()
        tfr_hooks.SessionLoop(
            train_op, hooks=[owner, seen], steps_per_epoch=3, initializers=[prefill]
        ).run(epochs=1)
    assert seen.coord is not None
    assert seen.owners_coord is seen.coord  # the hooks' coordinator runs the queue threads
