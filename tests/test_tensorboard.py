"""TensorBoardLogger: epoch and batch scalars in ``train/`` and ``validation/`` runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import tfr_hooks
from helpers import TensorFed, scalars


def test_tensorboard_logger_writes_train_and_validation_runs(
    graph: tf.Graph, tmp_path: Path
) -> None:
    ours = TensorFed()
    hook = ours.training.keras_callbacks([])
    logger = tfr_hooks.TensorBoardLogger(tmp_path, update_freq="batch", model=ours.model)
    history = ours.loop([hook, logger]).run(2, **ours.run_kwargs)
    train, val = tmp_path / "train", tmp_path / "validation"
    assert scalars(train, "epoch_loss") == [
        (0, pytest.approx(history["loss"][0])),
        (1, pytest.approx(history["loss"][1])),
    ]
    assert [v for _, v in scalars(val, "epoch_loss")] == pytest.approx(history["val_loss"])
    assert [v for _, v in scalars(val, "epoch_accuracy")] == pytest.approx(history["val_accuracy"])
    assert [v for _, v in scalars(train, "epoch_learning_rate")] == pytest.approx([0.1, 0.1])
    assert [s for s, _ in scalars(train, "batch_loss")] == list(range(1, 9))


def graph_events(run: Path) -> list[tf.compat.v1.GraphDef]:
    """The graphs written to the event files of one run directory, in order."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    graphs = []
    for path in sorted(run.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            if event.HasField("graph_def"):
                graphs.append(tf.compat.v1.GraphDef.FromString(event.graph_def))
    return graphs


def test_tensorboard_logger_writes_the_graph_once_per_run(graph: tf.Graph, tmp_path: Path) -> None:
    ours = TensorFed()
    hook = ours.training.keras_callbacks([])
    logger = tfr_hooks.TensorBoardLogger(tmp_path, model=ours.model)
    ours.loop([hook, logger]).run(2, **ours.run_kwargs)

    acc = EventAccumulator(str(tmp_path / "train"))
    acc.Reload()
    assert acc.Tags()["graph"] is True  # what TensorBoard's Graphs tab reads
    nodes = {node.name for node in acc.Graph().node}
    assert nodes == {op.name for op in graph.get_operations()}
    assert len(graph_events(tmp_path / "train")) == 1  # once for the run, not per epoch

    ours.loop([hook, logger]).run(1, **ours.run_kwargs)  # the hook reused: a new run
    assert len(graph_events(tmp_path / "train")) == 2


def test_tensorboard_logger_without_write_graph(graph: tf.Graph, tmp_path: Path) -> None:
    ours = TensorFed()
    hook = ours.training.keras_callbacks([])
    logger = tfr_hooks.TensorBoardLogger(tmp_path, write_graph=False)
    ours.loop([hook, logger]).run(1, **ours.run_kwargs)
    acc = EventAccumulator(str(tmp_path / "train"))
    acc.Reload()
    assert acc.Tags()["graph"] is False and "epoch_loss" in acc.Tags()["scalars"]
    with pytest.raises(TypeError, match=r"Received: write_graph='yes'"):
        tfr_hooks.TensorBoardLogger(tmp_path, write_graph="yes")  # type: ignore[arg-type]


def test_batch_scalars_count_every_step_of_a_call_of_several(tmp_path: Path) -> None:
    # 10 steps an epoch in calls of 2: the count passes 3, 6 and 9 within the calls that
    # end at steps 4, 6 and 10; each writes once, at its last step (global, from 1)
    logger = tfr_hooks.TensorBoardLogger(tmp_path, update_freq=3)
    loop = tfr_hooks.FunctionLoop(
        tf.data.Dataset.range(20).batch(2),
        step_fn=lambda b: {"x": tf.reduce_mean(tf.cast(b, tf.float32))},
        hooks=[logger],
        steps_per_execution=2,
    )
    loop.run(epochs=2)
    assert [s for s, _ in scalars(tmp_path / "train", "batch_x")] == [4, 6, 10, 12, 16, 18]
