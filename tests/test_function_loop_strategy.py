"""FunctionLoop under MirroredStrategy over two logical CPUs (in a subprocess).

Logical devices must be configured before TensorFlow initializes its runtime, which the
test process has already done; the child process configures them first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import metrics
from tfr_hooks.input_report import WAIT_SHARE
from tfr_hooks.tuning import HISTORY_KEY

CHILD = Path(__file__).with_name("_function_loop_child.py")


@pytest.mark.slow
def test_mirrored_strategy_matches_a_single_device_run() -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), "strategy"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["replicas"] == 2

    # a user step: 1,000 records in batches of 128, each global batch split over 2 replicas;
    # exact counts, and means weighted by each replica's share (half of every batch)
    for spe, calls in ((1, 16), (3, 6)):
        run = result[f"step_fn_{spe}"]
        assert run["epochs"] == [[8, 1000], [8, 1000]]
        assert run["calls"] == calls
        assert run["history"]["index"] == pytest.approx([499.5, 499.5])
        assert run["history"]["replica"] == pytest.approx([0.5, 0.5])  # both replicas ran

    # steps_per_execution="auto" under the strategy: exact epochs, calls of several steps
    run = result["step_fn_auto"]
    assert run["epochs"] == [[500, 8000], [500, 8000]]
    assert run["history"]["index"] == pytest.approx([3999.5, 3999.5])
    # the calls as the tuner sees them are scripted (the child's Cheap): exact on any machine
    assert max(run["history"][HISTORY_KEY]) > 1 and run["calls"] < 1000  # calls of several steps

    # a Keras model created under the strategy trains as it does on one device
    mirrored, default = result["mirrored"], result["default"]
    assert mirrored["iterations"] == default["iterations"] == 12
    assert mirrored["epochs"] == [[4, 96]] * 3
    assert sorted(metrics(mirrored["history"])) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    # the input is measured under the strategy too, once per epoch
    assert len(mirrored["history"][WAIT_SHARE]) == 3
    assert all(0 <= share <= 1 for share in mirrored["history"][WAIT_SHARE])
    for key, values in metrics(default["history"]).items():
        assert mirrored["history"][key] == pytest.approx(values, rel=1e-4), key
    assert mirrored["history"]["loss"][-1] < mirrored["history"]["loss"][0]
    for ours, theirs in zip(mirrored["weights"], default["weights"], strict=True):
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-4, atol=1e-6)

    # class_weight under the strategy: the one-device run's weights, not the unweighted ones
    weighted, weighted_default = result["mirrored_class_weight"], result["default_class_weight"]
    for key, values in metrics(weighted_default["history"]).items():
        assert weighted["history"][key] == pytest.approx(values, rel=1e-4), key
    for ours, theirs in zip(weighted["weights"], weighted_default["weights"], strict=True):
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-4, atol=1e-6)
    assert not np.allclose(weighted["weights"][-2], default["weights"][-2], atol=1e-3)
