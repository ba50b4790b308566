"""QueueRunnerHook: threads start, stop, unblock and join; their errors reach the caller."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf

import tfr_hooks
from conftest import queue_batches, write_records

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
