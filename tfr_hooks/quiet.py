"""Import TensorFlow without its start-up chatter, for command-line tools and examples.

TensorFlow 2.21 prints a dozen lines when it starts on a machine without a GPU (oneDNN
notices, "Could not find cuda drivers", "failed call to cuInit", CPU feature hints). Some
are printed before its log level is read, so ``TF_CPP_MIN_LOG_LEVEL`` cannot hide them.
:func:`import_tensorflow` captures the process's standard error while TensorFlow starts
and writes back every line except those known notices, so real errors still show.

This module imports only the standard library until :func:`import_tensorflow` is called.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

__all__ = ["import_tensorflow", "NOISE"]

#: Start-up lines that carry no information on a CPU-only machine.
NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|port\.cc:\d+\] oneDNN custom operations are on"
    r"|cudart_stub\.cc:\d+\] Could not find cuda drivers"
    r"|cuda_platform\.cc:\d+\] failed call to cuInit"
    r"|cuda_executor\.cc:\d+\]|cuda_diagnostics\.cc:\d+\]"
    r"|cpu_feature_guard\.cc:\d+\]"
    r"|^To enable the following instructions:"
    r"|mlir_graph_optimization_pass\.cc:\d+\] MLIR V1 optimization pass is not enabled"
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
    r"|TF-TRT Warning: Could not find TensorRT"
)


def import_tensorflow() -> ModuleType:
    """Import and start TensorFlow, dropping its known start-up notices from stderr.

    Sets ``TF_CPP_MIN_LOG_LEVEL=2`` unless the environment sets it. Lines that are not
    known notices (errors among them) are written back to standard error.

    Returns:
        The ``tensorflow`` module.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _filtered_stderr():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # where the CUDA probe happens
    return tf


@contextlib.contextmanager
def _filtered_stderr() -> Iterator[None]:
    """Send file descriptor 2 to a file for the block, then replay what is not noise."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (pytest capture, IDEs)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().decode(errors="replace").splitlines(keepends=True)
                if not NOISE.search(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
