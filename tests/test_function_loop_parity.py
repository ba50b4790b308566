"""FunctionLoop + KerasCallbacks against Keras 3's own model.fit: same calls, logs, stops."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import keras_classifier, keras_regressor, metrics
from tfr_hooks import FunctionLoop, KerasCallbacks

N_TRAIN, N_VAL, BATCH = 96, 48, 24  # 4 training and 2 validation batches per epoch
EPOCHS = 12


def arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, y


def batches(n: int, seed: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(arrays(n, seed)).batch(BATCH)


def make_model(steps_per_execution: int = 1) -> keras.Model:
    return keras_classifier(steps_per_execution=steps_per_execution)


class CallRecorder(keras.callbacks.Callback):
    """Records each callback call: method, index, log names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def _record(self, method: str, index: Any = None, logs: dict[str, Any] | None = None) -> None:
        logs = dict(logs or {})
        self.calls.append((method, index, sorted(logs), logs))


for _method in (
    "on_train_begin",
    "on_train_end",
    "on_test_begin",
    "on_test_end",
):
    setattr(
        CallRecorder,
        _method,
        lambda self, logs=None, _m=_method: self._record(_m, None, logs),
    )
for _method in (
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_batch_begin",
    "on_test_batch_end",
):
    setattr(
        CallRecorder,
        _method,
        lambda self, index, logs=None, _m=_method: self._record(_m, index, logs),
    )


def callbacks(root: Path) -> tuple[list[keras.callbacks.Callback], CallRecorder]:
    recorder = CallRecorder()
    return [
        keras.callbacks.ModelCheckpoint(
            str(root / "checkpoints" / "epoch{epoch:02d}.weights.h5"),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        ),
        keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0.02, patience=1),
        keras.callbacks.TensorBoard(str(root / "tensorboard")),
        keras.callbacks.BackupAndRestore(str(root / "backup")),
        keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, min_delta=0.03, patience=0),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.CSVLogger(str(root / "log.csv")),
        recorder,
    ], recorder


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.range_ends
@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_same_calls_logs_and_stop_as_model_fit(tmp_path: Path, steps_per_execution: int) -> None:
    fit_model = make_model(steps_per_execution)
    fit_callbacks, fit_calls = callbacks(tmp_path / "fit")
    fit_history = fit_model.fit(
        batches(N_TRAIN, 0),
        validation_data=batches(N_VAL, 1),
        epochs=EPOCHS,
        callbacks=fit_callbacks,
        verbose=0,
    ).history

    model = make_model()
    loop_callbacks, loop_calls = callbacks(tmp_path / "loop")
    loop = FunctionLoop(
        batches(N_TRAIN, 0),
        model=model,
        hooks=[KerasCallbacks(loop_callbacks, model)],
        steps_per_execution=steps_per_execution,
    )
    history = loop.run(epochs=EPOCHS, validation_data=batches(N_VAL, 1))

    # the same sequence of calls, with the same batch indices and log names
    assert [c[:3] for c in loop_calls.calls] == [c[:3] for c in fit_calls.calls]
    for ours, theirs in zip(loop_calls.calls, fit_calls.calls, strict=True):
        for key in theirs[2]:
            assert ours[3][key] == pytest.approx(theirs[3][key], rel=1e-6, abs=1e-7), (ours, key)
    # early stopping ended both runs at the same epoch, before the last
    stopped = len(fit_history["loss"])
    assert 2 < stopped < EPOCHS
    assert sorted(metrics(history)) == sorted(fit_history)
    for key, values in fit_history.items():
        assert history[key] == pytest.approx(values, rel=1e-6, abs=1e-7), key
    # ReduceLROnPlateau acted the same way (it adds `learning_rate` to the logs)
    assert len(set(fit_history["learning_rate"])) > 1
    assert float(model.optimizer.learning_rate) == pytest.approx(
        float(fit_model.optimizer.learning_rate)
    )
    for ours, theirs in zip(model.get_weights(), fit_model.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    # the files the callbacks write
    assert sorted(p.name for p in (tmp_path / "loop" / "checkpoints").iterdir()) == sorted(
        p.name for p in (tmp_path / "fit" / "checkpoints").iterdir()
    )
    ours_csv, theirs_csv = (
        read_csv(tmp_path / "loop" / "log.csv"),
        read_csv(tmp_path / "fit" / "log.csv"),
    )
    assert [r.keys() for r in ours_csv] == [r.keys() for r in theirs_csv]
    assert len(ours_csv) == stopped
    for run in ("train", "validation"):
        assert any((tmp_path / "loop" / "tensorboard" / run).iterdir())
    assert not (tmp_path / "loop" / "backup").exists()  # deleted at the end, as by fit


def diverging_model() -> keras.Model:
    return keras_regressor(lr=1e4)


@pytest.mark.slow
def test_terminate_on_nan_stops_at_the_same_batch_as_model_fit() -> None:
    data = tf.data.Dataset.from_tensor_slices(
        (arrays(N_TRAIN, 0)[0], arrays(N_TRAIN, 0)[0].sum(axis=1) * 10)
    ).batch(8)  # 12 batches per epoch
    fit_model, fit_calls = diverging_model(), CallRecorder()
    fit_model.fit(
        data, epochs=3, callbacks=[keras.callbacks.TerminateOnNaN(), fit_calls], verbose=0
    )

    model, calls = diverging_model(), CallRecorder()
    hook = KerasCallbacks([keras.callbacks.TerminateOnNaN(), calls], model)
    history = FunctionLoop(data, model=model, hooks=[hook]).run(epochs=3)

    assert [c[:3] for c in calls.calls] == [c[:3] for c in fit_calls.calls]
    last_batch = [c for c in calls.calls if c[0] == "on_train_batch_end"][-1]
    assert not np.isfinite(last_batch[3]["loss"])
    assert last_batch[1] < 11  # stopped inside the first epoch, after that batch
    assert len(history["loss"]) == 1
