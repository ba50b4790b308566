"""QueueRunnerHook: threads start, stop, unblock and join; their errors reach the caller."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from conftest import queue_batches, write_records
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


def test_hooked_session_drives_a_legacy_while_loop(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_100, 10, num_epochs=None, capacity=40)
    step = v1.train.get_or_create_global_step()
    increment = v1.assign_add(step, 1)  # its value is the step after this run
    seen = []
    with tfr_hooks.hooked_session(hooks=[v1.train.StopAtStepHook(last_step=7)]) as sess:
        while not sess.should_stop():
            seen.append(sess.run([batch["index"], increment])[1])
    assert seen == [1, 2, 3, 4, 5, 6, 7]


def test_hooked_session_ends_quietly_when_the_input_runs_out(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_100, 30, num_epochs=1)
    sizes = []
    with tfr_hooks.hooked_session() as sess:
        while not sess.should_stop():
            sizes.append(len(sess.run(batch["index"])))
    assert sizes == [30, 30, 30, 10]


def test_hooked_session_raises_the_users_error_after_cleanup(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_100, 10, num_epochs=None, capacity=40)
    final = v1.train.FinalOpsHook(tf.constant(7))
    with pytest.raises(ZeroDivisionError), tfr_hooks.hooked_session(hooks=[final]) as sess:
        sess.run(batch["index"])
        _ = 1 / 0
    assert final.final_ops_values == 7


def test_hooked_session_stops_the_users_loop_on_sigint(
    graph: tf.Graph, records_100: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_100, 10, num_epochs=None, capacity=40)
    previous = signal.getsignal(signal.SIGINT)
    steps = 0
    with tfr_hooks.hooked_session() as sess:
        while not sess.should_stop():
            sess.run(batch["index"])
            steps += 1
            if steps == 3:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: handled between two runs
            assert steps < 50, "SIGINT did not stop the loop"
    assert steps in (3, 4)
    assert signal.getsignal(signal.SIGINT) is previous


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
        shuffle_buffer=4 * QBATCH,
        num_parallel_reads=2,
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
