"""Running ``tests/_resume_child.py`` through interruptions, and reading what it trained on.

Shared by ``tests/test_function_loop_determinism.py`` and ``tests/test_resume_chaos.py``.
A run is a sequence of attempts in one output directory: each but the last is
interrupted (SIGTERM or SIGKILL to one task after a given step), each starts the
cluster again. Every attempt notes the batches each task trained on; the batches an
interrupted attempt trained after its last save are trained again by the next one, which
starts at the step after that save.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from _cluster import Worker, run_cluster

CHILD = "tests/_resume_child.py"
N, BATCH, EPOCHS, SAVE_FREQ = 120, 16, 3, 3
PREEMPTED = 42


def _int64(values: list[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def write_data(root: Path, pipeline: str) -> Path:
    """N examples (``id``, ``x``, ``y``) in 2 files: written by a plain
    ``tf.io.TFRecordWriter`` for ``memory`` and ``stream``, as packed shards for ``packed``.
    """
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    root.mkdir(parents=True, exist_ok=True)
    half = N // 2
    if pipeline == "packed":
        from tfr_hooks import tfrecord

        columns = {"id": np.arange(N), "x": x, "y": y}
        tfrecord.write(columns, root, shards=2, examples_per_record=8)
        return root
    for index in range(2):
        with tf.io.TFRecordWriter(str(root / f"part-{index}.tfrecord")) as writer:
            for i in range(index * half, (index + 1) * half):
                features = {
                    "id": _int64([i]),
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
                    "y": _int64([int(y[i])]),
                }
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(feature=features)
                    ).SerializeToString()
                )
    return root


@dataclass
class Attempt:
    """One start of the cluster: its interruption (``None``: run to the end) and workers."""

    stop: str | None
    workers: list[Worker]


def run_attempts(
    data: Path,
    out: Path,
    pipeline: str,
    stops: list[str | None],
    *,
    workers: int = 0,
    timeout: float = 180,
    env: dict[str, str] | None = None,
) -> list[Attempt]:
    """Start the run once per entry of ``stops`` (``KIND:EPOCH:STEP:TASK``), then to the end.

    Each interrupted attempt must end as its interruption says: SIGTERM, every task
    exits 42 (PreemptionCheckpoint); SIGKILL, the killed task dies of it and the others
    stop with an error. The last attempt must complete on every task. ``env`` adds to
    (or overrides) the children's environment (``BATCH``, ``SERVICE``).
    """
    attempts = []
    for index, stop in enumerate([*stops, None]):
        extra = {"ATTEMPT": str(index), "EPOCHS": str(EPOCHS), "BATCH": str(BATCH)}
        extra["SAVE_FREQ"] = str(SAVE_FREQ)
        extra.update(env or {})
        if stop is not None:
            extra["STOP"] = stop
        argv = [CHILD, str(data), str(out), pipeline]
        started = run_cluster(argv, workers, timeout=timeout, env=extra)
        attempts.append(Attempt(stop, started))
        detail = "\n".join(f"task {w.index} rc={w.returncode}\n{w.stderr[-3000:]}" for w in started)
        if stop is None:
            assert all(w.returncode == 0 for w in started), detail
        elif stop.startswith("TERM"):
            assert all(w.returncode == PREEMPTED for w in started), f"{stop}\n{detail}"
        else:
            killed = int(stop.split(":")[3])
            for w in started:
                expected = -9 if w.index == killed else "error"
                if expected == "error":
                    assert w.returncode not in (0, None), f"{stop}\n{detail}"
                else:
                    assert w.returncode == -9, f"{stop}\n{detail}"
    return attempts


def seen(out: Path, task: int, attempt: int) -> list[tuple[int, int, list[int]]]:
    """The ``(epoch, step, ids)`` of each batch ``task`` trained on in ``attempt``."""
    path = out / "seen" / f"{task}.{attempt}.jsonl"
    if not path.exists():
        return []
    return [tuple(json.loads(line)) for line in path.read_text().splitlines() if line]  # type: ignore[misc]


def stitched(out: Path, task: int, attempts: int) -> list[tuple[int, int, list[int]]]:
    """The batches that count: each attempt's, up to where the next one started."""
    batches: list[tuple[int, int, list[int]]] = []
    for attempt in range(attempts):
        new = seen(out, task, attempt)
        if new:
            start = (new[0][0], new[0][1])
            batches = [b for b in batches if (b[0], b[1]) < start]
        batches += new
    return batches


def ids_per_epoch(batches_of_tasks: list[list[tuple[int, int, list[int]]]]) -> dict[int, list[int]]:
    """Epoch to the sorted ids trained on, over all tasks."""
    found: dict[int, list[int]] = {}
    for batches in batches_of_tasks:
        for epoch, _, ids in batches:
            found.setdefault(epoch, []).extend(ids)
    return {epoch: sorted(ids) for epoch, ids in sorted(found.items())}


def weights(result: dict[str, Any]) -> list[np.ndarray]:
    """The weights a ``RESULT`` carries, as float32 arrays (JSON holds them exactly)."""
    return [np.asarray(w, dtype=np.float32) for w in result["weights"]]
