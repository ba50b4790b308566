"""KerasCallbacks: stock Keras callbacks driven by the tensor-fed loop, as model.fit drives them."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfr_hooks
from helpers import (
    TRAIN,
    VAL,
    Recorder,
    TensorFed,
    batches,
    compiled_model,
    keras_classifier,
    metrics,
    scalars,
)
from tfr_hooks import FunctionLoop, KerasCallbacks

cb = tf_keras.callbacks


def keras_stop_epoch(values: list[float], min_delta: float, patience: int) -> tuple[int, int]:
    """EarlyStopping's rule (mode min) on monitored values: (stopping epoch, best epoch)."""
    best, best_epoch, wait = math.inf, -1, 0
    for epoch, value in enumerate(values):
        wait += 1
        if value + min_delta < best:  # an improvement by more than min_delta
            best, best_epoch, wait = value, epoch, 0
        elif wait >= patience:
            return epoch, best_epoch
    return -1, best_epoch


@pytest.mark.slow
@pytest.mark.range_ends
def test_same_calls_logs_and_stopping_epoch_as_model_fit() -> None:
    def early() -> cb.EarlyStopping:
        return cb.EarlyStopping(monitor="val_loss", min_delta=0.02, patience=1)

    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)
        fit_rec, fit_es = Recorder.make(tf_keras), early()
        fit_history = (
            compiled_model()
            .fit(
                batches(TRAIN),
                validation_data=batches(VAL),
                epochs=12,
                verbose=0,
                shuffle=False,
                callbacks=[fit_rec, fit_es],
            )
            .history
        )
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)
        ours = TensorFed(steps_per_epoch=4, validation_steps=2)
        rec, es = Recorder.make(tf_keras), early()
        history = ours.run([rec, es], 12)

    assert rec.calls == fit_rec.calls  # every call, in order, with the same logs keys
    assert {k: v for k, v in rec.begin_params.items()} == {
        k: (int(v) if isinstance(v, np.integer) else v) for k, v in fit_rec.begin_params.items()
    }
    assert 0 < fit_es.stopped_epoch < 11
    assert es.stopped_epoch == fit_es.stopped_epoch
    assert metrics(history).keys() == fit_history.keys()
    for key in fit_history:
        np.testing.assert_allclose(history[key], fit_history[key], rtol=1e-5, atol=1e-6)
    batch_values = [
        v for c, v in zip(rec.calls, rec.values, strict=True) if c[0] == "on_train_batch_end"
    ]
    assert all(type(v) is float for logs in batch_values for k, v in logs.items() if k == "loss")


@pytest.mark.slow
def test_epochs_decided_by_the_data_end_as_model_fit_on_data_of_unknown_length() -> None:
    # graph-mode fit refuses data of unknown length without steps_per_epoch; eager fit
    # (TF2's default) runs on it, learning the epoch length from the data's end
    def early() -> cb.EarlyStopping:
        return cb.EarlyStopping(monitor="val_loss", min_delta=0.02, patience=1)

    def unknown_length(ds: tf.data.Dataset) -> tf.data.Dataset:
        return ds.filter(lambda x, y: True)

    fit_rec, fit_es = Recorder.make(tf_keras), early()
    fit_history = (
        compiled_model()
        .fit(
            unknown_length(batches(TRAIN)),
            validation_data=unknown_length(batches(VAL)),
            epochs=12,
            verbose=0,
            shuffle=False,
            callbacks=[fit_rec, fit_es],
        )
        .history
    )
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)
        ours = TensorFed()  # steps_per_epoch=None: each epoch ends on OutOfRangeError
        rec, es = Recorder.make(tf_keras), early()
        history = ours.run([rec, es], 12)

    # the same calls with the same indices: the first epoch (and validation) announces
    # the batch that finds the data's end, later ones know their length (4 and 2 batches).
    # Log keys follow graph-mode fit (checked above), not eager fit's.
    assert [c[:-1] for c in rec.calls] == [c[:-1] for c in fit_rec.calls]  # c[-1]: keys
    begins = [c[1] for c in rec.calls if c[0] == "on_train_batch_begin"]
    assert begins[:9] == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert rec.begin_params["steps"] is fit_rec.begin_params["steps"] is None
    assert 0 < fit_es.stopped_epoch < 11
    assert es.stopped_epoch == fit_es.stopped_epoch
    assert metrics(history).keys() == fit_history.keys()
    for key in fit_history:
        np.testing.assert_allclose(history[key], fit_history[key], rtol=1e-5, atol=1e-6)


