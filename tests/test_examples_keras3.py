"""examples/keras3_tfrecord.py, run as a user runs it: a real subprocess on a few epochs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
EPOCHS = 4


def epoch_values(run: Path, tag: str) -> list[float]:
    """Keras 3 writes v2 summaries: scalars are stored as tensors."""
    acc = EventAccumulator(str(run))
    acc.Reload()
    return [float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]


@pytest.mark.slow
def test_keras3_tfrecord_example(tmp_path: Path) -> None:
    data, logdir = tmp_path / "data", tmp_path / "logs"
    # full C++ logging, so that an OUT_OF_RANGE at an epoch end would show in stderr
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "keras3_tfrecord.py"), "--data-dir", str(data),
         "--logdir", str(logdir), "--epochs", str(EPOCHS)],  # steps_per_execution "auto"
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{EPOCHS} epochs; best val_loss" in result.stdout
    assert "OUT_OF_RANGE" not in result.stderr
    assert "End of sequence" not in result.stderr

    # checkpoints: the best weights load into a fresh model
    best = logdir / "checkpoints" / "best.weights.h5"
    assert best.is_file()
    sys.path.insert(0, str(EXAMPLES))
    try:
        from keras3_tfrecord import build_model, records
    finally:
        sys.path.remove(str(EXAMPLES))
    model = build_model()
    model.load_weights(str(best))

    # TensorBoard: train/ and validation/ runs with one point per epoch
    train, val = logdir / "tensorboard" / "train", logdir / "tensorboard" / "validation"
    train_loss, val_loss = epoch_values(train, "epoch_loss"), epoch_values(val, "epoch_loss")
    assert len(train_loss) == len(val_loss) == EPOCHS
    assert len(epoch_values(val, "epoch_accuracy")) == EPOCHS
    assert len(epoch_values(train, "epoch_learning_rate")) == EPOCHS

    # it learns: the loss falls, and the best checkpoint classifies held-out digits
    assert train_loss[-1] < 0.6 * train_loss[0]
    assert val_loss[-1] < val_loss[0]
    hits = total = 0
    for image, label in records(data / "validation.tfrecord", 100):
        hits += int(np.sum(np.argmax(model(image, training=False), axis=1) == label.numpy()))
        total += int(label.shape[0])
    assert total == 297
    assert hits / total > 0.8
