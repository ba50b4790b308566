"""Signals and SIGKILL against a real training process (issue 7, items 3 and 4).

Each scenario test starts its own process running ``tests/_fault_scripts/train.py`` and
signals it as soon as it reports it is ready, so no test depends on how long the tests
before it took; the process is killed at the test's end whatever happens. Every wait is
bounded; the bounds are generous hang detectors, not speed requirements.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tfr_hooks
from conftest import write_records
from helpers import WATCHER, Threads, metrics
from tfr_hooks.graph.checkpoint import resume_position_of

SCRIPT = Path(__file__).parent / "_fault_scripts" / "train.py"
v1 = tf.compat.v1
START_TIMEOUT_S = 240  # importing TensorFlow on two slow, shared cores
STOP_TIMEOUT_S = 30  # a graceful stop must end the process within this
BLOCK_S = 2  # after the last step it can take, a process is blocked well within this
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("default_signal_handlers")]


def _default_signals() -> None:
    """Give the child the default SIGINT/SIGTERM dispositions a terminal would.

    A suite started in the background by a non-interactive shell inherits SIGINT ignored,
    and ``StopOnSignal`` rightly leaves ignored signals alone (as under ``nohup``): reset
    them so that the scenarios test the handling a user at a terminal gets.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Proc:
    """A scenario process, with line waits that never block past their timeout."""

    def __init__(self, scenario: str, logdir: Path, data: Path | None = None) -> None:
        self.scenario, self.logdir = scenario, logdir
        logdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, str(SCRIPT), "--scenario", scenario, "--logdir", str(logdir)]
        if data is not None:
            cmd += ["--data", str(data)]
        self.stderr_path = logdir.parent / f"{scenario}.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in kill()
        self.popen = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            preexec_fn=_default_signals,
        )
        self.lines: list[str] = []
        self._buffer = b""

    def wait_for(self, prefix: str, timeout: float) -> str:
        """Return the first stdout line starting with ``prefix``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        fd = self.popen.stdout.fileno()
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{self.scenario}: no {prefix!r} line in {timeout} s\n{self.tail()}"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:  # the process closed stdout
                    self.lines.append("")
                    raise AssertionError(
                        f"{self.scenario}: exited before {prefix!r}\n{self.tail()}"
                    )
                self._buffer += chunk
                *complete, self._buffer = self._buffer.split(b"\n")
                self.lines.extend(line.decode() for line in complete)

    def result(self) -> dict:
        return json.loads(self.wait_for("RESULT", STOP_TIMEOUT_S).split(" ", 1)[1])

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.scenario}: still running after {timeout} s\n{self.tail()}"
            ) from None

    def tail(self) -> str:
        self._stderr.flush()
        return (
            "stdout: "
            + "\n".join(self.lines[-10:])
            + "\nstderr: "
            + self.stderr_path.read_text(errors="replace")[-3000:]
        )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)
        self.popen.stdout.close()
        self._stderr.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start a scenario process for this test only; it is killed when the test ends."""
    started: list[Proc] = []

    def _start(scenario: str, data: Path | None = None) -> Proc:
        started.append(Proc(scenario, tmp_path / scenario, data))
        return started[-1]

    try:
        yield _start
    finally:
        for proc in started:
            proc.kill()