def test_epoch_length_learned_without_an_extra_batch_begin(graph: tf.Graph) -> None:
    ours = TensorFed(validation=True)
    rec = Recorder.make(tf_keras)
    ours.run([rec], 3)
    begins = [c[:2] for c in rec.calls if c[0] == "on_train_batch_begin"]
    ends = [c[:2] for c in rec.calls if c[0] == "on_train_batch_end"]
    # like fit on data of unknown length: the first epoch announces the batch that finds
    # the end of the data; later epochs know there are 4 batches
    assert len(begins) == 13 and len(ends) == 12
    test_begins = [c[1] for c in rec.calls if c[0] == "on_test_batch_begin"]
    assert test_begins == [0, 1, 2, 0, 1, 0, 1]


def test_arguments_are_checked_at_construction(graph: tf.Graph) -> None:
    model = TensorFed(validation=False).model
    with pytest.raises(TypeError, match=r"callbacks\[1\]='oops' of type str"):
        tfr_hooks.KerasCallbacks([cb.History(), "oops"], model)
    with pytest.raises(TypeError, match=r"Expected `model` to be a tf_keras\.Model"):
        tfr_hooks.KerasCallbacks([], object())
    with pytest.raises(ValueError, match="Received: verbose=3"):
        tfr_hooks.KerasCallbacks([], model, verbose=3)
    with pytest.raises(TypeError, match="Expected `callbacks` to be a list"):
        tfr_hooks.KerasCallbacks(cb.History(), model)
    with pytest.raises(ValueError, match=r"histogram_freq=1\) does not work"):
        tfr_hooks.KerasCallbacks([cb.TensorBoard("unused", histogram_freq=1)], model)


def test_backup_and_restore_is_refused_in_graph_mode(tmp_path: Path) -> None:
    backup = cb.BackupAndRestore(str(tmp_path))  # tf_keras allows it only while eager
    with tf.Graph().as_default():
        model = TensorFed(validation=False).model
        with pytest.raises(ValueError, match="BackupAndRestore works in eager mode only"):
            tfr_hooks.KerasCallbacks([cb.History(), backup], model)


def test_keras3_file_formats_are_refused_in_graph_mode(graph: tf.Graph, tmp_path: Path) -> None:
    model = TensorFed(validation=False).model
    for name in ("best.weights.h5", "best.keras"):
        checkpoint = cb.ModelCheckpoint(str(tmp_path / name), save_weights_only=True)
        with pytest.raises(ValueError, match=r"Expected a filepath ending in `\.h5`"):
            tfr_hooks.KerasCallbacks([checkpoint], model)
    tfr_hooks.KerasCallbacks([cb.ModelCheckpoint(str(tmp_path / "best.h5"))], model)


def test_model_checkpoint_best_only_and_weights_only(graph: tf.Graph, tmp_path: Path) -> None:
    ours = TensorFed()
    best = cb.ModelCheckpoint(
        str(tmp_path / "w{epoch:02d}.h5"),
        monitor="val_accuracy",
        mode="max",
        save_best_only=True,
        save_weights_only=True,
    )
    history = ours.run([best], 6)
    acc = history["val_accuracy"]
    improved = [e for e in range(6) if acc[e] > max(acc[:e], default=-1)]
    assert 0 < len(improved) < 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"w{e + 1:02d}.h5" for e in improved]
    last = improved[-1]
    fresh = TensorFed()  # new weights, same graph: the checkpoint restores the best epoch
    with fresh.session.as_default():
        fresh.model.load_weights(str(tmp_path / f"w{last + 1:02d}.h5"))
    assert fresh.evaluate_val() == pytest.approx(history["val_loss"][last], rel=1e-5)


