"""examples/keras_callbacks.py, run as a user runs it: a real subprocess on tiny epochs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def epoch_scalars(run: Path, tag: str) -> list[float]:
    acc = EventAccumulator(str(run))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)]


@pytest.mark.slow
def test_keras_callbacks_example(tmp_path: Path) -> None:
    data, logdir = tmp_path / "data", tmp_path / "logs"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "keras_callbacks.py"), "--data-dir", str(data),
         "--logdir", str(logdir), "--epochs", "3"],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best val_loss" in result.stdout

    best = logdir / "checkpoints" / "best.h5"
    assert best.is_file()
    train, val = logdir / "tensorboard" / "train", logdir / "tensorboard" / "validation"
    train_loss, val_loss = epoch_scalars(train, "epoch_loss"), epoch_scalars(val, "epoch_loss")
    assert len(train_loss) == len(val_loss) == 3
    assert len(epoch_scalars(val, "epoch_accuracy")) == 3
    assert len(epoch_scalars(train, "epoch_learning_rate")) == 3

    # the best checkpoint, loaded into a fresh model, has the best validation loss
    sys.path.insert(0, str(EXAMPLES))
    try:
        from _digits import dataset
        from keras_callbacks import build_model
    finally:
        sys.path.remove(str(EXAMPLES))
    model = build_model(None)
    model.load_weights(str(best))
    losses = [
        tf_keras.losses.sparse_categorical_crossentropy(y, model(x, training=False)).numpy()
        for x, y in dataset(data / "validation.tfrecord", 100)
    ]
    assert float(np.concatenate(losses).mean()) == pytest.approx(min(val_loss), rel=1e-4)
    assert tf.executing_eagerly()  # the test process stays eager
