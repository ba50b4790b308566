"""Start a cluster of worker processes on loopback ports, each with a timeout.

Every process gets its own ``TF_CONFIG`` (from :func:`tfr_hooks.distribute.loopback_cluster`,
so only ``127.0.0.1`` ports) and is killed in a ``finally`` if still running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfr_hooks.distribute import loopback_cluster

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Worker:
    """What one worker process left behind."""

    index: int
    returncode: int | None
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any]:
        """The last ``RESULT {json}`` line the worker printed."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise AssertionError(
                f"worker {self.index} printed no RESULT (rc={self.returncode}):\n"
                f"{self.stdout[-2000:]}\n{self.stderr[-4000:]}"
            )
        return json.loads(lines[-1][len("RESULT ") :])


def child_env(
    tf_config: str | None, tmpdir: Path | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0", **(extra or {}))
    # TensorFlow's preemption handler asks the GCE metadata server whether it runs on
    # GCP: a refused loopback port answers "no" at once, without a DNS lookup
    env.setdefault("GCE_METADATA_IP", "127.0.0.1:9")
    if tmpdir is not None:  # the process's own temporary directory, to check it is left empty
        tmpdir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmpdir)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return env


def run_cluster(
    argv: Sequence[str],
    num_workers: int,
    *,
    timeout: float = 120,
    configs: Sequence[str | None] | None = None,
    tmp_root: Path | None = None,
    env: dict[str, str] | None = None,
    while_running: Callable[[list[subprocess.Popen[str]]], None] | None = None,
) -> list[Worker]:
    """Run ``python argv...`` as ``num_workers`` workers of one loopback cluster.

    Args:
        argv: The script and its arguments; ``{index}`` in them becomes the process index.
        num_workers: How many processes (0: one process without ``TF_CONFIG``).
        timeout: Seconds for the whole cluster; then every process is killed.
        configs: ``TF_CONFIG`` values to use instead of fresh ones (to restart a cluster);
            ``None`` for a plain process beside the cluster.
        tmp_root: Give process ``i`` the temporary directory ``tmp_root/tmp<i>``.
        env: More environment variables for every process.
        while_running: Called with the processes once started (to signal or kill one).

    Returns:
        One :class:`Worker` per process, in task order.
    """
    if configs is None:
        configs = list(loopback_cluster(num_workers)) if num_workers else [None]
    procs: list[subprocess.Popen[str]] = []
    try:
        for index, config in enumerate(configs):
            tmpdir = None if tmp_root is None else tmp_root / f"tmp{index}"
            procs.append(
                subprocess.Popen(
                    [sys.executable, *(a.replace("{index}", str(index)) for a in argv)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=child_env(config, tmpdir, env),
                    cwd=str(ROOT),
                )
            )
        if while_running is not None:
            while_running(procs)
        deadline = time.monotonic() + timeout
        outputs = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for other in procs:
                    other.kill()
                out, err = proc.communicate(timeout=30)
                err += "\n[killed: cluster timeout]"
            outputs.append((proc.returncode, out, err))
        return [Worker(i, rc, out, err) for i, (rc, out, err) in enumerate(outputs)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
