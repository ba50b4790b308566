"""TensorFlow's own SessionRunHooks run unchanged in SessionLoop, each with its effect."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tfr_hooks
from conftest import dataset_batches

v1 = tf.compat.v1


def training_graph(records: Path, batch_size: int = 10) -> dict[str, Any]:
    """A linear model trained with its own train op, and a global step."""
    batch, init = dataset_batches(records, batch_size)
    w = v1.get_variable("w", [4], initializer=tf.zeros_initializer())
    pred = tf.reduce_sum(batch["x"] * w, axis=1)
    loss = tf.reduce_mean(tf.square(pred - tf.cast(batch["y"], tf.float32)))
    step = v1.train.get_or_create_global_step()
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return {
        "train_op": train_op,
        "loss": loss,
        "init": init,
        "step": step,
        "w": w,
        "first": batch["index"][0],
    }


def test_stop_at_step_hook_stops_at_step_n(graph: tf.Graph, records_100: Path) -> None:
    g = training_graph(records_100)
    loop = tfr_hooks.SessionLoop(
        g["train_op"],
        {"loss": g["loss"]},
        hooks=[v1.train.StopAtStepHook(last_step=13)],
        initializers=[g["init"]],
    )
    with v1.Session() as session:
        history = loop.run(epochs=5, session=session)
        assert session.run(g["step"]) == 13
    assert len(history["loss"]) == 2  # epoch 0 (10 steps) and the 3 steps of epoch 1
    assert loop.loop.global_step == 13


def test_nan_tensor_hook_raises_on_nan(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 10)
    index = tf.cast(batch["index"][0], tf.float32)
    loss = tf.where(index >= 30.0, tf.constant(np.nan), index)
    loop = tfr_hooks.SessionLoop(
        loss, {"loss": loss}, hooks=[v1.train.NanTensorHook(loss)], initializers=[init]
    )
    with pytest.raises(v1.train.NanLossDuringTrainingError):
        loop.run(epochs=1)
    assert loop.loop.global_step == 3


def test_nan_tensor_hook_can_stop_instead(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 10)
    index = tf.cast(batch["index"][0], tf.float32)
    loss = tf.where(index >= 30.0, tf.constant(np.nan), index)
    hook = v1.train.NanTensorHook(loss, fail_on_nan_loss=False)
    loop = tfr_hooks.SessionLoop(loss, hooks=[hook], initializers=[init])
    loop.run(epochs=3)
    assert loop.loop.global_step == 4  # the step with the NaN ran, then the loop stopped


def test_logging_tensor_hook_logs_every_n_steps(graph: tf.Graph, records_100: Path) -> None:
    g = training_graph(records_100)
    lines: list[str] = []
    hook = v1.train.LoggingTensorHook(
        {"first": g["first"]}, every_n_iter=4, formatter=lambda v: f"batch from {v['first']}"
    )

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    tf_logger = logging.getLogger("tensorflow")
    handler, level = Collect(), tf_logger.level
    tf_logger.addHandler(handler)
    tf_logger.setLevel(logging.INFO)
    try:
        tfr_hooks.SessionLoop(g["train_op"], hooks=[hook], initializers=[g["init"]]).run(epochs=1)
    finally:
        tf_logger.removeHandler(handler)
        tf_logger.setLevel(level)
    # steps 0, 4 and 8: the tensor was fetched in the same run as the train op's batch
    assert [line for line in lines if line.startswith("batch from")] == [
        "batch from 0",
        "batch from 40",
        "batch from 80",
    ]


def test_checkpoint_saver_hook_writes_loadable_checkpoints(
    graph: tf.Graph, records_100: Path, tmp_path: Path
) -> None:
    g = training_graph(records_100)
    hook = v1.train.CheckpointSaverHook(str(tmp_path), save_steps=5)
    loop = tfr_hooks.SessionLoop(g["train_op"], hooks=[hook], initializers=[g["init"]])
    with v1.Session() as session:
        loop.run(epochs=2, session=session)
        trained_w = session.run(g["w"])
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest is not None and latest.endswith("model.ckpt-20")
    reader = tf.train.load_checkpoint(latest)
    assert reader.get_tensor("global_step") == 20
    np.testing.assert_allclose(reader.get_tensor("w"), trained_w)
    steps = sorted(int(p.name.split("-")[1].split(".")[0]) for p in tmp_path.glob("*.index"))
    assert steps == [0, 5, 10, 15, 20]


@pytest.mark.parametrize("drop_in", [False, True], ids=["SessionLoop", "hooked_session"])
def test_checkpoint_saver_hook_without_a_global_step_reports_only_its_error(
    graph: tf.Graph,
    records_100: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    drop_in: bool,
) -> None:
    # the README's first example before it created a global step: the user saw an
    # AttributeError from CheckpointSaverHook.end(None) first, then the real error
    batch, init = dataset_batches(records_100, 10)
    w = v1.get_variable("w", [4], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(batch["x"] * w, axis=1)))
    train_op = v1.train.AdamOptimizer(1e-3).minimize(loss)
    ended: list[Any] = []

    class Ends(tfr_hooks.Hook):
        def end(self, session: Any) -> None:
            ended.append(session)

    previous = signal.getsignal(signal.SIGINT)
    hooks = [
        Ends(),
        tfr_hooks.StopOnSignal(),  # began: it must give SIGINT back
        v1.train.CheckpointSaverHook(str(tmp_path), save_steps=5),
    ]
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="Global step"):
        if drop_in:
            with tfr_hooks.hooked_session(hooks) as session:
                session.run(train_op)
        else:
            loop = tfr_hooks.SessionLoop(train_op, {"loss": loss}, hooks=hooks, initializers=[init])
            loop.run(epochs=1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert ended == [None]  # the hook that began ends, without a session
    assert signal.getsignal(signal.SIGINT) is previous


def test_summary_saver_hook_writes_scalars(
    graph: tf.Graph, records_100: Path, tmp_path: Path
) -> None:
    g = training_graph(records_100)
    summary = v1.summary.scalar("train_loss", g["loss"])
    hook = v1.train.SummarySaverHook(save_steps=3, output_dir=str(tmp_path), summary_op=summary)
    tfr_hooks.SessionLoop(g["train_op"], hooks=[hook], initializers=[g["init"]]).run(epochs=1)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert "train_loss" in events.Tags()["scalars"]
    # about every third of the 10 steps; the hook reads the global step in the same run
    # as the train op increments it (as in MonitoredSession), so a read may be stale by
    # one and shift a save by a step, which can fit a fifth save into ten steps
    steps = [e.step for e in events.Scalars("train_loss")]
    assert 3 <= len(steps) <= 5, steps
    assert all(diff in (2, 3, 4) for diff in np.diff(steps)), steps
    assert 0 <= steps[0] <= 1 and steps[-1] <= 10


def test_step_counter_hook_writes_steps_per_second(
    graph: tf.Graph, records_100: Path, tmp_path: Path
) -> None:
    g = training_graph(records_100)
    hook = v1.train.StepCounterHook(every_n_steps=2, output_dir=str(tmp_path))
    tfr_hooks.SessionLoop(g["train_op"], hooks=[hook], initializers=[g["init"]]).run(epochs=1)
    # the hook writes through TensorFlow's shared writer cache and never flushes it (nor
    # does MonitoredSession); a user reading the events mid-process flushes it the same way
    v1.summary.FileWriterCache.get(str(tmp_path)).flush()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    rates = events.Scalars("global_step/sec")
    assert len(rates) >= 3
    assert all(r.value > 0 for r in rates)


def test_final_ops_hook_runs_at_the_end(graph: tf.Graph, records_100: Path) -> None:
    g = training_graph(records_100)
    hook = v1.train.FinalOpsHook({"step": g["step"], "w": g["w"]})
    tfr_hooks.SessionLoop(g["train_op"], hooks=[hook], initializers=[g["init"]]).run(epochs=3)
    assert hook.final_ops_values["step"] == 30
    assert np.abs(hook.final_ops_values["w"]).sum() > 0


def test_stock_hooks_combined_with_a_tfr_hooks_hook(graph: tf.Graph, records_100: Path) -> None:
    g = training_graph(records_100)

    class EpochSteps(tfr_hooks.Hook):
        def begin(self) -> None:
            self.steps: list[int] = []

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            self.steps.append(self.loop.epoch_steps)

    ours = EpochSteps()
    hooks = [v1.train.StopAtStepHook(num_steps=25), ours, v1.train.NanTensorHook(g["loss"])]
    tfr_hooks.SessionLoop(g["train_op"], hooks=hooks, initializers=[g["init"]]).run(epochs=9)
    assert ours.steps == [10, 10, 5]