def _load_all(path: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.slow
@pytest.mark.range_ends
def test_sigint_mid_epoch_closes_the_epoch_writes_checkpoints_and_flushes_tensorboard(start):
    proc = start("graceful")
    proc.wait_for("READY", START_TIMEOUT_S)  # epoch 1, step 3; the steps are now slow
    proc.signal(signal.SIGINT)
    assert proc.wait(STOP_TIMEOUT_S) == 0, proc.tail()
    result = proc.result()
    assert len(result["history"]["loss"]) == 2  # epoch 0, and epoch 1 closed early
    assert result["threads"] == ["MainThread"]
    # our checkpoint: the interrupted epoch 1 is to be run again on resume
    latest = tf.train.latest_checkpoint(str(proc.logdir / "ckpt"))
    assert resume_position_of(latest)[0] == 1
    values = _load_all(latest)
    assert any("momentum" in name for name in values)  # optimizer slots are saved
    # Keras' ModelCheckpoint wrote each epoch's weights at its end, the interrupted one's
    # too: reloaded, they are the model's weights at that epoch's end
    assert sorted(p.name for p in proc.logdir.glob("weights.*.h5")) == [
        "weights.01.h5",
        "weights.02.h5",
    ]
    import tf_keras

    inputs = tf_keras.layers.Input((4,))
    reloaded = tf_keras.Model(inputs, tf_keras.layers.Dense(2, activation="softmax")(inputs))
    at_epoch_end = result["epoch_weights"]
    assert len(at_epoch_end) == 2
    assert not np.allclose(at_epoch_end[0][0], at_epoch_end[1][0])  # it trained in between
    for epoch, weights in enumerate(at_epoch_end):
        reloaded.load_weights(str(proc.logdir / f"weights.{epoch + 1:02d}.h5"))
        for ours, theirs in zip(reloaded.get_weights(), weights, strict=True):
            np.testing.assert_array_equal(ours, np.asarray(theirs, np.float32))
    # and our checkpoint holds the same (interrupted epoch's) kernel
    kernels = [v for name, v in values.items() if name.endswith("kernel")]
    assert len(kernels) == 1
    np.testing.assert_array_equal(kernels[0], np.asarray(at_epoch_end[1][0], np.float32))
    # TensorBoard's events for both epochs were flushed
    events = EventAccumulator(str(proc.logdir / "tb"))
    events.Reload()
    assert [s.step for s in events.Scalars("epoch_loss")] == [0, 1]


@pytest.mark.slow
def test_signals_stop_a_step_blocked_on_an_empty_queue(start):
    proc = start("blocked")
    proc.wait_for("READY", START_TIMEOUT_S)  # the next step blocks: the queue stays empty
    time.sleep(BLOCK_S)  # let it block (checked below: the watcher had to unblock it)
    proc.signal(signal.SIGTERM)
    first = json.loads(proc.wait_for("FIRST", STOP_TIMEOUT_S).split(" ", 1)[1])
    assert len(first["history"]["loss"]) == 1 and first["threads"] == ["MainThread"]
    latest = tf.train.latest_checkpoint(str(proc.logdir / "ckpt"))
    assert resume_position_of(latest)[0] == 0  # the interrupted epoch 0
    assert _load_all(latest)["global_step"] == 5
    assert "Cancelling its read" in proc.stderr_path.read_text()
    # blocked again: two signals in a row abort at once, threads still joined
    proc.wait_for("AGAIN", STOP_TIMEOUT_S)
    time.sleep(BLOCK_S)
    proc.signal(signal.SIGINT)
    time.sleep(0.5)  # delivered apart (the kernel merges a signal sent while one is pending)
    proc.signal(signal.SIGINT)  # within the first one's 2 s grace: Python runs one handler
    code = proc.wait(STOP_TIMEOUT_S)
    assert code in (-signal.SIGINT, 128 + signal.SIGINT, 1), proc.tail()
    stderr = proc.stderr_path.read_text()
    assert "KeyboardInterrupt: SIGINT received twice" in stderr
    assert "has not handled 2 signal(s)" in stderr  # blocked: they arrived together
    assert proc.result()["threads"] == ["MainThread"]


@pytest.mark.slow
def test_a_second_sigint_aborts_at_once_and_still_joins_threads(start, tmp_path):
    proc = start("abort", write_records(tmp_path / "data.tfrecord", 200))
    proc.wait_for("READY", START_TIMEOUT_S)
    proc.signal(signal.SIGINT)
    proc.wait_for("CLOSING", STOP_TIMEOUT_S)  # the epoch end would now take a minute
    proc.signal(signal.SIGINT)
    code = proc.wait(STOP_TIMEOUT_S)  # far less than the minute: it did not wait for it
    assert code in (-signal.SIGINT, 128 + signal.SIGINT, 1), proc.tail()
    assert "KeyboardInterrupt: SIGINT received twice" in proc.stderr_path.read_text()
    assert proc.result()["threads"] == ["MainThread"]  # the queue threads were joined


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_leaves_the_previous_one_loadable(start):
    proc = start("kill_save")
    assert proc.wait(START_TIMEOUT_S) == -signal.SIGKILL, proc.tail()
    names = os.listdir(proc.logdir)
    # it died mid-write: a file under TensorFlow's temporary name was left behind ...
    partial = [n for n in names if "tempstate" in n]
    assert partial, names
    # ... and the state file points only at complete checkpoints
    state = tf.train.get_checkpoint_state(str(proc.logdir))
    assert state is not None and len(state.all_model_checkpoint_paths) >= 2
    assert resume_position_of(state.model_checkpoint_path)[0] >= 3  # three saves came first
    for path in state.all_model_checkpoint_paths:
        assert not any(
            n.startswith(os.path.basename(path) + ".") and "tempstate" in n for n in names
        )
        epochs_done, _, _ = resume_position_of(path)
        big = _load_all(path)["big"]
        assert big.shape == (8 * 1024 * 1024,)
        assert np.all(big == epochs_done)  # one step per epoch adds 1 everywhere


# -- in this process: installing and restoring handlers ---------------------------------


class _Watch(tfr_hooks.Hook):
    """Records the SIGINT/SIGTERM handlers seen during the run; may signal the process."""

    def __init__(self, send_at: int | None = None) -> None:
        self.send_at = send_at
        self.seen: list[object] = []
        self.steps_at_epoch_end: list[int] = []

    def after_run(self, run_context, run_values):
        if not self.seen:
            self.seen = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)]
        if self.loop.global_step == self.send_at:
            os.kill(os.getpid(), signal.SIGINT)

    def epoch_end(self, epoch, logs):
        self.steps_at_epoch_end.append(self.loop.epoch_steps)


