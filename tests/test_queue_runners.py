"""QueueRunnerHook: threads start, stop, unblock and join; their errors reach the caller."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from conftest import queue_batches, write_records
from helpers import WATCHER, Threads, metrics
from tfr_hooks import tfrecord

v1 = tf.compat.v1


def test_queue_runner_hook_is_added_and_threads_are_joined(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_100, 10, num_epochs=2, shuffle=True, capacity=40)
    counts: list[int] = []

    class CountThreads(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            counts.append(threading.active_count())

    loop = tfr_hooks.SessionLoop(batch["index"], hooks=[CountThreads()])
    assert isinstance(loop.hooks.hooks[0], tfr_hooks.QueueRunnerHook)
    before = threading.active_count()
    loop.run(epochs=1)
    assert max(counts) > before  # the runners' threads were running during the steps
    assert loop.loop.global_step == 20


def test_threads_are_joined_after_a_stop_request(
    graph: tf.Graph, records_1000: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_1000, 10, num_epochs=None, shuffle=True, capacity=50)
    step = v1.train.get_or_create_global_step()  # StopAtStepHook reads the global step
    loop = tfr_hooks.SessionLoop(
        tf.group(batch["index"], v1.assign_add(step, 1)),
        hooks=[v1.train.StopAtStepHook(num_steps=3)],
    )
    loop.run(epochs=1)
    assert loop.loop.global_step == 3


def test_threads_are_joined_after_an_exception(
    graph: tf.Graph, records_1000: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_1000, 10, num_epochs=None, shuffle=True, capacity=50)

    class Fail(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            if self.loop.global_step == 2:
                raise RuntimeError("hook failed at step 2")

    with pytest.raises(RuntimeError, match="hook failed at step 2"):
        tfr_hooks.SessionLoop(batch["index"], hooks=[Fail()]).run(epochs=1)


def test_threads_are_joined_after_keyboard_interrupt(
    graph: tf.Graph, records_1000: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_1000, 10, num_epochs=None, capacity=50)

    class Interrupt(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            raise KeyboardInterrupt

    loop = tfr_hooks.SessionLoop(batch["index"], hooks=[Interrupt()])
    with pytest.raises(KeyboardInterrupt):
        loop.run(epochs=1)


def test_stop_while_the_queue_is_full_does_not_hang(
    graph: tf.Graph, no_leaked_threads: None
) -> None:
    # producers far faster than the consumer: every enqueue thread blocks on a full queue
    queue = tf.queue.FIFOQueue(2, [tf.int64], shapes=[[]])
    runner = v1.train.QueueRunner(queue, [queue.enqueue(tf.constant(1, tf.int64))] * 4)
    v1.train.add_queue_runner(runner)
    hook = tfr_hooks.QueueRunnerHook(grace_period_secs=5)

    class StopAtOnce(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            run_context.request_stop()

    loop = tfr_hooks.SessionLoop(queue.dequeue(), hooks=[hook, StopAtOnce()])
    finished = threading.Event()

    def run() -> None:
        loop.run(epochs=1)
        finished.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert finished.is_set(), "SessionLoop.run hung with producers blocked on a full queue"
    assert hook.threads == []


def test_an_error_in_a_queue_thread_comes_out_of_run(
    graph: tf.Graph, tmp_path: Path, no_leaked_threads: None
) -> None:
    path = write_records(tmp_path / "broken.tfrecord", 50)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: a CRC mismatch inside the file
    path.write_bytes(bytes(data))
    batch = queue_batches(path, 10, num_epochs=1)
    loop = tfr_hooks.SessionLoop(batch["index"], run_timeout_secs=30)
    with pytest.raises(tf.errors.DataLossError, match=r"corrupted record"):
        loop.run(epochs=1)
    assert loop.loop.global_step < 5  # stopped at the bad record, not at the end


def test_queue_runner_hook_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match=r"Received: queue_runners\[0\]='runner'"):
        tfr_hooks.QueueRunnerHook(queue_runners=["runner"])
    with pytest.raises(ValueError, match=r"Received: grace_period_secs=0"):
        tfr_hooks.QueueRunnerHook(grace_period_secs=0)


# -- read_batches(pipeline="queue") as SessionLoop(data=...): one stream of passes --------

PASS, QBATCH = 100, 16  # 6.25 batches a pass: batches cross the epoch boundaries


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards written by tfrecord.write: their schema.json counts the examples."""
    x = np.arange(PASS * 2, dtype=np.float32).reshape(PASS, 2)
    directory = tmp_path_factory.mktemp("counted")
    tfrecord.write({"x": x, "label": np.arange(PASS)}, directory, shards=2)
    return directory


