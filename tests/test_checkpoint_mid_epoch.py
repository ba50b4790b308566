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
import os
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
from tfr_hooks.graph.checkpoint import resume_epoch_of, resume_position_of

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


def _assert_bitwise(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_stop_mid_epoch_resumes_at_the_next_batch_with_every_example_once(
    tmp_path, data, reference, pipeline
):
    ref = _reference(reference, data, pipeline)
    ref_epochs = _per_epoch(ref["steps"])
    for epoch in range(EPOCHS):  # the data is shuffled: the check below means something
        assert sorted(sum(ref_epochs[epoch], [])) == list(range(EXAMPLES))
    assert ref_epochs[0] != ref_epochs[1] or pipeline == "stream"  # a new order each pass
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
        assert sorted(sum(consumed[epoch], [])) == list(range(EXAMPLES)), epoch
    # the resumed epoch has its full steps and examples, and the run its epochs
    assert second["epoch_counts"] == {1: (STEPS, EXAMPLES), 2: (STEPS, EXAMPLES)}
    assert len(second["history"]["loss"]) == 2
    _assert_bitwise(second["state"], ref["state"])
    assert second["state"]["global_step"] == EPOCHS * STEPS


def test_a_resumed_run_whose_last_save_was_an_epoch_end_replays_the_earlier_passes(
    tmp_path, data, reference
):
    # a process killed mid-epoch 2 after the save of epoch 1's end: the new process
    # starts epoch 2 with the third pass's permutation, not the first one's
    ref = _reference(reference, data, "memory")
    logdir = str(tmp_path / "ckpt")
    first = run(data, "memory", logdir, StopAt(epoch=1, step=STEPS))  # stops at the end
    assert resume_position_of(first["last_saved"])[:2] == (2, 0)
    second = run(data, "memory", logdir)
    assert second["initial"] == (2, 0)
    assert second["steps"] == [s for s in ref["steps"] if s[0] == 2]
    _assert_bitwise(second["state"], ref["state"])


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


def test_checkpoint_names_give_their_position():
    assert resume_position_of("/runs/ckpt-epoch2-step5-7") == (2, 5, 7)
    assert resume_position_of("ckpt-epoch3-8") == (3, 0, 8)
    assert resume_epoch_of("/runs/ckpt-epoch2-step5-7") == (2, 7)
    with pytest.raises(ValueError, match=r"ckpt-epoch<epoch>-step<step>-<n>.*path='model-3'"):
        resume_position_of("model-3")
    with pytest.raises(ValueError, match="save_steps"):
        tfr_hooks.EpochCheckpoint("runs", save_steps=0)