def _handlers() -> list[object]:
    return [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)]


def _tiny_loop(*hooks):
    v = tf.Variable(0.0)
    return tfr_hooks.SessionLoop(v.assign_add(1.0), {}, hooks=list(hooks), steps_per_epoch=10)


def test_first_sigint_in_a_run_stops_after_the_current_step(graph):
    watch = _Watch(send_at=3)
    history = _tiny_loop(watch).run(epochs=5)  # no KeyboardInterrupt
    assert watch.steps_at_epoch_end == [4]  # the 4th step finished; the epoch was closed
    assert metrics(history) == {}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_handlers_and_wakeup_fd_are_restored_after_the_run(graph):
    def mine(signum, frame):
        pass

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_term = signal.signal(signal.SIGTERM, mine)
    previous_fd = signal.set_wakeup_fd(write_fd)
    try:
        watch = _Watch()
        _tiny_loop(watch).run(epochs=1)
        assert all(getattr(h, "__self__", None) is not None for h in watch.seen)  # ours
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.set_wakeup_fd(write_fd) == write_fd
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGTERM, previous_term)
        os.close(read_fd)
        os.close(write_fd)


def test_an_ignored_signal_stays_ignored(graph):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch = _Watch(send_at=3)
        _tiny_loop(watch).run(epochs=2)
        assert watch.seen[0] is signal.SIG_IGN
        assert watch.steps_at_epoch_end == [10, 10]  # the SIGINT was ignored, as asked
    finally:
        signal.signal(signal.SIGINT, previous)


