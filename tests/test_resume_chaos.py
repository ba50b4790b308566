"""A chaos test: a seeded sequence of real interruptions ends where an uninterrupted run does.

Issue 20, item 5. Each case starts a deterministic FunctionLoop run
(``tests/_resume_child.py``: seeded, ``enable_op_determinism()``, ``BackupAndRestore(
save_freq=3)`` through ``KerasCallbacks`` and ``PreemptionCheckpoint``, an ``id`` per
example) and interrupts it three times at points drawn from ``random.Random(seed)``:
SIGTERM (every task saves and exits 42) and SIGKILL (the task dies; on two workers the
other stops with an error; the next start resumes from the last periodic save), to the
chief and to the non-chief, starting the run again after each. It must end with the
optimizer steps, the batches of every task (the same ones in the same order, every
example once an epoch, by its id) and the weights, bitwise, of an uninterrupted run:
streamed on two ``MultiWorkerMirroredStrategy`` workers (loopback, through the fork
server; each worker skips in its own files) and in memory in one process.

The seed is ``CHAOS_SEED`` (default 20) and every failure names it and the plan drawn
from it: ``CHAOS_SEED=<seed> pytest tests/test_resume_chaos.py`` replays it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from _resume import EPOCHS, N, ids_per_epoch, run_attempts, stitched, weights, write_data

pytestmark = [pytest.mark.slow, pytest.mark.resume_matrix]

SEED = int(os.environ.get("CHAOS_SEED", "20"))
STEPS = 8  # 120 examples at a global batch of 16, on one worker or two: 8 steps a pass
GAP = 4  # steps between interruptions: past the step a preemption saves at


def plan(rng: random.Random, workers: int) -> list[str]:
    """Three interruptions ``KIND:EPOCH:STEP:TASK`` at increasing steps of the run.

    SIGTERM and SIGKILL both appear and, on two workers, both tasks are hit.
    """
    total = EPOCHS * STEPS
    while True:
        points = sorted(rng.sample(range(1, total - 1), 3))
        if all(b - a >= GAP for a, b in itertools.pairwise(points)):
            break
    kinds = ["TERM", "KILL", rng.choice(["TERM", "KILL"])]
    rng.shuffle(kinds)
    tasks = [0, 1, rng.choice([0, 1])] if workers == 2 else [0, 0, 0]
    rng.shuffle(tasks)
    return [
        f"{kind}:{point // STEPS}:{point % STEPS}:{task}"
        for kind, point, task in zip(kinds, points, tasks, strict=True)
    ]


@contextlib.contextmanager
def replayable(case: str, stops: list[str]) -> Iterator[None]:
    try:
        yield
    except AssertionError as error:
        raise AssertionError(
            f"chaos case {case}, CHAOS_SEED={SEED}, interruptions {stops}: {error}"
        ) from error


@pytest.mark.parametrize(("pipeline", "workers"), [("stream", 2), ("memory", 0)])
def test_seeded_interruptions_end_equal_to_an_uninterrupted_run(
    tmp_path: Path, pipeline: str, workers: int
) -> None:
    case = f"{pipeline}-{workers or 1}"
    rng = random.Random(f"{SEED}-{case}")
    stops = plan(rng, workers)
    tasks = range(max(workers, 1))
    data = write_data(tmp_path / "data", pipeline)
    with replayable(case, stops):
        (ref,) = run_attempts(data, tmp_path / "ref", pipeline, [], workers=workers)
        reference = [w.result() for w in ref.workers]
        ref_seen = [stitched(tmp_path / "ref", t, 1) for t in tasks]

        out = tmp_path / "run"
        attempts = run_attempts(data, out, pipeline, stops, workers=workers)
        results = [w.result() for w in attempts[-1].workers]
        batches = [stitched(out, t, len(attempts)) for t in tasks]

        for task in tasks:
            assert results[task]["iterations"] == reference[task]["iterations"] == EPOCHS * STEPS
            assert batches[task] == ref_seen[task], f"task {task}: other batches"
            for ours, theirs in zip(weights(results[task]), weights(reference[task]), strict=True):
                assert np.array_equal(ours, theirs), f"task {task}: other weights"
        assert ids_per_epoch(batches) == {e: list(range(N)) for e in range(EPOCHS)}
        assert results[0]["counts"][-1] == [EPOCHS - 1, STEPS, N]
        assert not (out / "preemption").exists() and not (out / "backup").exists()
