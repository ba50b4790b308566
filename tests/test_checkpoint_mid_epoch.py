"""Graph mode resumes mid-epoch: a stopped run goes on at the next batch (issue 20).

A seeded :class:`~tfr_hooks.SessionLoop` on TFRecords with an ``id`` feature is stopped
in the middle of an epoch (a stop request here; SIGTERM and SIGKILL against real
processes in the ``slow`` tests) and run again on the same log directory. The resumed
run must continue that epoch's order at the next batch: the batches the train op
consumed across both runs are exactly those of an uninterrupted run, so every example is
seen once per epoch, the epochs have their full steps and examples, and the weights,
optimizer slots and global step end bitwise equal to the uninterrupted run's.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _graph_resume_child import (
    EPOCHS,
    EXAMPLES,
    PIPELINES,
    STEPS,
    StopAt,
    run,
    write_data,
)
from tfr_hooks.graph.checkpoint import resume_position_of, saved_workers_of

CHILD = Path(__file__).with_name("_graph_resume_child.py")
START_TIMEOUT_S = 240  # importing TensorFlow on two slow, shared cores
STOP_TIMEOUT_S = 60
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_data(str(tmp_path_factory.mktemp("ids")))


@pytest.fixture(scope="module")
def reference(data: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The uninterrupted run of every pipeline (computed once, when first asked for)."""
    return {}


def _reference(reference: dict[str, dict[str, Any]], data: dict[str, str], pipeline: str):
    if pipeline not in reference:
        reference[pipeline] = run(data, pipeline, None)
    return reference[pipeline]


def _per_epoch(steps: list[tuple[int, int, list[int]]]) -> dict[int, list[list[int]]]:
    """The batches of ids consumed, epoch by epoch, in order."""
    epochs: dict[int, list[list[int]]] = {}
    for epoch, _, ids in steps:
        epochs.setdefault(epoch, []).append(ids)
    return epochs


def _flat(batches: Any) -> list[int]:
    return [i for batch in batches for i in batch]