def test_model_checkpoint_every_n_batches_full_model(graph: tf.Graph, tmp_path: Path) -> None:
    ours = TensorFed(validation=False)
    every3 = cb.ModelCheckpoint(str(tmp_path / "m-{epoch:02d}-{batch:02d}.h5"), save_freq=3)
    ours.run([every3], 2)  # 8 batches: saves after the 3rd and 6th ({batch} is 0-based)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-01-02.h5", "m-02-01.h5"]
    restored = tf_keras.models.load_model(str(tmp_path / "m-02-01.h5"), compile=False)
    assert [w.shape for w in restored.get_weights()] == [w.shape for w in ours.weights()]


@pytest.mark.slow  # a run to its patience: about 2 s of CPU
def test_early_stopping_patience_min_delta_restore_best(graph: tf.Graph) -> None:
    ours = TensorFed()
    stop = cb.EarlyStopping(
        monitor="val_loss", min_delta=0.03, patience=2, restore_best_weights=True
    )
    history = ours.run([stop], 30)
    values = history["val_loss"]
    stopped, best = keras_stop_epoch(values, 0.03, 2)
    assert stopped == stop.stopped_epoch == len(values) - 1 < 29
    assert best == len(values) - 3
    assert ours.evaluate_val() == pytest.approx(values[best], rel=1e-5)  # best weights back


def test_tensorboard_v1_callback_epoch_batch_and_learning_rate(
    graph: tf.Graph, tmp_path: Path
) -> None:
    ours = TensorFed()
    schedule = cb.LearningRateScheduler(lambda epoch, lr: 0.1 / (epoch + 1))
    board = cb.TensorBoard(str(tmp_path), update_freq=2, profile_batch=0, write_graph=False)
    history = ours.run([schedule, board], 3)
    assert [v for _, v in scalars(tmp_path, "epoch_loss")] == pytest.approx(history["loss"])
    assert [v for _, v in scalars(tmp_path, "epoch_val_loss")] == pytest.approx(history["val_loss"])
    assert [v for _, v in scalars(tmp_path, "epoch_lr")] == pytest.approx([0.1, 0.05, 0.1 / 3])
    assert len(scalars(tmp_path, "batch_loss")) == 6  # 12 batches, every 2nd


def test_history_csv_lambda_and_progbar(graph: tf.Graph, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    ours = TensorFed()
    seen: list[int] = []
    lam = cb.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(epoch))
    csv_path = tmp_path / "log.csv"
    history = ours.run([lam, cb.CSVLogger(str(csv_path))], 2, verbose=1)
    assert seen == [0, 1]
    assert ours.model.history.history == metrics(history)  # Keras sees fit's logs
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert [float(r["val_loss"]) for r in rows] == pytest.approx(history["val_loss"])
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "val_loss" in out


def test_terminate_on_nan_stops_after_the_batch(graph: tf.Graph) -> None:
    ours = TensorFed(lr=1e35, validation=False)
    rec = Recorder.make(tf_keras)
    history = ours.run([cb.TerminateOnNaN(), rec], 5)
    ends = [
        (c[1], v["loss"])
        for c, v in zip(rec.calls, rec.values, strict=True)
        if c[0] == "on_train_batch_end"
    ]
    assert len(history["loss"]) == 1  # the epoch is closed, no other starts
    assert math.isnan(ends[-1][1]) and all(not math.isnan(v) for _, v in ends[:-1])
    assert len(ends) < 4


def test_reduce_lr_on_plateau_changes_the_optimizer_and_logs_lr(graph: tf.Graph) -> None:
    ours = TensorFed()
    plateau = cb.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=0, min_delta=10.0)
    history = ours.run([plateau], 3)
    assert history["lr"] == pytest.approx([0.1, 0.1, 0.05])  # logged before reducing
    assert all(type(v) is float for v in history["lr"])
    assert ours.session.run(ours.optimizer.lr) == pytest.approx(0.025)


