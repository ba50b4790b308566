"""Start a cluster of worker processes on loopback ports, each with a timeout.

Every process gets its own ``TF_CONFIG`` (from
:func:`tfr_hooks.tfrecord.pipelines.sharding.loopback_cluster`, so only ``127.0.0.1``
ports) and is killed in a ``finally`` if still running.

The processes are real ones, forked from a ``multiprocessing`` fork server that imported
TensorFlow and Keras once (the pytest process itself does not fork): a worker then starts
in well under a second instead of paying TensorFlow's import of several seconds, which
keeps the multi-process tests near a minute in all. Each worker runs its script as
``python script args...`` would (``__main__``, ``sys.argv``, its own environment,
working directory and temporary directory, stdout and stderr to files, interpreter exit
handlers on the way out), and its exit code is the script's.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import runpy
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfr_hooks.tfrecord.pipelines.sharding import loopback_cluster

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


_SERVER: Any = None


def _context() -> Any:
    """The fork server's context, started once per test session with TensorFlow loaded."""
    global _SERVER
    if _SERVER is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tensorflow", "keras", "tfr_hooks.tf2.function_loop"])
        # what the server is started with, every worker inherits: quiet C++ logs, a fixed
        # hash seed, and the path to this directory and the package (Python 3.11 does
        # not hand sys.path to the server)
        saved = dict(os.environ)
        paths = [str(Path(__file__).parent), str(ROOT), os.environ.get("PYTHONPATH", "")]
        os.environ.update(
            TF_CPP_MIN_LOG_LEVEL="2",
            PYTHONHASHSEED="0",
            PYTHONPATH=os.pathsep.join(p for p in paths if p),
        )
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _SERVER = ctx
    return _SERVER


def _run_script(script: str, argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked worker: become ``python script argv...`` with ``env``."""
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # read TMPDIR again
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(ROOT)
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # as the interpreter does on exit (multiprocessing skips it)


def run_cluster(
    argv: Sequence[str],
    num_workers: int,
    *,
    timeout: float = 120,
    configs: Sequence[str | None] | None = None,
    tmp_root: Path | None = None,
    env: dict[str, str] | None = None,
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

    Returns:
        One :class:`Worker` per process, in task order.
    """
    if configs is None:
        configs = list(loopback_cluster(num_workers)) if num_workers else [None]
    ctx = _context()
    procs: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="tfr_hooks_cluster_") as logs:
        try:
            for index, config in enumerate(configs):
                tmpdir = None if tmp_root is None else tmp_root / f"tmp{index}"
                script, *rest = (a.replace("{index}", str(index)) for a in argv)
                streams = [os.path.join(logs, f"{index}.{name}") for name in ("out", "err")]
                proc = ctx.Process(
                    target=_run_script,
                    args=(script, rest, child_env(config, tmpdir, env), *streams),
                    daemon=True,
                )
                proc.start()
                procs.append((proc, streams))
            deadline = time.monotonic() + timeout
            timed_out = False
            for proc, _ in procs:
                proc.join(max(0.1, deadline - time.monotonic()))
                if proc.is_alive():
                    timed_out = True
                    for other, _ in procs:
                        other.kill()
                    proc.join(30)
            workers = []
            for index, (proc, (out, err)) in enumerate(procs):
                stderr = Path(err).read_text(errors="replace")
                if timed_out:
                    stderr += "\n[killed: cluster timeout]"
                workers.append(
                    Worker(index, proc.exitcode, Path(out).read_text(errors="replace"), stderr)
                )
            return workers
        finally:
            for proc, _ in procs:
                if proc.is_alive():
                    proc.kill()
                    proc.join(30)
