"""tfr_hooks.quiet keeps all but the start-up notices; a normal run logs no warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _log_child import run_logged
from tfr_hooks.quiet import NOISE

SCRIPT = r"""
import os
from tfr_hooks.quiet import _filtered_stderr
with _filtered_stderr():
    os.write(2, b"I0000 00:00:1 123 port.cc:153] oneDNN custom operations are on.\n")
    os.write(2, b"E0000 00:00:1 123 cuda_platform.cc:52] failed call to cuInit: x\n")
    os.write(2, b"E0000 00:00:1 123 file_io.cc:9] a real error\n")
    os.write(2, b"Traceback: something the user must see\n")
os.write(2, b"after\n")
"""


def test_known_notices_are_dropped_and_real_errors_kept() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stderr.splitlines() == [
        "E0000 00:00:1 123 file_io.cc:9] a real error",
        "Traceback: something the user must see",
        "after",
    ]


def test_quiet_imports_only_the_standard_library() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys, tfr_hooks.quiet; print('tensorflow' in sys.modules)"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "False"


#: A warning or error from Python logging ("WARNING:name:message", logging's default
#: format), or from TensorFlow's C++ runtime ("W0000 00:00:...", absl's format).
_PROBLEM = re.compile(r"^(WARNING|ERROR|CRITICAL):|^[WEF]\d{4} ")


@pytest.mark.slow
def test_a_normal_run_logs_no_warning(tmp_path: Path) -> None:
    # a new user's first runs (queue, memory and tf.data pipelines, both loops, tf_keras
    # and Keras 3 models, callbacks and checkpoints), with Python logging at DEBUG, at
    # TensorFlow's default C++ log level and at 1: nothing but the start-up notices
    # tfr_hooks.quiet filters may show as a warning or error
    runs = run_logged(
        ({"TF_CPP_MIN_LOG_LEVEL": "0"}, ("normal", str(tmp_path / "level0"))),
        ({"TF_CPP_MIN_LOG_LEVEL": "1"}, ("normal", str(tmp_path / "level1"))),
    )
    for result, stderr in runs:
        assert set(result) == {"queue", "memory", "function"}
        assert len(result["queue"]["loss"]) == len(result["function"]["val_loss"]) == 2
        lines = stderr.splitlines()
        problems = [
            "\n".join(lines[i : i + 3])  # with what follows: the node, the reason
            for i, line in enumerate(lines)
            if _PROBLEM.search(line) and not NOISE.search(line)
        ]
        assert problems == [], "\n".join(problems)
