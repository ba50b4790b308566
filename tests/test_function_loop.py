"""FunctionLoop: in-graph multi-step executions, exact epoch ends, hooks without a session."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfr_hooks
from _log_child import RAISED_ERRORS, run_logged
from conftest import FEATURES
from helpers import FunctionLoopRecorder as Recorder
from helpers import keras_classifier, metrics
from tfr_hooks import FunctionLoop, Hook

v1 = tf.compat.v1


def records(path: Path, batch: int) -> tf.data.Dataset:
    ds = tf.data.TFRecordDataset(str(path)).batch(batch)
    return ds.map(lambda s: tf.io.parse_example(s, FEATURES))


def index_step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """A step that only reports: the mean record index and the batch's own size."""
    return {
        "index": tf.reduce_mean(tf.cast(batch["index"], tf.float32)),
        "size": tf.cast(tf.shape(batch["index"])[0], tf.float32),
    }


@pytest.mark.parametrize("steps_per_execution", [1, 32])
def test_epochs_end_exactly_at_the_last_partial_batch(
    records_1000: Path, steps_per_execution: int
) -> None:
    hook = Recorder()
    loop = FunctionLoop(
        records(records_1000, 128),
        step_fn=index_step,
        hooks=[hook],
        steps_per_execution=steps_per_execution,
    )
    history = loop.run(epochs=3)

    executions = -(-8 // steps_per_execution)  # 8 or 1 calls per epoch
    assert hook.events[0] == ("begin", steps_per_execution)
    assert hook.events[1] == ("after_create_session", None)
    assert len(hook.of("before_run")) == len(hook.of("after_run")) == 3 * executions
    firsts = [e[1] for e in hook.of("before_run")[:executions]]
    assert firsts == list(range(0, 8, steps_per_execution))
    assert all(e[2] is None for e in hook.of("after_run"))
    # 8 steps (7 full batches and one of 104) and 1,000 examples in each of 3 epochs
    assert [e[2:4] for e in hook.of("epoch_end")] == [(8, 1000)] * 3
    assert hook.events[-1] == ("end", 24)
    assert loop.loop.steps_per_epoch == 8
    # batch-size-weighted means: every record counts once, the partial batch included
    assert history["index"] == pytest.approx([499.5] * 3)
    assert history["size"] == pytest.approx([(7 * 128 * 128 + 104 * 104) / 1000] * 3)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_out_of_range_error_is_raised_or_logged(records_1000: Path) -> None:
    # in children that log everything (TensorFlow reads its log level at import): C++ at
    # INFO and up, executor.cc at VLOG 1 (a line for each OutOfRangeError raised in a
    # graph or tf.function), Python at DEBUG
    (ours, err), (_, control) = run_logged(
        (RAISED_ERRORS, ("function", str(records_1000))),
        (RAISED_ERRORS, ("exhaust", str(records_1000))),
    )
    for spe in (1, 32):  # 3 epochs with validation, for each steps_per_execution
        assert ours[f"history_{spe}"] == {"index": [499.5] * 3, "val_index": [499.5] * 3}
    assert "OUT_OF_RANGE" not in err and "End of sequence" not in err
    # the check can fail: in the same child and log settings, a tf.function that runs
    # into the data's end (iterator.get_next() until OutOfRangeError) logs it
    assert "OUT_OF_RANGE: End of sequence" in control


@pytest.mark.slow  # trains twice; about 1 s of CPU
def test_loops_run_one_after_another_log_no_retracing_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # each loop traces its own functions once (a new loop, a new dataset): TensorFlow's
    # warning about "calls ... triggered tf.function retracing" must not add up the
    # traces of loops run one after another in a process (a notebook, folds, a search)
    def step(batch: Any) -> dict[str, Any]:
        return {"mean": tf.reduce_mean(tf.cast(batch, tf.float32))}

    with caplog.at_level(logging.WARNING):
        for _ in range(6):
            data = tf.data.Dataset.range(4).batch(2)
            FunctionLoop(data, step_fn=step, handle_signals=False).run(1)
    assert [r.getMessage()[:70] for r in caplog.records if "retracing" in r.getMessage()] == []


def test_steps_per_epoch_caps_executions_and_data_runs_on(records_1000: Path) -> None:
    hook = Recorder()
    loop = FunctionLoop(
        records(records_1000, 100),
        step_fn=index_step,
        hooks=[hook],
        steps_per_execution=2,
        steps_per_epoch=3,
    )
    history = loop.run(epochs=3)

    # 3 steps per epoch in calls of 2 + 1; the data is not restarted between epochs
    assert [e[1] for e in hook.of("before_run")] == [0, 2] * 3
    assert [e[2:4] for e in hook.of("epoch_end")] == [(3, 300)] * 3
    assert history["index"] == pytest.approx([149.5, 449.5, 749.5])


def test_a_one_shot_step_limit_stops_early_without_an_empty_epoch(records_1000: Path) -> None:
    hook = Recorder()
    loop = FunctionLoop(
        records(records_1000, 250), step_fn=index_step, hooks=[hook], steps_per_epoch=3
    )
    history = loop.run(epochs=3)
    # 4 batches in all: epoch 0 takes 3, epoch 1 gets the last one and training ends
    assert [e[2:4] for e in hook.of("epoch_end")] == [(3, 750), (1, 250)]
    assert history["index"] == pytest.approx([374.5, 874.5])


def test_hooks_stop_the_loop_after_the_current_execution(records_1000: Path) -> None:
    class StopAfterThree(Hook):
        def begin(self) -> None:
            self.calls = 0

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.calls += 1
            if self.calls == 3:
                run_context.request_stop()

    recorder = Recorder()
    loop = FunctionLoop(
        records(records_1000, 128), step_fn=index_step, hooks=[StopAfterThree(), recorder]
    )
    history = loop.run(epochs=5)
    assert recorder.events[-1] == ("end", 3)
    assert [e[1:4] for e in recorder.of("epoch_end")] == [(0, 3, 384)]
    assert history["index"] == pytest.approx([191.5])
    assert loop.loop.stop_requested


def test_step_fn_validation_means_and_events(records_1000: Path, records_100: Path) -> None:
    hook = Recorder()

    def val_step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"x0": tf.reduce_mean(batch["x"][:, 0])}

    loop = FunctionLoop(
        records(records_1000, 500),
        step_fn=index_step,
        validation_step_fn=val_step,
        hooks=[hook],
        steps_per_execution=2,
    )
    history = loop.run(epochs=2, validation_data=records(records_100, 30))

    x0 = np.concatenate([b["x"][:, 0].numpy() for b in records(records_100, 30)])
    assert history["val_x0"] == pytest.approx([float(x0.mean())] * 2, rel=1e-5)
    assert set(metrics(history)) == {"index", "size", "val_x0"}
    # 4 validation batches (30, 30, 30, 10) in calls of 2: begin at 0 and 2, ends as Keras
    # names them (the last index of a full call)
    val_events = [e for e in hook.events if e[0].startswith("validation_batch")]
    assert val_events[:4] == [
        ("validation_batch_begin", 0),
        ("validation_batch_end", 1),
        ("validation_batch_begin", 2),
        ("validation_batch_end", 3),
    ]
    assert len(hook.of("validation_end")) == 2
    # the validation pass does not disturb the training means
    assert history["index"] == pytest.approx([499.5] * 2)