def test_no_handler_is_installed_outside_the_main_thread(graph):
    import threading

    watch = _Watch()
    loop = _tiny_loop(watch)
    errors: list[BaseException] = []

    def work():
        try:
            with graph.as_default():
                loop.run(epochs=1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and errors == []
    assert watch.seen == _handlers()


def test_handle_signals_false_adds_no_handler(graph):
    watch = _Watch()
    v = tf.Variable(0.0)
    loop = tfr_hooks.SessionLoop(
        v.assign_add(1.0), {}, hooks=[watch], steps_per_epoch=2, handle_signals=False
    )
    loop.run(epochs=1)
    assert watch.seen == _handlers()


def test_function_loop_stops_gracefully_on_sigint():
    data = tf.data.Dataset.range(40).map(lambda i: tf.cast(i, tf.float32)).batch(2)
    total = tf.Variable(0.0)

    def step(batch):
        total.assign_add(tf.reduce_sum(batch))
        return {"sum": tf.reduce_sum(batch)}

    watch = _Watch(send_at=3)
    history = tfr_hooks.FunctionLoop(data, step_fn=step, hooks=[watch]).run(epochs=3)
    assert watch.steps_at_epoch_end == [4]  # the epoch closed after the 4th step
    assert len(history["sum"]) == 1
    assert _handlers()[0] is signal.default_int_handler


def test_function_loop_watches_signals_to_cancel_a_blocked_call() -> None:
    data = tf.data.Dataset.from_tensor_slices(np.ones((8, 2), np.float32)).batch(4)
    seen = Threads()
    loop = tfr_hooks.FunctionLoop(
        data, step_fn=lambda batch: {"s": tf.reduce_sum(batch)}, hooks=[seen]
    )
    loop.run(epochs=1)
    assert WATCHER in seen.names  # a call blocked on its input can be cancelled
    assert len(loop.loop.input_cancels) == 1  # the runner's
    assert loop.loop.cancel_input() is False  # no call under way: nothing cancelled


def test_session_loop_without_queues_watches_signals_to_end_a_blocked_step() -> None:
    with tf.Graph().as_default():
        it = v1.data.make_initializable_iterator(tf.data.Dataset.range(6).batch(2))
        step = v1.train.get_or_create_global_step()
        train_op = v1.assign_add(step, it.get_next()[0])
        seen = Threads()
        tfr_hooks.SessionLoop(train_op, hooks=[seen], initializers=[it.initializer]).run()
    assert WATCHER in seen.names  # a blocked session.run can be ended (its session closed)


class _Released(tfr_hooks.Hook):
    """At ``end``, notes whether the blocked read was still blocked, then releases it."""

    def __init__(self, release: threading.Event, returned: list[int]) -> None:
        self.release, self.returned = release, returned
        self.blocked_at_end: bool | None = None

    def end(self, session: object) -> None:
        self.blocked_at_end = not self.returned
        self.release.set()


@pytest.mark.slow
def test_sigterm_during_a_slow_but_alive_read_cancels_it_within_the_grace() -> None:
    """A read that is slow but alive does not hold a stop request.

    The signal arrives while the step waits for its batch in C++, where Python's handler
    cannot run; the watcher cancels the read after its grace (2 s), and every hook's
    ``end`` runs at once. The read stays blocked until the last hook's ``end`` releases
    it, so the order tells, not a duration: the run ended while the read was still
    blocked. (The iterator is released after the hooks' ``end``, once the op under way in
    its prefetch thread returns: nothing is left running.)
    """
    import threading

    release, signalled = threading.Event(), threading.Event()
    returned: list[int] = []

    def slow(x: tf.Tensor) -> tf.Tensor:
        def wait(value: np.ndarray) -> np.ndarray:
            if signalled.is_set():  # the reads before come at once, these when released
                release.wait(timeout=60)  # a hang guard: the run's end releases it
                returned.append(int(value))
            return value

        return tf.numpy_function(wait, [x], tf.int64)

    class SignalAfterFirstStep(tfr_hooks.Hook):
        def after_run(self, run_context: object, run_values: object) -> None:
            if self.loop.global_step == 0:  # the next reads block in C++
                signalled.set()
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()

    # prefetched, as the readers' pipelines are: the step waits where it can be cancelled
    data = tf.data.Dataset.range(8).map(slow).batch(1).prefetch(1)
    ended = _Released(release, returned)
    loop = tfr_hooks.FunctionLoop(
        data,
        step_fn=lambda b: {"s": tf.reduce_sum(tf.cast(b, tf.float32))},
        hooks=[SignalAfterFirstStep(), ended],
    )
    with pytest.raises(KeyboardInterrupt, match="SIGTERM received while a step was blocked"):
        loop.run(epochs=1)
    assert ended.blocked_at_end is True  # ended without waiting for the read
