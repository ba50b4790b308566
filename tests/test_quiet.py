"""tfr_hooks.quiet drops TensorFlow's known start-up notices and keeps everything else."""

from __future__ import annotations

import os
import subprocess
import sys

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