def test_validation_steps_and_freq(records_1000: Path, records_100: Path) -> None:
    hook = Recorder()
    loop = FunctionLoop(
        records(records_1000, 500), step_fn=index_step, validation_step_fn=index_step, hooks=[hook]
    )
    history = loop.run(
        epochs=4, validation_data=records(records_100, 10), validation_steps=2, validation_freq=2
    )
    # validated after epochs 2 and 4 (as model.fit counts them), each pass from the start
    assert history["val_index"] == [pytest.approx(9.5)] * 2
    assert len(history["index"]) == 4
    ends = [set(e[4]) for e in hook.of("epoch_end")]
    assert ends == [{"index", "size"}, set(metrics(history))] * 2


def _keras_model(seed: int = 0) -> Any:
    return keras_classifier(hidden=4, lr=0.1, seed=seed)


@pytest.mark.slow  # trains a Keras model; about 1 s of CPU
def test_keras_model_trains_with_its_own_train_step(records_1000: Path) -> None:
    model = _keras_model()
    ds = records(records_1000, 128).map(lambda d: (d["x"], d["y"]))
    hook = Recorder()
    history = FunctionLoop(ds, model=model, hooks=[hook], steps_per_execution=4).run(
        epochs=2, validation_data=ds.take(2)
    )
    assert set(metrics(history)) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert int(model.optimizer.iterations) == 16
    assert [e[2:4] for e in hook.of("epoch_end")] == [(8, 1000)] * 2
    # the epoch logs are the model's metric results after the epoch's last step
    assert history["loss"][-1] == pytest.approx(hook.last_logs["loss"])
    assert history["val_loss"][-1] == pytest.approx(float(model.metrics[0].result()))


