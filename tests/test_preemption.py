"""PreemptionCheckpoint in one process: a real SIGTERM saves, stops with code 42, resumes.

The multi-worker case (a SIGTERM to one worker of a loopback cluster) is in
``tests/test_distribute_faults.py``.
"""

from __future__ import annotations

import signal
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from helpers import SigtermAt, keras_regressor, preemptible_run
from tfr_hooks import FunctionLoop, Hook, KerasCallbacks, Preempted, PreemptionCheckpoint
from tfr_hooks.signals import StopOnSignal, with_signal_hook

STEPS, EPOCHS = 8, 3


@pytest.fixture(autouse=True)
def _no_cloud_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    # TensorFlow's handler asks the GCE metadata server whether it runs on GCP: answer
    # "no" at once (a refused loopback port) instead of waiting on a DNS lookup
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")


def _data() -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * 4, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


def _model() -> Any:
    return keras_regressor(inputs=3, optimizer="adam", lr=0.01, seed=None)


class Record(Hook):
    """What a resumed run starts from: its epochs, first batch and optimizer state."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.epochs: list[int] = []
        self.first_batch: int | None = None
        self.weights_at_start: list[np.ndarray] | None = None
        self.iterations_at_start: int | None = None

    def epoch_begin(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def before_run(self, run_context: Any) -> None:
        if self.first_batch is None:
            self.first_batch = self.loop.epoch_steps
            self.weights_at_start = self.model.get_weights()
            self.iterations_at_start = int(self.model.optimizer.iterations.numpy())


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
@pytest.mark.range_ends
def test_sigterm_saves_stops_with_code_42_and_a_restart_resumes_mid_epoch(tmp_path) -> None:
    import keras

    directory = tmp_path / "preemption"
    keras.utils.set_random_seed(0)
    model = _model()
    preemption = PreemptionCheckpoint(directory, model=model)
    csv = tmp_path / "log.csv"
    callbacks = KerasCallbacks([keras.callbacks.CSVLogger(str(csv))], model)
    sigterm = SigtermAt(epoch=1, step=2)
    loop = FunctionLoop(_data(), model=model, hooks=[callbacks, sigterm, preemption])
    handler_before = signal.getsignal(signal.SIGTERM)

    with pytest.raises(Preempted) as caught:
        loop.run(epochs=EPOCHS)
    stop = caught.value
    assert stop.code == 42 and preemption.preempted
    assert stop.epoch == 1 and 3 < stop.step < STEPS  # two calls after the signal, or so
    assert stop.path is not None and stop.path.startswith(str(directory))
    assert signal.getsignal(signal.SIGTERM) is handler_before  # given back
    saved_weights = model.get_weights()
    saved_iterations = int(model.optimizer.iterations.numpy())
    assert saved_iterations == STEPS + stop.step
    # the interrupted epoch was not closed: the CSV has epoch 0 only
    assert [line.split(",")[0] for line in csv.read_text().splitlines()[1:]] == ["0"]

    # a new process would build a new model: its weights start elsewhere
    keras.utils.set_random_seed(1)
    fresh = _model()
    record = Record(fresh)
    again = PreemptionCheckpoint(directory, model=fresh)
    history = FunctionLoop(_data(), model=fresh, hooks=[record, again]).run(epochs=EPOCHS)
    assert again.restored == (1, stop.step) and not again.preempted
    assert record.epochs == [1, 2]
    assert record.first_batch == stop.step  # only the steps left of epoch 1
    assert record.iterations_at_start == saved_iterations
    for ours, theirs in zip(record.weights_at_start or [], saved_weights, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert int(fresh.optimizer.iterations.numpy()) == EPOCHS * STEPS  # ends as asked
    assert len(history["loss"]) == 2


@pytest.mark.slow  # over a second (fast-run budget, issue 56); CI runs it
def test_a_step_fn_loop_saves_its_objects(tmp_path) -> None:
    total = tf.Variable(0.0, dtype=tf.float64)

    def step_fn(batch: Any) -> dict[str, Any]:
        total.assign_add(tf.reduce_sum(tf.cast(batch[0], tf.float64)))
        return {"total": total}

    preemption = PreemptionCheckpoint(tmp_path / "p", objects={"total": total})
    sigterm = SigtermAt(epoch=0, step=1)
    with pytest.raises(Preempted) as caught:
        FunctionLoop(_data(), step_fn=step_fn, hooks=[sigterm, preemption]).run(epochs=2)
    at_save = total.numpy()
    total.assign(-1.0)
    again = PreemptionCheckpoint(tmp_path / "p", objects={"total": total})
    seen: list[float] = []

    class First(Hook):
        def before_run(self, run_context: Any) -> None:
            seen.append(float(total.numpy()))

    FunctionLoop(_data(), step_fn=step_fn, hooks=[First(), again]).run(epochs=2)
    assert again.restored == (0, caught.value.step)
    assert seen[0] == at_save


def test_sigterm_is_left_to_it_and_sigint_to_stop_on_signal() -> None:
    preemption = PreemptionCheckpoint("/tmp/unused", objects={"v": tf.Variable(1)})
    hooks = with_signal_hook([preemption], True)
    stop = [h for h in hooks if isinstance(h, StopOnSignal)]
    assert len(stop) == 1 and stop[0].signals == (signal.SIGINT,)
    with pytest.raises(ValueError, match="leave SIGTERM to PreemptionCheckpoint"):
        with_signal_hook([preemption, StopOnSignal()], True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "Expected `model`.*or `objects`"),
        ({"objects": [1]}, TypeError, "Expected `objects` to be a dict"),
        ({"model": object(), "exit_code": 300}, TypeError, "exit_code=300"),
        ({"model": object(), "exit_code": True}, TypeError, "exit_code=True"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PreemptionCheckpoint("/tmp/x", **kwargs)


def test_graph_mode_is_refused_with_the_alternative(tmp_path) -> None:
    from tfr_hooks import SessionLoop

    with tf.Graph().as_default():
        v = tf.compat.v1.Variable(0, name="v")
        op = v.assign_add(1)
        hook = PreemptionCheckpoint(tmp_path, objects={"v": v})
        loop = SessionLoop(op, hooks=[hook], steps_per_epoch=1)
        with pytest.raises(ValueError, match=r"In graph mode .*EpochCheckpoint"):
            loop.run(epochs=1)


class StopAfterEpoch(Hook):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        if epoch == self.epoch:
            self.loop.request_stop("the test's stop")


class CrashAfterEpoch(Hook):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        if epoch == self.epoch:
            raise RuntimeError("the test's crash")


def _preempt(directory: Any, model: Any, at: tuple[int, int], hooks: list[Any]) -> Preempted:
    loop = FunctionLoop(
        _data(),
        model=model,
        hooks=[*hooks, SigtermAt(*at), PreemptionCheckpoint(directory, model=model)],
    )
    with pytest.raises(Preempted) as caught:
        loop.run(epochs=EPOCHS)
    return caught.value


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
def test_a_newer_epoch_backup_wins_over_an_older_preemption_checkpoint(tmp_path) -> None:
    import keras

    directory, backup = tmp_path / "preemption", str(tmp_path / "backup")
    model = _model()
    _preempt(directory, model, (0, 2), [])  # a checkpoint in epoch 0
    # resumed from it, with a backup each epoch, then a crash after epoch 1 (a failed
    # run leaves the checkpoint where it is)
    restore = keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)
    hooks = [KerasCallbacks([restore], model), PreemptionCheckpoint(directory, model=model)]
    loop = FunctionLoop(_data(), model=model, hooks=[*hooks, CrashAfterEpoch(1)])
    with pytest.raises(RuntimeError, match="the test's crash"):
        loop.run(epochs=EPOCHS)
    assert tf.train.latest_checkpoint(str(directory)) is not None
    at_backup = model.get_weights()

    fresh = _model()
    record = Record(fresh)
    restore = keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)
    later = PreemptionCheckpoint(directory, model=fresh)
    hooks = [KerasCallbacks([restore], fresh), later, record]
    FunctionLoop(_data(), model=fresh, hooks=hooks).run(epochs=EPOCHS)
    assert later.restored is None  # its epoch-0 checkpoint is older than the backup
    assert record.epochs == [2] and record.first_batch == 0
    assert record.iterations_at_start == 2 * STEPS
    for ours, theirs in zip(record.weights_at_start or [], at_backup, strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
def test_a_hook_restoring_after_it_has_the_last_word(tmp_path, caplog) -> None:
    import keras

    directory, backup = tmp_path / "preemption", str(tmp_path / "backup")
    model = _model()
    restore = keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)
    # a backup at the end of epoch 0, and a preemption checkpoint in epoch 1
    stop = _preempt(directory, model, (1, 2), [KerasCallbacks([restore], model)])
    assert stop.epoch == 1 and stop.step > 0

    fresh = _model()
    record = Record(fresh)
    restore = keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)
    # in the wrong order: BackupAndRestore restores its epoch-0 backup over the checkpoint
    hooks = [PreemptionCheckpoint(directory, model=fresh), KerasCallbacks([restore], fresh)]
    with caplog.at_level("WARNING", logger="tfr_hooks.tf2.preemption"):
        FunctionLoop(_data(), model=fresh, hooks=[*hooks, record]).run(epochs=EPOCHS)
    assert "Put PreemptionCheckpoint after KerasCallbacks" in caplog.text
    # epoch 1 in full from the backup: a consistent state, not the backup's weights at
    # the checkpoint's step
    assert record.epochs == [1, 2] and record.first_batch == 0
    assert record.iterations_at_start == STEPS
    assert int(fresh.optimizer.iterations.numpy()) == EPOCHS * STEPS


@pytest.mark.slow  # trains twice; about 2 s of CPU
def test_a_run_that_ends_well_removes_the_checkpoint_and_a_later_start_begins_afresh(
    tmp_path,
) -> None:
    directory = tmp_path / "preemption"
    beside = tmp_path / "preemption" / "notes.txt"
    model = _model()
    stop = _preempt(directory, model, (1, 2), [])
    assert tf.train.latest_checkpoint(str(directory)) == stop.path
    beside.write_text("not the hook's")

    # the restart resumes from it and ends after its epochs: the checkpoint is removed
    resumed = PreemptionCheckpoint(directory, model=model)
    FunctionLoop(_data(), model=model, hooks=[resumed]).run(epochs=EPOCHS)
    assert resumed.restored == (1, stop.step)
    assert sorted(p.name for p in directory.iterdir()) == ["notes.txt"]  # only the hook's

    # a later start of the same run trains from epoch 0, not from the old mid-epoch state
    fresh = _model()
    record = Record(fresh)
    later = PreemptionCheckpoint(directory, model=fresh)
    FunctionLoop(_data(), model=fresh, hooks=[record, later]).run(epochs=EPOCHS)
    assert later.restored is None
    assert record.epochs == [0, 1, 2] and record.first_batch == 0
    assert record.iterations_at_start == 0

    # a run a hook stops ends well too; with nothing else in it, the directory goes
    beside.unlink()
    _preempt(directory, fresh, (0, 2), [])
    stopped = PreemptionCheckpoint(directory, model=fresh)
    FunctionLoop(_data(), model=fresh, hooks=[stopped, StopAfterEpoch(0)]).run(epochs=EPOCHS)
    assert stopped.restored is not None and not directory.exists()


@pytest.mark.slow  # trains; about 1 s of CPU
def test_delete_checkpoint_false_keeps_it(tmp_path) -> None:
    directory = tmp_path / "preemption"
    model = _model()
    stop = _preempt(directory, model, (1, 2), [])
    keep = PreemptionCheckpoint(directory, model=model, delete_checkpoint=False)
    FunctionLoop(_data(), model=model, hooks=[keep]).run(epochs=EPOCHS)
    assert tf.train.latest_checkpoint(str(directory)) == stop.path
    with pytest.raises(TypeError, match="Received: delete_checkpoint='yes'"):
        PreemptionCheckpoint(directory, model=model, delete_checkpoint="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param({}, id="streamed"),
        pytest.param({"examples_per_record": 8}, id="packed"),
        pytest.param({"in_memory": True}, id="in_memory"),
    ],
)
@pytest.mark.slow  # trains and resumes 3 pipelines; about 3 s of CPU
def test_a_preempted_run_resumes_at_the_next_batch_of_the_same_order(
    tmp_path, pipeline: dict[str, Any]
) -> None:
    # 200 examples in 3 shards, shuffled with a seed, batches of 16: 13 a pass. A run
    # preempted in epoch 1 and started again (new dataset, new loop, as a new process
    # has) trains on the batches of an uninterrupted run, each example once an epoch
    from tfr_hooks import tfrecord

    n, batch = 200, 16
    pack = {k: v for k, v in pipeline.items() if k == "examples_per_record"}
    tfrecord.write({"index": np.arange(n)}, tmp_path / "data", shards=3, **pack)
    read = {k: v for k, v in pipeline.items() if k != "examples_per_record"}

    def run(directory: Any, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        shuffle = "global" if read.get("in_memory") else 64
        data = tfrecord.dataset(tmp_path / "data", batch, shuffle=shuffle, seed=3, **read)
        return preemptible_run(data, "index", directory, at, EPOCHS)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == EPOCHS * 13
    before, (stop, _) = run(tmp_path / "p", (1, 2))
    assert stop is not None and stop.epoch == 1 and 2 < stop.step < 13
    after, (_, total) = run(tmp_path / "p", None)
    assert total == EPOCHS * 13  # the steps of an uninterrupted run
    assert sorted(after) == [1, 2]
    # the resumed epoch goes on at the next batch of the interrupted epoch's order
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    for epoch in (1, 2):  # every example once an epoch
        examples = [
            i for b in (before[1][: stop.step] + after[1] if epoch == 1 else after[2]) for i in b
        ]
        assert sorted(examples) == list(range(n))


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
def test_a_resumed_epoch_counts_the_steps_and_examples_of_a_whole_one(tmp_path) -> None:
    model = _model()
    stop = _preempt(tmp_path / "p", model, (1, 2), [])
    counts: list[tuple[int, int, int]] = []

    class Counts(Hook):
        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            counts.append((epoch, self.loop.epoch_steps, self.loop.epoch_examples))

    resumed = PreemptionCheckpoint(tmp_path / "p", model=model)
    FunctionLoop(_data(), model=model, hooks=[Counts(), resumed]).run(epochs=EPOCHS)
    assert resumed.restored == (1, stop.step)
    assert counts == [(1, STEPS, STEPS * 4), (2, STEPS, STEPS * 4)]
