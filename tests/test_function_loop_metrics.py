"""Non-scalar Keras 3 metric values go to callbacks as ``model.fit`` hands them over.

``keras.metrics.F1Score`` on one class gives a value of shape ``(1,)``; per-class metrics
(``F1Score(average=None)``) give shape ``(k,)``. ``fit`` keeps them as numpy arrays in
the logs its callbacks see; ``FunctionLoop`` must do the same, and the callbacks must
then write the same files, keep the same history and stop at the same epoch.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import metrics
from tfr_hooks import FunctionLoop, KerasCallbacks
from tfr_hooks.tensorboard import INPUT_RUN

N, BATCH, EPOCHS = 96, 24, 8


def data(classes: int, seed: int) -> tf.data.Dataset:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    if classes == 1:  # binary: one F1 value, shape (1,)
        y = (x[:, 0] + 0.3 * x[:, 1] > 0).astype(np.float32)[:, None]
    else:  # one-hot labels: one F1 value per class, shape (classes,)
        y = np.eye(classes, dtype=np.float32)[np.argmax(x[:, :classes], axis=1)]
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def make_model(classes: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    if classes == 1:
        head = keras.layers.Dense(1, activation="sigmoid")
        loss = "binary_crossentropy"
        metrics: list[Any] = [keras.metrics.F1Score(threshold=0.5, name="f1")]
    else:
        head = keras.layers.Dense(classes, activation="softmax")
        loss = "categorical_crossentropy"
        metrics = ["accuracy", keras.metrics.F1Score(average=None, name="f1")]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), head])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, metrics=metrics)
    return model


def callbacks(
    root: Path, monitor: str, mode: str, min_delta: float
) -> list[keras.callbacks.Callback]:
    root.mkdir(parents=True)
    return [
        keras.callbacks.EarlyStopping(monitor=monitor, mode=mode, patience=1, min_delta=min_delta),
        keras.callbacks.ModelCheckpoint(
            str(root / "checkpoints" / "epoch{epoch:02d}.weights.h5"),
            monitor=monitor,
            mode=mode,
            save_best_only=True,
            save_weights_only=True,
        ),
        keras.callbacks.CSVLogger(str(root / "log.csv")),
    ]


def parsed_csv(path: Path) -> list[dict[str, Any]]:
    """The CSV rows, each cell as a float or a list of floats (CSVLogger's "[a, b]")."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            cells: dict[str, Any] = {}
            for key, text in row.items():
                text = text.strip('"')
                if text.startswith("["):
                    cells[key] = [float(v) for v in text.strip("[]").replace(",", " ").split()]
                else:
                    cells[key] = float(text)
            rows.append(cells)
    return rows


def assert_same_values(ours: Any, theirs: Any) -> None:
    """What ``fit`` gave, in kind and value: a float, or an array of the same shape.

    (On older numpy ``fit`` turns a ``(1,)`` value into a float, and older Keras keeps a
    ``(k,)`` value as a ``tf.Tensor``: an array either way.)
    """
    if isinstance(theirs, float):
        assert isinstance(ours, float), (ours, theirs)
    else:
        assert isinstance(ours, np.ndarray), (ours, theirs)
        assert ours.shape == tuple(np.shape(theirs))
    np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("classes", "monitor", "mode", "min_delta"),
    [(1, "val_f1", "max", 1e-3), (3, "val_loss", "min", 0.04)],
    ids=["f1-one-class-(1,)", "f1-per-class-(3,)"],
)
def test_non_scalar_metrics_reach_callbacks_as_under_fit(
    tmp_path: Path, classes: int, monitor: str, mode: str, min_delta: float
) -> None:
    fit_model = make_model(classes)
    fit_history = fit_model.fit(
        data(classes, 0),
        validation_data=data(classes, 1),
        epochs=EPOCHS,
        callbacks=callbacks(tmp_path / "fit", monitor, mode, min_delta),
        verbose=0,
    ).history

    model = make_model(classes)
    hook = KerasCallbacks(callbacks(tmp_path / "loop", monitor, mode, min_delta), model)
    history = FunctionLoop(data(classes, 0), model=model, hooks=[hook]).run(
        epochs=EPOCHS, validation_data=data(classes, 1)
    )

    # History: the same keys, non-scalar values kept as arrays of the metric's shape
    assert sorted(metrics(history)) == sorted(fit_history)
    assert np.size(fit_history["f1"][0]) == classes  # a metric of shape (classes,)
    for key, values in fit_history.items():
        assert len(history[key]) == len(values), key
        for ours, theirs in zip(history[key], values, strict=True):
            assert_same_values(ours, theirs)
    # Keras' own History callback (model.history) holds what fit's does
    for key, values in fit_model.history.history.items():
        for ours, theirs in zip(model.history.history[key], values, strict=True):
            assert_same_values(ours, theirs)
    # EarlyStopping stopped both at the same epoch, before the last
    assert 1 < len(fit_history["loss"]) < EPOCHS
    # ModelCheckpoint saved the same epochs, with the same weights
    names = sorted(p.name for p in (tmp_path / "fit" / "checkpoints").iterdir())
    assert sorted(p.name for p in (tmp_path / "loop" / "checkpoints").iterdir()) == names
    for name in names:
        fit_model.load_weights(tmp_path / "fit" / "checkpoints" / name)
        model.load_weights(tmp_path / "loop" / "checkpoints" / name)
        for ours, theirs in zip(model.get_weights(), fit_model.get_weights(), strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    # CSVLogger wrote the same columns and rows, arrays as "[a b]" lists
    ours_csv = parsed_csv(tmp_path / "loop" / "log.csv")
    fit_text = (tmp_path / "fit" / "log.csv").read_text()
    if "tf.Tensor(" in fit_text:  # older Keras writes a tensor's repr, commas and all
        assert len(ours_csv) == len(fit_text.splitlines()) - 1
        return
    theirs_csv = parsed_csv(tmp_path / "fit" / "log.csv")
    assert [sorted(r) for r in ours_csv] == [sorted(r) for r in theirs_csv]
    for ours_row, theirs_row in zip(ours_csv, theirs_csv, strict=True):
        for key, value in theirs_row.items():
            np.testing.assert_allclose(ours_row[key], value, rtol=1e-5, atol=1e-6)


def _error_of(run: Any) -> str | None:
    try:
        run()
    except ValueError as error:
        return str(error)
    return None


@pytest.mark.slow  # trains with model.fit and FunctionLoop; about 1 s of CPU
def test_tensorboard_takes_a_non_scalar_metric_as_under_fit(tmp_path: Path) -> None:
    """Keras' TensorBoard writes metrics with ``tf.summary.scalar``: where ``fit`` hands
    it a ``(1,)`` F1 value (numpy 2), it fails there ("Expected scalar shape, saw shape:
    (1,)"); where ``fit`` hands it a float (older numpy), it writes it. Either way the
    loop does what ``fit`` does, with the same message and the same event files."""
    under_fit = _error_of(
        lambda: make_model(1).fit(
            data(1, 0),
            epochs=2,
            callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "fit"))],
            verbose=0,
        )
    )
    model = make_model(1)
    hook = KerasCallbacks([keras.callbacks.TensorBoard(str(tmp_path / "loop"))], model)
    under_loop = _error_of(
        lambda: FunctionLoop(data(1, 0), model=model, hooks=[hook]).run(epochs=2)
    )
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert under_fit is not None
        assert "Expected scalar shape, saw shape: (1,)" in under_fit
    assert under_loop == under_fit
    # the same runs, and the loop's own input measurement in a run of its own beside them
    ours = sorted(p.name for p in (tmp_path / "loop").iterdir() if p.name != INPUT_RUN)
    assert ours == sorted(p.name for p in (tmp_path / "fit").iterdir())