class EpochExamples(tfr_hooks.Hook):
    """Notes each epoch's examples; stops a run that would never end (so a bug fails)."""

    def begin(self) -> None:
        self.examples: list[int] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.loop.global_step >= 200:
            self.loop.request_stop("the test's guard: the loop never ended an epoch")

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.examples.append(self.loop.epoch_examples)


def _queue_loop(files: Path, num_epochs: int | None, **loop_kwargs: Any) -> Any:
    batches = tfrecord.read_batches(
        files,
        QBATCH,
        pipeline="queue",
        num_epochs=num_epochs,
        shuffle=4 * QBATCH,
        read_config=tfrecord.ReadConfig(num_parallel_reads=2),
        seed=1,
    )
    x = batches.tensors["x"]
    seen = tf.Variable(0.0, name="seen")
    train_op = seen.assign_add(tf.cast(tf.shape(x)[0], tf.float32))
    return tfr_hooks.SessionLoop(
        train_op, {"mean_x": tf.reduce_mean(x)}, data=batches, **loop_kwargs
    )


@pytest.mark.timeout(60)
def test_a_queue_pipeline_of_num_epochs_passes_gives_one_epoch_a_pass(
    graph: tf.Graph, counted: Path, no_leaked_threads: None
) -> None:
    # docs/tfrecord.md: pipeline="dataset" switched to "queue", with num_epochs=5
    probe = EpochExamples()
    loop = _queue_loop(counted, 5, hooks=[probe])
    history = loop.run(epochs=5)
    assert len(history["mean_x"]) == 5
    assert sum(probe.examples) == 5 * PASS  # the whole stream, nothing left over
    # each epoch ends with the batch that reaches the next multiple of a pass
    assert probe.examples == [112, 96, 96, 96, 100]
    assert loop.loop.global_step == -(-5 * PASS // QBATCH)


@pytest.mark.timeout(60)
def test_an_endless_queue_pipeline_of_counted_files_ends_after_epochs(
    graph: tf.Graph, counted: Path, no_leaked_threads: None
) -> None:
    # docs/tfrecord.md's comment taken literally: "queue", and no num_epochs
    probe = EpochExamples()
    history = _queue_loop(counted, None, hooks=[probe]).run(epochs=3)
    assert len(history["mean_x"]) == 3
    assert probe.examples == [112, 96, 96]


@pytest.mark.timeout(60)
def test_a_queue_pipeline_that_could_never_end_an_epoch_is_refused(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    # no schema.json: nothing counts a pass, and num_epochs=None never runs out
    with pytest.raises(ValueError, match=r"Pass steps_per_epoch=\.\.\. .*num_epochs=\.\.\."):
        _queue_loop(records_100, None)
    probe = EpochExamples()
    history = _queue_loop(records_100, None, steps_per_epoch=3, hooks=[probe]).run(epochs=2)
    assert len(history["mean_x"]) == 2 and probe.examples == [48, 48]


@pytest.mark.timeout(60)
def test_epochs_a_queue_stream_cannot_give_are_refused_at_run_start(
    graph: tf.Graph, counted: Path, records_100: Path, no_leaked_threads: None
) -> None:
    loop = _queue_loop(counted, 2)
    with pytest.raises(ValueError, match=r"Pass num_epochs=3 .*Received: epochs=3"):
        loop.run(epochs=3)
    assert len(loop.run(epochs=3, initial_epoch=1)["mean_x"]) == 2  # resuming: 2 passes
    # uncounted files: the stream's passes cannot be told apart
    uncounted = _queue_loop(records_100, 2)
    with pytest.raises(ValueError, match=r"Pass steps_per_epoch=.*Received: epochs=2"):
        uncounted.run(epochs=2)
    history = uncounted.run(epochs=1)  # the whole stream is the one epoch asked for
    assert len(history["mean_x"]) == 1 and uncounted.loop.epoch_examples == 2 * PASS


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
    assert metrics(history) == {}  # no fetches asked, one epoch closed
    owners = [h for h in loop.hooks if isinstance(h, tfr_hooks.QueueRunnerHook)]
    # the queues' owner first; the runner's cancel (closing the session) only after it
    assert len(owners) == 1 and loop.loop.input_cancels[0] == owners[0].cancel
    assert len(loop.loop.input_cancels) == 2
    # the signal watcher ran, as there was input it could cancel
    assert WATCHER in hook.names


@pytest.mark.slow  # a queue-fed run: about 1 s of CPU
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