@pytest.mark.slow
@pytest.mark.range_ends
def test_keras3_early_stopping_backup_and_reduce_lr_resume_as_model_fit(tmp_path: Path) -> None:
    import keras

    def data(arrays: tuple[np.ndarray, np.ndarray]) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(arrays).batch(24)  # 4 and 2 batches

    def make_model() -> keras.Model:
        return keras_classifier(lr=0.1, momentum=0.9)

    class Preempted(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:  # type: ignore[type-arg]
            if epoch == 2:
                raise RuntimeError("preempted")

    def train(root: Path, preempt: bool, with_fit: bool) -> dict:  # type: ignore[type-arg]
        """One process's run (a new model and callbacks) on the backup in ``root``."""
        model, rec = make_model(), Recorder.make(keras)
        stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0.01, patience=1)
        callbacks = [
            rec,
            stop,
            keras.callbacks.BackupAndRestore(str(root / "backup")),
            keras.callbacks.ReduceLROnPlateau(
                monitor="val_loss", factor=0.5, min_delta=0.03, patience=0
            ),
            *([Preempted()] if preempt else []),
        ]
        history: dict[str, list[float]] = {}
        try:
            if with_fit:
                history = model.fit(
                    data(TRAIN), validation_data=data(VAL), epochs=20, callbacks=callbacks,
                    verbose=0,
                ).history  # fmt: skip
            else:
                loop = FunctionLoop(
                    data(TRAIN), model=model, hooks=[KerasCallbacks(callbacks, model)]
                )
                history = loop.run(epochs=20, validation_data=data(VAL))
        except RuntimeError as exc:
            assert preempt and str(exc) == "preempted"
        return {
            "rec": rec,
            "history": history,
            "stopped_epoch": stop.stopped_epoch,
            "weights": model.get_weights(),
            "lr": float(model.optimizer.learning_rate),
            "iterations": int(model.optimizer.iterations),
        }

    for preempt in (True, False):  # preempted at epoch 2, then resumed from the backup
        fit = train(tmp_path / "fit", preempt, with_fit=True)
        ours = train(tmp_path / "loop", preempt, with_fit=False)
        assert ours["rec"].begin_params == fit["rec"].begin_params
        assert ours["rec"].calls == fit["rec"].calls  # the same calls with the same log keys
        for got, want in zip(ours["rec"].values, fit["rec"].values, strict=True):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
        assert sorted(metrics(ours["history"])) == sorted(fit["history"])
        for key, values in fit["history"].items():
            assert ours["history"][key] == pytest.approx(values, rel=1e-5, abs=1e-6), key
        for key in ("stopped_epoch", "lr", "iterations"):
            assert ours[key] == pytest.approx(fit[key], rel=1e-6), key
        for got, want in zip(ours["weights"], fit["weights"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        epochs = [c[1] for c in ours["rec"].calls if c[0] == "on_epoch_begin"]
        if preempt:
            assert epochs == [0, 1, 2]  # the Preempted callback failed epoch 2's begin
            assert (tmp_path / "loop" / "backup").exists()
            assert ours["iterations"] == 2 * 4
        else:
            # resumed at epoch 2, from the backed-up weights, optimizer and learning rate;
            # val_loss stopped improving: EarlyStopping ended the run before epoch 19
            assert epochs[0] == 2 and 3 < ours["stopped_epoch"] == epochs[-1] < 19
            assert ours["iterations"] == 4 * (ours["stopped_epoch"] + 1)
            assert ours["lr"] < 0.1  # ReduceLROnPlateau reduced it
            assert "learning_rate" in ours["history"]
            assert not (tmp_path / "loop" / "backup").exists()  # removed at a finished run


def test_a_failed_run_skips_on_train_end_but_cleans_up(graph: tf.Graph) -> None:
    ours = TensorFed(validation=False)
    rec = Recorder.make(tf_keras)

    def boom(epoch: int, logs: dict) -> None:  # type: ignore[type-arg]
        if epoch == 1:
            raise RuntimeError("callback failed")

    failing = cb.LambdaCallback(on_epoch_end=boom)
    with pytest.raises(RuntimeError, match="callback failed"):
        ours.run([rec, failing], 3)
    names = [c[0] for c in rec.calls]
    assert names.count("on_epoch_end") == 2 and "on_train_end" not in names  # as fit
    assert tf.compat.v1.get_default_session() is None  # the loop's session was popped
