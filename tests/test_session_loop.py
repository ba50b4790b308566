"""The engine through SessionLoop: events, merged fetches, epochs, stops, history, errors."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _log_child import ALL_LEVELS, RAISED_ERRORS, run_logged
from conftest import dataset_batches, queue_batches
from helpers import LoopRecorder as Recorder
from helpers import metrics

v1 = tf.compat.v1


def linear_model(batch: dict[str, tf.Tensor]) -> tuple[tf.Operation, tf.Tensor, tf.Variable]:
    w = v1.get_variable("w", [4], initializer=tf.zeros_initializer())
    pred = tf.reduce_sum(batch["x"] * w, axis=1)
    loss = tf.reduce_mean(tf.square(pred - tf.cast(batch["y"], tf.float32)))
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return train_op, loss, w


def test_hook_events_come_in_lifecycle_order(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 40)  # 3 steps: 40, 40, 20
    train_op, loss, _ = linear_model(batch)
    val_batch, val_init = dataset_batches(records_100, 50)
    val_loss = tf.reduce_mean(tf.cast(val_batch["y"], tf.float32))
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        train_op,
        {"loss": loss},
        hooks=[rec],
        initializers=[init],
    )
    validation = tfr_hooks.Validation({"loss": val_loss}, initializers=[val_init])
    history = loop.run(epochs=2, validation_data=validation)

    # as in MonitoredSession, the step that finds the data exhausted gets a before_run
    # and no after_run
    one_epoch = ["epoch_begin"] + ["before_run", "after_run"] * 3 + ["before_run"]
    one_epoch += ["validation_begin", "validation_batch_end", "validation_batch_end"]
    one_epoch += ["validation_end", "epoch_end"]
    assert rec.names() == ["begin", "after_create_session", *one_epoch, *one_epoch, "end"]
    batch_indices = [e[1] for e in rec.events if e[0] in ("before_run", "after_run")]
    assert batch_indices == [0, 0, 1, 1, 2, 2, 3] * 2
    # the learned epoch length reaches hooks after the first epoch
    assert [e[2] for e in rec.events if e[0] == "epoch_begin"] == [None, 3]
    # validation means are in the logs before epoch_end, with the val_ prefix
    epoch_logs = [e[4] for e in rec.events if e[0] == "epoch_end"]
    assert set(epoch_logs[0]) == {"loss", "val_loss"}
    assert epoch_logs[0]["val_loss"] == pytest.approx(0.5)  # y = index % 2 over 100 records
    assert history["loss"] == [logs["loss"] for logs in epoch_logs]
    assert history["val_loss"] == [logs["val_loss"] for logs in epoch_logs]


def test_hook_fetches_feeds_and_options_share_the_train_ops_run(
    graph: tf.Graph, records_100: Path
) -> None:
    batch, init = dataset_batches(records_100, 10)
    scale = v1.placeholder_with_default(1.0, [], name="scale")
    counter = v1.get_variable("counter", [], tf.int64, initializer=tf.zeros_initializer())
    scaled = v1.get_variable("scaled", [], initializer=tf.zeros_initializer())
    train_op = tf.group(
        v1.assign_add(counter, tf.reduce_sum(batch["index"])), v1.assign_add(scaled, scale)
    )

    class FetchFeedTrace(tfr_hooks.Hook):
        def begin(self) -> None:
            self.seen: list[list[int]] = []
            self.traced = 0

        def before_run(self, run_context: Any) -> Any:
            return v1.train.SessionRunArgs(
                batch["index"],
                feed_dict={scale: 0.0},
                options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
            )

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.seen.append(run_values.results.tolist())
            self.traced += bool(run_values.run_metadata.step_stats.dev_stats)

    hook = FetchFeedTrace()
    loop = tfr_hooks.SessionLoop(train_op, hooks=[hook], initializers=[init])
    with v1.Session() as session:
        loop.run(epochs=1, session=session)
        total, scaled_total = session.run([counter, scaled])
    # the hook saw every batch exactly once, in order: its fetch ran with the train op
    assert hook.seen == [list(range(i, i + 10)) for i in range(0, 100, 10)]
    assert total == sum(range(100))
    assert scaled_total == 0.0  # the hook's feed reached the train op
    assert hook.traced == 10  # the hook's run options were used


def test_epochs_end_at_out_of_range_with_exact_counts(graph: tf.Graph, records_1000: Path) -> None:
    batch, init = dataset_batches(records_1000, 128)
    size = tf.shape(batch["index"])[0]
    mean_index = tf.reduce_mean(tf.cast(batch["index"], tf.float32))

    class Sizes(tfr_hooks.Hook):
        def begin(self) -> None:
            self.sizes: list[int] = []

        def before_run(self, run_context: Any) -> Any:
            return v1.train.SessionRunArgs(size)

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.sizes.append(int(run_values.results))

    rec, sizes = Recorder(), Sizes()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"mean_index": mean_index},
        hooks=[rec, sizes],
        initializers=[init],
        batch_size=size,
    )
    history = loop.run(epochs=3)

    ends = [e for e in rec.events if e[0] == "epoch_end"]
    assert [(e[1], e[2], e[3]) for e in ends] == [(0, 8, 1000), (1, 8, 1000), (2, 8, 1000)]
    assert sizes.sizes == ([128] * 7 + [104]) * 3
    assert loop.loop.steps_per_epoch == 8
    # the epoch mean weighs the final partial batch by its size: the mean of 0..999
    assert history["mean_index"] == pytest.approx([499.5] * 3)


def test_one_shot_source_closes_the_epoch_and_ends_training(
    graph: tf.Graph, records_1000: Path, no_leaked_threads: None
) -> None:
    batch = queue_batches(records_1000, 128, num_epochs=3)
    size = tf.shape(batch["index"])[0]
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(tf.no_op(), hooks=[rec], batch_size=size)
    history = loop.run(epochs=5)
    ends = [e for e in rec.events if e[0] == "epoch_end"]
    assert [(e[1], e[2], e[3]) for e in ends] == [(0, 24, 3000)]  # 23 full + 1 of 56
    assert rec.names()[-1] == "end"
    assert metrics(history) == {}


def test_steps_per_epoch_counts_epochs_in_steps_and_warns_when_data_runs_out(
    graph: tf.Graph, records_1000: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batch = queue_batches(records_1000, 128, num_epochs=1)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"first": tf.cast(batch["index"][0], tf.float32)},
        hooks=[rec],
        steps_per_epoch=5,
        batch_size=tf.shape(batch["index"])[0],
    )
    with caplog.at_level(logging.WARNING, logger="tfr_hooks"):
        history = loop.run(epochs=3)
    ends = [e for e in rec.events if e[0] == "epoch_end"]
    assert [(e[1], e[2], e[3]) for e in ends] == [(0, 5, 640), (1, 3, 360)]
    assert len(history["first"]) == 2
    assert "ran out of data after 3 steps of epoch 1 (8 steps in all)" in caplog.text


def test_steps_per_epoch_with_a_reinitializable_source_does_not_restart_it(
    graph: tf.Graph, records_100: Path
) -> None:
    batch, init = dataset_batches(records_100, 10)
    first = tf.cast(batch["index"][0], tf.float32)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(), {"first": first}, hooks=[rec], steps_per_epoch=4, initializers=[init]
    )
    loop.run(epochs=2)
    firsts = [e[2]["first"] for e in rec.events if e[0] == "after_run" and e[1] == 0]
    assert firsts == [0.0, 40.0]  # epoch 2 goes on where epoch 1 stopped, like model.fit


def test_stop_request_ends_after_the_current_step_and_closes_the_epoch(
    graph: tf.Graph, records_100: Path
) -> None:
    batch, init = dataset_batches(records_100, 10)

    class StopAt(tfr_hooks.Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            if self.loop.epoch == 1 and self.loop.epoch_steps == 3:
                run_context.request_stop()

    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"first": tf.cast(batch["index"][0], tf.float32)},
        hooks=[StopAt(), rec],
        initializers=[init],
    )
    history = loop.run(epochs=5)
    ends = [e for e in rec.events if e[0] == "epoch_end"]
    assert [(e[1], e[2]) for e in ends] == [(0, 10), (1, 4)]
    assert ends[1][4]["first"] == pytest.approx(15.0)  # mean of 0, 10, 20, 30
    assert len(history["first"]) == 2
    assert rec.names()[-1] == "end"


def test_stop_request_at_epoch_end_stops_before_the_next_epoch(
    graph: tf.Graph, records_100: Path
) -> None:
    batch, init = dataset_batches(records_100, 50)

    class StopAfterFirstEpoch(tfr_hooks.Hook):
        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            logs["added_by_hook"] = 1.0
            self.loop.request_stop("enough")

    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"n": tf.cast(tf.size(batch["index"]), tf.float32)},
        hooks=[StopAfterFirstEpoch()],
        initializers=[init],
    )
    history = loop.run(epochs=4)
    assert metrics(history) == {"n": [50.0], "added_by_hook": [1.0]}
    assert loop.loop.stop_reason == "enough"


def test_every_hook_end_runs_and_the_first_error_is_raised(
    graph: tf.Graph, records_100: Path
) -> None:
    batch, init = dataset_batches(records_100, 10)

    class Boom(tfr_hooks.Hook):
        def __init__(self, where: str, message: str) -> None:
            self.where, self.message = where, message

        def after_run(self, run_context: Any, run_values: Any) -> None:
            if self.where == "after_run" and self.loop.epoch_steps == 2:
                raise RuntimeError(self.message)

        def end(self, session: Any) -> None:
            if self.where == "end":
                raise ValueError(self.message)

    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        batch["index"],
        hooks=[Boom("after_run", "first"), Boom("end", "second"), rec],
        initializers=[init],
    )
    with pytest.raises(RuntimeError, match="first"):
        loop.run(epochs=2)
    assert rec.names()[-1] == "end"
    assert "epoch_end" not in rec.names()


def test_loop_is_reusable_and_state_resets(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 25)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"n": tf.cast(tf.size(batch["y"]), tf.float32)},
        hooks=[rec],
        initializers=[init],
    )
    with v1.Session() as session:
        first = loop.run(epochs=2, session=session)
        second = loop.run(epochs=1, session=session)
    assert metrics(first) == {"n": [25.0, 25.0]}
    assert metrics(second) == {"n": [25.0]}
    assert rec.names().count("epoch_end") == 1  # the recorder reset itself in begin
    assert loop.loop.global_step == 4


def test_initial_epoch_resumes_numbering(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 50)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(batch["index"], hooks=[rec], initializers=[init])
    loop.run(epochs=4, initial_epoch=2)
    assert [e[1] for e in rec.events if e[0] == "epoch_end"] == [2, 3]


def test_validation_every_n_epochs_like_model_fit(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 50)
    val_batch, val_init = dataset_batches(records_100, 30)  # 30, 30, 30, 10
    val_n = tf.cast(tf.size(val_batch["y"]), tf.float32)
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(
        tf.no_op(),
        {"n": tf.cast(tf.size(batch["y"]), tf.float32)},
        hooks=[rec],
        initializers=[init],
    )
    validation = tfr_hooks.Validation(
        {"n": val_n}, initializers=[val_init], batch_size=tf.size(val_batch["y"])
    )
    history = loop.run(epochs=3, validation_data=validation, validation_freq=2)
    val = [e[4].get("val_n") for e in rec.events if e[0] == "epoch_end"]
    # weighted by batch size: (30*30*3 + 10*10) / 100 = 28
    assert val == [None, pytest.approx(28.0), None]
    assert history["val_n"] == [pytest.approx(28.0)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_out_of_range_lines_in_the_log_of_a_multi_epoch_run(records_100: Path) -> None:
    # SessionLoop ends each epoch and validation pass on the OutOfRangeError of
    # session.run; a child that logs at every level (C++ INFO and up, Python DEBUG; the
    # level is read at import) shows no line of it
    (ours, err), (again, verbose) = run_logged(
        (ALL_LEVELS, ("session", str(records_100))),
        (RAISED_ERRORS, ("session", str(records_100))),
    )
    assert ours == again == {"history": {"index": [49.5] * 4, "val_index": [49.5] * 4}}
    lines = [
        line for line in err.splitlines() if "OUT_OF_RANGE" in line or "End of sequence" in line
    ]
    if tf.__version__.startswith("2.17."):
        # TensorFlow 2.17 itself logs every OutOfRangeError of a session.run at INFO
        # (local_rendezvous.cc, with the node on the next line); nothing else may show
        lines = [
            line
            for line in lines
            if ": I tensorflow/core/framework/local_rendezvous.cc" not in line
        ]
    assert lines == []
    # the same run with executor.cc at VLOG 1 does show them, one error per pass over the
    # data (4 epochs and 4 validations): the child's stderr holds TensorFlow's lines about
    # these errors when they are logged (TensorFlow 2.21 logs them at VLOG 1 only)
    aborts = [
        line
        for line in verbose.splitlines()
        if "Executor start aborting" in line and "OUT_OF_RANGE: End of sequence" in line
    ]
    assert len(aborts) == 8, aborts


def test_run_timeout_fails_a_step_that_blocks(graph: tf.Graph) -> None:
    queue = tf.queue.FIFOQueue(4, [tf.float32], shapes=[[]])
    loop = tfr_hooks.SessionLoop(queue.dequeue(), run_timeout_secs=0.5)
    with pytest.raises(tf.errors.DeadlineExceededError):
        loop.run(epochs=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"fetches": [1]},
            TypeError,
            r"Expected `fetches` to be a dict .* Received: fetches=\[1\]",
        ),
        ({"hooks": ["nope"]}, TypeError, r"hooks\[0\]='nope' of type str"),
        ({"hooks": object()}, TypeError, r"Expected `hooks` to be a list"),
        ({"steps_per_epoch": 0}, ValueError, r"Received: steps_per_epoch=0"),
        ({"run_timeout_secs": -1}, ValueError, r"Received: run_timeout_secs=-1"),
    ],
)
def test_bad_arguments_fail_at_construction(
    graph: tf.Graph, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        tfr_hooks.SessionLoop(tf.no_op(), **kwargs)


@pytest.mark.parametrize("epochs", [0, -1, 1.5, True])
def test_bad_epochs_fail_before_anything_runs(graph: tf.Graph, epochs: Any) -> None:
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(tf.no_op(), hooks=[rec])
    with pytest.raises(ValueError, match=r"Expected `epochs` to be a positive integer"):
        loop.run(epochs=epochs)
    assert rec.events == []


def test_train_op_must_be_a_graph_tensor() -> None:
    with pytest.raises(TypeError, match=r"Expected `train_op` to be a graph-mode"):
        tfr_hooks.SessionLoop(np.float32(1.0))
    with pytest.raises(TypeError, match=r"Received: train_op=None"):
        tfr_hooks.SessionLoop(None)


def test_validation_needs_a_way_to_restart(graph: tf.Graph) -> None:
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(tf.no_op(), hooks=[rec], steps_per_epoch=1)
    once = tfr_hooks.Validation({"loss": tf.constant(1.0)})
    with pytest.raises(
        ValueError, match=r"Expected `validation_steps` .* Received: validation_steps=None"
    ):
        loop.run(epochs=1, validation_data=once)
    assert rec.events == []  # refused before anything ran
    history = loop.run(epochs=2, validation_data=once, validation_steps=1)
    assert history["val_loss"] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"validation_data": {"loss": 1}},
            TypeError,
            r"Expected `validation_data` to be a tfr_hooks.Validation or None",
        ),
        ({"validation_steps": 0}, ValueError, r"Received: validation_steps=0"),
        ({"validation_freq": 0}, ValueError, r"Received: validation_freq=0"),
    ],
)
def test_bad_validation_arguments_fail_at_run(
    graph: tf.Graph, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    rec = Recorder()
    loop = tfr_hooks.SessionLoop(tf.no_op(), hooks=[rec], steps_per_epoch=1)
    with pytest.raises(error, match=match):
        loop.run(epochs=1, **kwargs)
    assert rec.events == []


def test_one_validation_is_built_once_across_runs(graph: tf.Graph, records_100: Path) -> None:
    batch, init = dataset_batches(records_100, 50)
    val_batch, val_init = dataset_batches(records_100, 30)
    loop = tfr_hooks.SessionLoop(
        tf.no_op(), {"n": tf.cast(tf.size(batch["y"]), tf.float32)}, initializers=[init]
    )
    validation = tfr_hooks.Validation(
        {"n": tf.cast(tf.size(val_batch["y"]), tf.float32)}, initializers=[val_init]
    )
    with v1.Session() as session:
        loop.run(epochs=1, validation_data=validation, session=session)
        ops = len(tf.compat.v1.get_default_graph().get_operations())
        history = loop.run(epochs=1, validation_data=validation, session=session)
        assert len(tf.compat.v1.get_default_graph().get_operations()) == ops
        assert history["val_n"] == [pytest.approx(25.0)]  # 30, 30, 30, 10 equally weighted
        assert "val_n" not in loop.run(epochs=1, session=session)
