"""A seeded, deterministic FunctionLoop run ends the same however often it is interrupted.

Issue 20, item 3. Under ``tf.config.experimental.enable_op_determinism()`` (which
refuses ``tf.timestamp``: the loop then does not measure its input wait) and with a
seed, a run on TFRecords written by a plain ``tf.io.TFRecordWriter`` (an ``id`` feature
per example) is interrupted twice in real processes: a SIGTERM (``PreemptionCheckpoint``
saves at a step every task agrees on and the process exits 42) and a SIGKILL after the
last periodic save (``BackupAndRestore(save_freq=3)`` through ``KerasCallbacks``: the
package's only periodic save; ``PreemptionCheckpoint`` saves on a signal only). Started
again after each, it ends with the optimizer steps, the batches (the same ones in the
same order, each example once an epoch, by its id) and the weights, bitwise, of an
uninterrupted run, on the in-memory, streamed and packed pipelines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _cluster import run_cluster
from _resume import (
    CHILD,
    EPOCHS,
    N,
    ids_per_epoch,
    run_attempts,
    seen,
    stitched,
    weights,
    write_data,
)

STEPS = 8  # 120 examples at 16 a batch: 7 full batches and one of 8


@pytest.mark.slow  # a child process imports TensorFlow (about 14 s of CPU)
def test_function_loop_trains_under_op_determinism(tmp_path: Path) -> None:
    # TensorFlow refuses the timestamps that measure the input wait under op
    # determinism; the loop leaves the wait unmeasured and trains
    data = write_data(tmp_path / "data", "memory")
    (worker,) = run_cluster(
        [CHILD, str(data), str(tmp_path / "out"), "memory"], 0, timeout=180, env={"EPOCHS": "2"}
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    result = worker.result()
    assert result["iterations"] == 2 * STEPS
    assert result["counts"] == [[0, STEPS, N], [1, STEPS, N]]
    assert result["wait_measured"] is False
    assert "Timestamp cannot be called" not in worker.stderr


@pytest.mark.slow
@pytest.mark.resume_matrix
@pytest.mark.parametrize("pipeline", ["memory", "stream", "packed"])
def test_sigterm_and_sigkill_resumes_end_bitwise_equal_to_an_uninterrupted_run(
    tmp_path: Path, pipeline: str
) -> None:
    data = write_data(tmp_path / "data", pipeline)
    (ref_attempt,) = run_attempts(data, tmp_path / "ref", pipeline, [])
    reference = ref_attempt.workers[0].result()
    ref_seen = stitched(tmp_path / "ref", 0, 1)
    assert reference["iterations"] == EPOCHS * STEPS == len(ref_seen)

    # SIGTERM after epoch 0's step 5 (counted from 0); SIGKILL after epoch 1's step 5,
    # two steps past the last periodic save (every 3 steps from the attempt's start)
    stops = ["TERM:0:5:0", "KILL:1:5:0"]
    out = tmp_path / "run"
    attempts = run_attempts(data, out, pipeline, stops)
    result = attempts[-1].workers[0].result()
    batches = stitched(out, 0, len(attempts))
    # the second attempt starts where the preemption saved (a step or two after the
    # signal: the tasks agree on it); the third one at the step after the last periodic
    # save, before the kill: the batches trained after that save are trained again
    starts = [tuple(seen(out, 0, attempt)[0][:2]) for attempt in (1, 2)]
    assert starts[0][0] == 0 and starts[0][1] in (6, 7, 8), starts
    assert starts[1][0] == 1 and 0 < starts[1][1] <= 5, starts

    assert result["iterations"] == reference["iterations"]
    assert result["counts"][-1] == [EPOCHS - 1, STEPS, N]
    assert batches == ref_seen  # the same batches in the same order
    assert ids_per_epoch([batches]) == {e: list(range(N)) for e in range(EPOCHS)}
    for ours, theirs in zip(weights(result), weights(reference), strict=True):
        assert np.array_equal(ours, theirs)  # bitwise
    assert not (out / "preemption").exists() and not (out / "backup").exists()


@pytest.mark.slow
@pytest.mark.resume_matrix
def test_a_kill_after_a_preemption_into_a_new_epoch_resumes_from_the_newer_backup(
    tmp_path: Path,
) -> None:
    # the preemption saves at epoch 1's start, while the last periodic save is of epoch
    # 0; the resumed attempt's periodic saves must name epoch 1 (Keras' callback learns
    # its epoch from its own epoch ends), else the kill's restart goes back to the older
    # preemption checkpoint and trains epoch 1's first steps a third time
    data = write_data(tmp_path / "data", "memory")
    (ref_attempt,) = run_attempts(data, tmp_path / "ref", "memory", [])
    reference = ref_attempt.workers[0].result()
    out = tmp_path / "run"
    attempts = run_attempts(data, out, "memory", ["TERM:0:6:0", "KILL:1:4:0"])
    starts = [tuple(seen(out, 0, attempt)[0][:2]) for attempt in (1, 2)]
    assert starts[0] in ((1, 0), (1, 1)), starts
    assert starts[1] == (1, 3), starts  # after the save of the attempt's third step
    result = attempts[-1].workers[0].result()
    assert stitched(out, 0, len(attempts)) == stitched(tmp_path / "ref", 0, 1)
    for ours, theirs in zip(weights(result), weights(reference), strict=True):
        assert np.array_equal(ours, theirs)  # bitwise
