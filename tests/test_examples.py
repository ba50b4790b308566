"""The graph-mode examples, run as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.mark.slow
def test_seed_example_learns_and_keeps_its_output_readable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "queue_runners_keras.py"),
         "--data-dir", str(tmp_path / "data"), "--logdir", str(tmp_path / "logs"),
         "--epochs", "5"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:5]] == [["epoch", str(i)] for i in range(1, 6)]
    held_out = re.search(
        r"held-out \((\d+) records\): loss [\d.]+  accuracy ([\d.]+)", result.stdout
    )
    assert held_out is not None, result.stdout
    assert int(held_out.group(1)) == 300
    assert float(held_out.group(2)) > 0.8  # ten classes: chance is 0.1
    # TensorFlow's start-up notices and the queue API's deprecation warnings are gone
    assert "oneDNN" not in result.stderr
    assert "cuda" not in result.stderr.lower()
    assert "deprecated" not in result.stderr
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "logs" / "checkpoints"))
    assert checkpoint is not None and checkpoint.endswith(f"-{5 * (1200 // 64)}")


@pytest.mark.slow
def test_legacy_script_runs_its_own_loop_with_hooks(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import legacy_script
    finally:
        sys.path.remove(str(EXAMPLES))
    steps = legacy_script.main(
        ["--data-dir", str(tmp_path / "data"), "--logdir", str(tmp_path / "logs"), "--epochs", "2"]
    )
    assert steps == -(-2 * 1200 // 64)  # two passes over 1,200 records, last batch partial
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "logs" / "checkpoints"))
    assert checkpoint is not None and checkpoint.endswith(f"-{steps}")
    assert tf.executing_eagerly()
