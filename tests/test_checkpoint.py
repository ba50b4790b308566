"""A run that dies and is started again from its log directory (issue 7, item 5).

The first run dies in the middle of epoch 3 (an exception that ends the process' work
before any more saving, as a crash would; ``tests/test_signals.py`` shows a real SIGKILL
leaves the checkpoints loadable). The second run, built from scratch on the same log
directory, must start at epoch 3 with the weights, optimizer state and global step of the
end of epoch 2, end after the total number of epochs asked for, and finish with exactly
the weights of a run that was never interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _faults import LinearModel

v1 = tf.compat.v1
pytestmark = pytest.mark.timeout(180)

EPOCHS, STEPS, BATCH = 6, 4, 8  # 32 examples: 4 full batches per epoch


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32) + 0.3).astype(np.float32)
    return x, y


class Crash(tfr_hooks.Hook):
    def after_run(self, run_context, run_values):
        if self.loop.epoch == 3 and self.loop.epoch_steps == 1:
            raise RuntimeError("the machine went away")


class Snapshot(tfr_hooks.Hook):
    """Records every variable after the session is ready and at each epoch end."""

    def __init__(self, model: LinearModel) -> None:
        self.model = model
        self.at_start: dict[str, np.ndarray] = {}
        self.at_epoch_end: dict[int, dict[str, np.ndarray]] = {}
        self.initial_epoch = -1
        self.epochs: list[int] = []

    def after_create_session(self, session, coord):
        self.at_start = self.model.state(session)
        self.initial_epoch = self.loop.initial_epoch

    def epoch_end(self, epoch, logs):
        self.at_epoch_end[epoch] = self.model.state(self.loop.session)
        self.epochs.append(epoch)


def _session_run(logdir, *extra_hooks, with_checkpoint=True, leading_hooks=()):
    with tf.Graph().as_default():
        it = v1.data.make_initializable_iterator(
            tf.data.Dataset.from_tensor_slices(_arrays()).batch(BATCH)
        )
        x, y = it.get_next()
        model = LinearModel(x, y)
        snap = Snapshot(model)
        hooks = [tfr_hooks.EpochCheckpoint(logdir)] if with_checkpoint else []
        loop = tfr_hooks.SessionLoop(
            model.train_op,
            {"loss": model.loss},
            hooks=[*leading_hooks, *hooks, snap, *extra_hooks],
            initializers=[it.initializer],
            batch_size=model.batch_size,
        )
        error = None
        try:
            history = loop.run(epochs=EPOCHS)
        except RuntimeError as exc:
            history, error = None, exc
        return snap, history, error


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, err_msg=name)


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
@pytest.mark.range_ends
def test_session_loop_resumes_at_the_right_epoch_step_and_optimizer_state(tmp_path):
    reference, _, _ = _session_run(tmp_path / "ref", with_checkpoint=False)

    first, _, error = _session_run(tmp_path / "run", Crash())
    assert str(error) == "the machine went away"
    assert first.epochs == [0, 1, 2]

    second, history, error = _session_run(tmp_path / "run")
    assert error is None
    assert second.initial_epoch == 3
    assert second.epochs == [3, 4, 5]  # the total asked for, no more
    assert len(history["loss"]) == 3
    # the state restored is exactly the one at the end of epoch 2, Adam slots included
    assert any("Adam" in name for name in second.at_start)
    _assert_same(second.at_start, first.at_epoch_end[2])
    assert second.at_start["global_step"] == 3 * STEPS
    # and training continues as if nothing happened
    _assert_same(second.at_epoch_end[5], reference.at_epoch_end[5])
    assert second.at_epoch_end[5]["global_step"] == EPOCHS * STEPS


class FinalizeGraph(tfr_hooks.Hook):
    """Freezes the graph once the session exists, as the queue threads' runs do in effect.

    An op added after a session has run the graph races with the runs of threads started
    in an earlier hook (the queue runners): TensorFlow then warns that ops it had run
    were changed. A finalized graph turns that race into an error every time.
    """

    def after_create_session(self, session, coord):
        session.graph.finalize()


def test_the_checkpoint_adds_no_op_once_the_session_exists(tmp_path):
    first, _, error = _session_run(tmp_path / "run", Crash(), leading_hooks=[FinalizeGraph()])
    assert str(error) == "the machine went away"
    second, history, error = _session_run(tmp_path / "run", leading_hooks=[FinalizeGraph()])
    assert error is None
    assert second.initial_epoch == 3 and len(history["loss"]) == 3
    _assert_same(second.at_start, first.at_epoch_end[2])


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_a_relative_logdir_resumes_at_the_right_epoch(tmp_path, monkeypatch, as_path):
    # the README's EpochCheckpoint("runs/1"): tf.train.get_checkpoint_state already
    # joins the state file's relative names to the directory; joining again failed
    monkeypatch.chdir(tmp_path)
    logdir = Path("runs/1") if as_path else "runs/1"
    first, _, error = _session_run(logdir, Crash())
    assert str(error) == "the machine went away"
    second, history, error = _session_run(logdir)
    assert error is None
    assert second.initial_epoch == 3 and second.epochs == [3, 4, 5]
    assert len(history["loss"]) == 3
    _assert_same(second.at_start, first.at_epoch_end[2])
    assert not (tmp_path / "runs" / "1" / "runs").exists()


def test_a_moved_logdir_whose_state_file_has_absolute_paths_resumes(tmp_path):
    first, _, _ = _session_run(tmp_path / "run", Crash())
    # a state file written with absolute paths (save_relative_paths=False, other tools)
    state = tf.train.get_checkpoint_state(str(tmp_path / "run"))
    v1.train.update_checkpoint_state(
        str(tmp_path / "run"),
        os.path.abspath(state.model_checkpoint_path),
        [os.path.abspath(p) for p in state.all_model_checkpoint_paths],
    )
    os.rename(tmp_path / "run", tmp_path / "moved")
    second, history, error = _session_run(tmp_path / "moved")
    assert error is None
    assert second.initial_epoch == 3 and len(history["loss"]) == 3
    _assert_same(second.at_start, first.at_epoch_end[2])


def test_a_latest_checkpoint_whose_files_are_gone_is_not_blamed_on_the_model(tmp_path):
    _session_run(tmp_path / "run")
    latest = tf.train.latest_checkpoint(str(tmp_path / "run"))
    for file in tf.io.gfile.glob(latest + ".*"):
        os.remove(file)
    with pytest.raises(FileNotFoundError, match=r"ckpt-epoch6-5', to exist.*files are missing"):
        _session_run(tmp_path / "run")


@pytest.mark.slow
@pytest.mark.range_ends
def test_function_loop_resumes_with_keras_backup_and_restore(tmp_path):
    import keras

    x, y = _arrays()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)

    class CrashCallback(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 3 and batch == 1:
                raise RuntimeError("the machine went away")

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    class Record(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epochs, self.iterations_at_begin = [], None

        def on_epoch_begin(self, epoch, logs=None):
            if self.iterations_at_begin is None:
                self.iterations_at_begin = int(self.model.optimizer.iterations.numpy())
            self.epochs.append(epoch)

    def run(callbacks):
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(1, kernel_initializer="zeros")]
        )
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
        record = Record()
        hook = tfr_hooks.KerasCallbacks([*callbacks, record], model)
        loop = tfr_hooks.FunctionLoop(data, model=model, hooks=[hook])
        try:
            history = loop.run(epochs=EPOCHS)
        except RuntimeError as exc:
            return model, record, None, exc
        return model, record, history, None

    reference, _, _, _ = run([])
    backup = str(tmp_path / "backup")
    _, first, _, error = run([keras.callbacks.BackupAndRestore(backup), CrashCallback()])
    assert str(error) == "the machine went away"
    assert first.epochs == [0, 1, 2, 3]

    model, second, history, error = run([keras.callbacks.BackupAndRestore(backup)])
    assert error is None
    assert second.epochs == [3, 4, 5]
    assert len(history["loss"]) == 3
    assert second.iterations_at_begin == 3 * STEPS  # the optimizer's step count came back
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS


def test_a_checkpoint_of_another_model_is_refused_clearly(tmp_path):
    _session_run(tmp_path / "run")  # a LinearModel's checkpoints
    with tf.Graph().as_default():
        other = tf.Variable(tf.zeros([3]), name="other")
        ended = []

        class End(tfr_hooks.Hook):
            def end(self, session):
                ended.append(True)

        loop = tfr_hooks.SessionLoop(
            other.assign_add(tf.ones([3])),
            {},
            hooks=[tfr_hooks.EpochCheckpoint(tmp_path / "run"), End()],
            steps_per_epoch=1,
        )
        with pytest.raises(ValueError, match=r"does not match the graph .*Received: log_dir="):
            loop.run(epochs=2)
    assert ended == [True]