def test_a_hook_asking_for_fetches_gets_a_clear_error(records_100: Path) -> None:
    class FetchingHook(Hook):
        def before_run(self, run_context: Any) -> Any:
            return v1.train.SessionRunArgs(fetches={"x": tf.constant(1.0)})

    ended = Recorder()
    loop = FunctionLoop(records(records_100, 10), step_fn=index_step, hooks=[FetchingHook(), ended])
    with pytest.raises(ValueError, match=r"FetchingHook.before_run asked for fetches .* Session"):
        loop.run(epochs=1)
    assert ended.events[-1][0] == "end"  # cleanup still reached every hook


def test_session_hooks_are_refused_at_construction(records_100: Path, tmp_path: Path) -> None:
    ds = records(records_100, 10)
    with pytest.raises(ValueError, match=r"CheckpointSaverHook needs a tf.compat.v1.Session.*"):
        FunctionLoop(
            ds,
            step_fn=index_step,
            hooks=[v1.train.CheckpointSaverHook(str(tmp_path), save_steps=1)],
        )

    class NeedsSession(Hook):
        requires_session = True

    with pytest.raises(ValueError, match=r"NeedsSession needs .*Use SessionLoop"):
        FunctionLoop(ds, step_fn=index_step, hooks=[NeedsSession()])

    class PlainHook(v1.train.SessionRunHook):  # a user's session-free SessionRunHook
        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.seen = run_values.results

    plain = PlainHook()
    FunctionLoop(ds, step_fn=index_step, hooks=[plain]).run(epochs=1)
    assert plain.seen is None


def test_argument_errors(records_100: Path) -> None:
    ds = records(records_100, 10)
    with pytest.raises(TypeError, match=r"Expected `data` to be a tf.data.Dataset"):
        FunctionLoop([1, 2], step_fn=index_step)
    with pytest.raises(ValueError, match=r"Expected exactly one of `model`"):
        FunctionLoop(ds)
    with pytest.raises(ValueError, match=r"Received: steps_per_execution=0"):
        FunctionLoop(ds, step_fn=index_step, steps_per_execution=0)
    with pytest.raises(ValueError, match=r"Received: steps_per_epoch=-1"):
        FunctionLoop(ds, step_fn=index_step, steps_per_epoch=-1)
    with pytest.raises(TypeError, match=r"Expected `strategy`"):
        FunctionLoop(ds, step_fn=index_step, strategy="mirrored")
    uncompiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=r"Expected `model` to be compiled"):
        FunctionLoop(ds, model=uncompiled)
    legacy = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
    with pytest.raises(TypeError, match=r"tf_keras model: train it in graph mode with SessionLoop"):
        FunctionLoop(ds, model=legacy)
    loop = FunctionLoop(ds, step_fn=index_step)
    with pytest.raises(ValueError, match=r"needs `validation_step_fn`"):
        loop.run(epochs=1, validation_data=ds)
    with pytest.raises(ValueError, match=r"Received: validation_freq=0"):
        loop.run(epochs=1, validation_freq=0)
    with pytest.raises(TypeError, match=r"step_fn` to return a dict"):
        FunctionLoop(ds, step_fn=lambda b: b["x"]).run(epochs=1)
    assert tfr_hooks.FunctionLoop is FunctionLoop


