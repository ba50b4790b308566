"""Data flows one way: the TFRecord layer knows nothing of hooks or loops."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import sys
import tfr_hooks.tfrecord
from tfr_hooks import tfrecord
tfrecord.dataset, tfrecord.read_batches, tfrecord.write, tfrecord.inspect
loaded = sorted(m for m in sys.modules if m.startswith("tfr_hooks"))
print("\\n".join(loaded))
"""

HOOK_LAYER = {
    "tfr_hooks.hooks",
    "tfr_hooks.engine",
    "tfr_hooks.data_errors",
    "tfr_hooks.distribute",
    "tfr_hooks.session_loop",
    "tfr_hooks.function_loop",
    "tfr_hooks.queue_runners",
    "tfr_hooks.signals",
}


def test_the_tfrecord_layer_imports_no_hook_or_loop_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = set(result.stdout.split())
    assert "tfr_hooks.tfrecord.read" in loaded
    assert not loaded & HOOK_LAYER, sorted(loaded & HOOK_LAYER)