def _assert_bitwise(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.slow  # trains, stops and resumes 3 pipelines; about 9 s of CPU
def test_a_stop_mid_epoch_resumes_at_the_next_batch_with_every_example_once(
    tmp_path, data, reference, pipeline
):
    ref = _reference(reference, data, pipeline)
    ref_epochs = _per_epoch(ref["steps"])
    for epoch in range(EPOCHS):  # the data is shuffled: the check below means something
        assert sorted(_flat(ref_epochs[epoch])) == list(range(EXAMPLES))
    assert ref_epochs[0] != ref_epochs[1]  # a new order each pass, streamed too
    logdir = str(tmp_path / "ckpt")

    first = run(data, pipeline, logdir, StopAt(epoch=1, step=3))
    assert first["resumes_mid_epoch"]
    assert resume_position_of(first["last_saved"])[:2] == (1, 3)
    assert first["state"]["global_step"] == STEPS + 3

    second = run(data, pipeline, logdir)
    assert second["initial"] == (1, 3)
    # the batches the train op consumed, across both runs, are the uninterrupted run's
    assert first["steps"] + second["steps"] == ref["steps"]
    consumed = _per_epoch(first["steps"] + second["steps"])
    for epoch in range(EPOCHS):
        assert sorted(_flat(consumed[epoch])) == list(range(EXAMPLES)), epoch
    # the resumed epoch has its full steps and examples, and the run its epochs
    assert second["epoch_counts"] == {1: (STEPS, EXAMPLES), 2: (STEPS, EXAMPLES)}
    assert len(second["history"]["loss"]) == 2
    _assert_bitwise(second["state"], ref["state"])
    assert second["state"]["global_step"] == EPOCHS * STEPS


@pytest.mark.parametrize("pipeline", ["memory", "stream"])
@pytest.mark.slow  # trains and resumes; about 2 s of CPU
def test_a_resumed_run_whose_last_save_was_an_epoch_end_replays_the_earlier_passes(
    tmp_path, data, reference, pipeline
):
    # a process killed mid-epoch 2 after the save of epoch 1's end: the new process
    # starts epoch 2 with the third pass's order, not the first one's
    ref = _reference(reference, data, pipeline)
    logdir = str(tmp_path / "ckpt")
    first = run(data, pipeline, logdir, StopAt(epoch=1, step=STEPS))  # stops at the end
    assert resume_position_of(first["last_saved"])[:2] == (2, 0)
    second = run(data, pipeline, logdir)
    assert second["initial"] == (2, 0)
    assert second["steps"] == [s for s in ref["steps"] if s[0] == 2]
    _assert_bitwise(second["state"], ref["state"])


@pytest.mark.slow  # trains and resumes; about 2 s of CPU
def test_save_steps_saves_the_position_inside_an_epoch(tmp_path, data, reference):
    ref = _reference(reference, data, "packed")
    logdir = str(tmp_path / "ckpt")

    class Crash(tfr_hooks.Hook):  # dies without a stop: only the periodic saves remain
        def after_run(self, run_context, run_values):
            if self.loop.epoch == 1 and self.loop.epoch_steps + 1 == 5:
                raise RuntimeError("the machine went away")

    with pytest.raises(RuntimeError, match="went away"):
        run(data, "packed", logdir, Crash(), save_steps=2)
    latest = tf.train.latest_checkpoint(logdir)
    assert resume_position_of(latest)[:2] == (1, 4)  # after step 4, before the crash
    second = run(data, "packed", logdir, save_steps=2)
    assert second["initial"] == (1, 4)
    assert second["steps"] == ref["steps"][STEPS + 4 :]
    _assert_bitwise(second["state"], ref["state"])


def test_a_queue_pipeline_resumes_at_the_epoch_not_the_step(tmp_path, data):
    # a queue's order is not reproducible: the interrupted epoch runs again in full
    logdir = str(tmp_path / "ckpt")
    first = run(data, "queue", logdir, StopAt(epoch=1, step=3))
    assert not first["resumes_mid_epoch"]
    assert resume_position_of(first["last_saved"])[:2] == (1, 0)
    second = run(data, "queue", logdir)
    assert second["initial"] == (1, 0)
    assert sorted(second["epoch_counts"]) == [1, 2]  # epoch 1 from its start
    assert second["steps"][0][:2] == (1, 0)


@pytest.mark.slow  # trains and resumes; about 2 s of CPU
def test_a_cluster_resumed_on_another_worker_count_says_its_examples_move(
    tmp_path, data, monkeypatch, caplog
):
    # saved mid-epoch as the chief of 2 workers (TF_CONFIG), resumed on 1: a graph-mode
    # cluster has no position that holds across counts, so it replays, and says so
    logdir = str(tmp_path / "ckpt")
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    first = run(data, "stream", logdir, StopAt(epoch=1, step=3))
    assert saved_workers_of(first["last_saved"]) == 2
    monkeypatch.delenv("TF_CONFIG")
    with caplog.at_level(logging.WARNING, logger="tfr_hooks"):
        second = run(data, "stream", logdir)
    assert second["initial"] == (1, 3)
    assert "saved on 2" in caplog.text and "trained twice" in caplog.text


def test_checkpoint_names_give_their_position():
    assert resume_position_of("/runs/ckpt-epoch2-step5-7") == (2, 5, 7)
    assert resume_position_of("/runs/ckpt-epoch2-step5-workers3-7") == (2, 5, 7)
    assert saved_workers_of("/runs/ckpt-epoch2-step5-workers3-7") == 3
    assert saved_workers_of("/runs/ckpt-epoch2-step5-7") is None  # before counts were saved
    assert resume_position_of("ckpt-epoch3-8") == (3, 0, 8)
    assert resume_position_of("/runs/ckpt-epoch2-step5-7")[::2] == (2, 7)
    with pytest.raises(ValueError, match=r"ckpt-epoch<epoch>-step<step>-<n>.*path='model-3'"):
        resume_position_of("model-3")
    with pytest.raises(ValueError, match="save_steps"):
        tfr_hooks.EpochCheckpoint("runs", save_steps=0)


# -- real processes: SIGTERM mid-epoch, SIGKILL after the last save ---------------------


def _default_signals() -> None:
    """The default SIGINT/SIGTERM dispositions (a background suite may ignore SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Child:
    """A ``_graph_resume_child.py`` process; every wait is bounded."""

    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.out = tmp_path / f"{name}.jsonl"  # the steps it ran, and its result
        self.stderr = tmp_path / f"{name}.stderr"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, str(CHILD), "--out", str(self.out), *args]
        with open(self.stderr, "wb") as stderr:
            self.popen = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, env=env, preexec_fn=_default_signals
            )
        self.lines: list[str] = []

    def wait_for(self, prefix: str, timeout: float) -> str:
        """The first stdout line starting with ``prefix``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        buffer = b""
        fd = self.popen.stdout.fileno()
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {prefix!r} line in {timeout} s\n{self.tail()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"exited before {prefix!r}\n{self.tail()}")
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                self.lines.extend(line.decode() for line in complete)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s\n{self.tail()}") from None

    def tail(self) -> str:
        return (
            "stdout: "
            + "\n".join(self.lines[-10:])
            + "\nstderr: "
            + self.stderr.read_text(errors="replace")[-3000:]
        )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)
        self.popen.stdout.close()


