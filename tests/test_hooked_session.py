"""hooked_session: hooks around a script's own ``while``/``sess.run`` loop (was drop_in)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import tensorflow as tf

import tfr_hooks
from conftest import queue_batches

v1 = tf.compat.v1


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


@pytest.mark.usefixtures("default_signal_handlers")
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