@pytest.mark.slow
def test_the_next_batch_is_fetched_beside_the_step_not_after_it() -> None:
    # A call runs its step on the batch fetched ahead and fetches the next one beside
    # it, as fit's next(iterator) runs before its step: the pipeline's refill overlaps
    # the step. Proved by a handshake, not by timing: the step of batch 0 waits for the
    # fetch of batch 1 to start, and that fetch waits for the step to start. Run one
    # after the other, each would wait in vain (until its timeout).
    import threading

    step_started, fetch_started = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def produce(index: Any) -> Any:
        if int(index) == 1:
            fetch_started.set()
            seen["the fetch saw the step"] = step_started.wait(30)
        return index

    def in_step(index: Any) -> Any:
        if int(index) == 0:
            step_started.set()
            seen["the step saw the fetch"] = fetch_started.wait(30)
        return np.float32(index)

    def step(batch: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"index": tf.numpy_function(in_step, [batch[0]], tf.float32, stateful=True)}

    data = tf.data.Dataset.range(3).map(
        lambda i: tf.numpy_function(produce, [i], tf.int64, stateful=True)
    )
    data = data.map(lambda i: tf.reshape(i, [1]))
    options = tf.data.Options()  # no background prefetch: only the loop's fetch reads
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    loop = FunctionLoop(
        data.with_options(options), step_fn=step, steps_per_execution=1, handle_signals=False
    )
    loop.run(epochs=1)
    assert seen == {"the fetch saw the step": True, "the step saw the fetch": True}


def _graph_op_types(function: Any) -> set[str]:
    """The op types in the graphs of the concrete functions ``function`` traced."""
    concretes = function._list_all_concrete_functions_for_serialization()
    return {op.type for concrete in concretes for op in concrete.graph.get_operations()}


class _EveryStep(Hook):
    needs_every_step = True  # holds steps_per_execution="auto" at 1


@pytest.mark.parametrize(
    ("steps_per_execution", "hooks", "one_step_calls"),
    [(1, [], True), ("auto", [_EveryStep()], True), (3, [], False), ("auto", [], False)],
    ids=["fixed-1", "auto-held-at-1", "fixed-3", "auto-tuned"],
)
def test_a_loop_of_one_step_calls_runs_no_while_loop_and_trains_the_same(
    records_1000: Path, steps_per_execution: int | str, hooks: list[Any], one_step_calls: bool
) -> None:
    # fit runs steps_per_execution=1 as a straight function (get_next, then the step);
    # FunctionLoop's call of many steps holds a tf.while_loop whose control flow runs
    # at every call, even when it makes no iteration. A loop whose calls all run one
    # step runs without it; one whose value may move keeps the one function it traced.
    loop = FunctionLoop(
        records(records_1000, 128),
        step_fn=index_step,
        steps_per_execution=steps_per_execution,
        hooks=hooks,
    )
    history = loop.run(epochs=2)
    executor = loop._steps.executor(True)
    one, many = executor.execute_one, executor.execute
    if one_step_calls:
        assert (one.experimental_get_tracing_count(), many.experimental_get_tracing_count()) == (
            1,
            0,
        )
        assert not {"While", "StatelessWhile"} & _graph_op_types(one)
    else:
        assert (one.experimental_get_tracing_count(), many.experimental_get_tracing_count()) == (
            0,
            1,
        )
        assert {"While", "StatelessWhile"} & _graph_op_types(many)
    # 7 batches of 128 and one of 104 an epoch: the batch-size-weighted means
    assert history["size"] == pytest.approx([(7 * 128**2 + 104**2) / 1000] * 2)
    assert history["index"] == pytest.approx([499.5, 499.5])