@pytest.fixture
def child(tmp_path: Path):
    """Start child processes for this test only; each is killed when the test ends."""
    started: list[Child] = []

    def _start(name: str, *args: str) -> Child:
        started.append(Child(tmp_path, name, *args))
        return started[-1]

    try:
        yield _start
    finally:
        for proc in started:
            proc.kill()


def _lines(path: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """The steps a run wrote to ``path``, and its DONE result (none if it was killed)."""
    steps, done = [], []
    for line in path.read_text().splitlines():
        kind, _, payload = line.partition(" ")
        (steps if kind == "STEP" else done).append(json.loads(payload))
    return steps, done


def _until(steps: list[list[Any]], epoch: int, step: int) -> list[list[Any]]:
    """The steps up to (not including) step ``step`` of ``epoch``: what a save kept."""
    return [s for s in steps if (s[0], s[1]) < (epoch, step)]


def _assert_like_reference(
    consumed: list[list[Any]], final: dict[str, Any], ref: dict[str, Any]
) -> None:
    assert [tuple(s) for s in consumed] == [(e, i, ids) for e, i, ids in ref["steps"]]
    for epoch in range(EPOCHS):
        ids = _flat(s[2] for s in consumed if s[0] == epoch)
        assert sorted(ids) == list(range(EXAMPLES)), epoch  # each example once an epoch
    state = {name: np.asarray(value, ref["state"][name].dtype) for name, value in final.items()}
    _assert_bitwise(state, ref["state"])


@pytest.mark.slow
@pytest.mark.resume_matrix
@pytest.mark.parametrize("pipeline", ["memory", "stream"])
def test_a_process_sigtermed_mid_epoch_resumes_at_the_next_batch(
    tmp_path, data, reference, child, pipeline
):
    ref = _reference(reference, data, pipeline)
    data_dir = os.path.dirname(data["plain"])
    args = ["--data", data_dir, "--pipeline", pipeline, "--logdir", str(tmp_path / "ckpt")]
    first = child("first", *args, "--ready", "1:2", "--pace", "0.5")
    first.wait_for("READY", START_TIMEOUT_S)  # epoch 1, step 2; the steps are now slow
    first.popen.send_signal(signal.SIGTERM)
    assert first.wait(STOP_TIMEOUT_S) == 0, first.tail()
    latest = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    epoch, step, _ = resume_position_of(latest)
    assert epoch == 1 and 2 <= step < STEPS, latest  # saved where the stop left epoch 1
    steps, done = _lines(first.out)
    assert (steps[-1][0], steps[-1][1]) == (1, step - 1)  # the last step it ran
    assert sorted(done[0]["epoch_counts"]) == ["0", "1"]  # epoch 1 closed early

    # resumed in this process, from the files the stopped process left (a new graph and
    # session, as in the tests above): a second child would import TensorFlow again
    second = run(data, pipeline, str(tmp_path / "ckpt"))
    assert second["initial"] == (1, step)
    assert second["epoch_counts"] == {1: (STEPS, EXAMPLES), 2: (STEPS, EXAMPLES)}
    _assert_like_reference(steps + second["steps"], second["state"], ref)


@pytest.mark.slow
@pytest.mark.resume_matrix
@pytest.mark.parametrize("pipeline", ["packed", "memory"])
def test_a_process_sigkilled_after_its_last_save_resumes_from_it(
    tmp_path, data, reference, child, pipeline
):
    ref = _reference(reference, data, pipeline)
    data_dir = os.path.dirname(data["plain"])
    logdir = tmp_path / "ckpt"
    args = ["--data", data_dir, "--pipeline", pipeline, "--logdir", str(logdir)]
    first = child("first", *args, "--save-steps", "2", "--ready", "1:1", "--pace", "0.5")
    first.wait_for("SAVED " + str(logdir / "ckpt-epoch1-step2-"), START_TIMEOUT_S)
    time.sleep(0.6)  # a step after the save: work the kill loses
    first.popen.send_signal(signal.SIGKILL)
    assert first.wait(STOP_TIMEOUT_S) == -signal.SIGKILL, first.tail()
    latest = tf.train.latest_checkpoint(str(logdir))
    epoch, step, _ = resume_position_of(latest)
    assert (epoch, step) >= (1, 2), latest
    steps, done = _lines(first.out)
    assert not done and (steps[-1][0], steps[-1][1]) >= (epoch, step)  # it ran past it

    # resumed in this process, from the files the killed process left
    second = run(data, pipeline, str(logdir), save_steps=2)
    assert second["initial"] == (epoch, step)
    # the steps the kill lost are run again, on the same batches: those that count are
    # the first run's up to its last save, then the second run's
    _assert_like_reference(_until(steps, epoch, step) + second["steps"], second["state"], ref)
