"""A run reading through a tf.data service, interrupted mid-epoch and resumed, in real processes.

One :class:`~tfr_hooks.service.local.LocalService` (a dispatcher and 2 workers on
loopback) is started by the module and stays up across every run: an uninterrupted
reference, then the same run interrupted and resumed in new processes. The trainer is
``tests/_resume_child.py`` (``FunctionLoop``, a Keras 3 model,
``tfrecord.dataset(files, 12, shuffle=64, seed=3, service=address)``,
``PreemptionCheckpoint`` for a SIGTERM, ``BackupAndRestore(save_freq=3)`` through
``KerasCallbacks`` for a SIGKILL), as in ``tests/test_function_loop_determinism.py``.

What the service gives, and so what is asserted:

* **The order is not deterministic.** The dispatcher hands the splits to whichever worker
  asks first, and the batches of the 2 workers arrive interleaved as they come: a new
  job (every pass, every process) has its own order, seed or not. No test asserts an
  order, nor weights equal to the reference's.
* **The counts are exact.** 12 divides each file's 60 examples, so however the files are
  split every batch is full and an epoch is 10 steps of 120 examples. A run resumed at
  step ``k`` of an epoch starts a new job for that epoch, passes over its first ``k``
  batches (they count in the epoch's examples) and trains the rest to the data's end:
  the epoch has the steps and examples of an uninterrupted one, and the run the same
  total steps. The batches the resumed process trains in that epoch hold each example
  at most once, and they and the batches it passed over are the epoch's examples each
  once; they are not the complement of what the interrupted process trained (another
  job, another order), so across both processes an example of that epoch may be trained
  twice or not at all. Every other epoch trains each example exactly once.

``SessionLoop`` is resumed the same way (``tests/_graph_resume_child.py``,
``read_batches(..., service=address)``, ``EpochCheckpoint``): SIGTERM mid-epoch, then a
new process.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tensorflow as tf

import _graph_resume_child as graph
import tfr_hooks
from _resume import EPOCHS, N, run_attempts, seen, stitched, write_data
from helpers import keras_regressor
from test_checkpoint_mid_epoch import Child, _lines
from test_function_loop_resume import Crash
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.graph.checkpoint import resume_position_of
from tfr_hooks.service.local import LocalService

#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 180
BATCH = 12  # divides each file's 60 examples: every batch is full
STEPS = N // BATCH  # 10 an epoch
IDS = list(range(N))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.data_service,
    pytest.mark.timeout(START + 420),
]


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    with LocalService(workers=2, timeout=START) as local:
        yield local.address


def _epochs(batches: list[tuple[int, int, list[int]]]) -> dict[int, list[tuple[int, list[int]]]]:
    """Epoch to its ``(step, ids)`` batches, in the order they were trained."""
    found: dict[int, list[tuple[int, list[int]]]] = {}
    for epoch, step, ids in batches:
        found.setdefault(epoch, []).append((step, ids))
    return found


def _assert_exact_epoch(batches: list[tuple[int, list[int]]], epoch: int) -> None:
    assert [step for step, _ in batches] == list(range(STEPS)), epoch
    assert sorted(i for _, ids in batches for i in ids) == IDS, epoch  # each example once


def test_function_loop_resumed_through_the_service_trains_exact_epochs(
    tmp_path: Path, service: str
) -> None:
    data = write_data(tmp_path / "data", "stream")
    env = {"SERVICE": service, "BATCH": str(BATCH)}
    (ref_attempt,) = run_attempts(data, tmp_path / "ref", "served", [], env=env)
    reference = ref_attempt.workers[0].result()
    assert reference["counts"] == [[e, STEPS, N] for e in range(EPOCHS)]
    assert reference["iterations"] == EPOCHS * STEPS
    for epoch, batches in _epochs(stitched(tmp_path / "ref", 0, 1)).items():
        _assert_exact_epoch(batches, epoch)

    # SIGTERM after epoch 0's step 5 (PreemptionCheckpoint saves a step or two later);
    # SIGKILL after epoch 1's step 5, two steps past the last periodic save
    out = tmp_path / "run"
    attempts = run_attempts(data, out, "served", ["TERM:0:5:0", "KILL:1:5:0"], env=env)
    result = attempts[-1].workers[0].result()
    starts = [tuple(seen(out, 0, attempt)[0][:2]) for attempt in (1, 2)]
    assert starts[0][0] == 0 and 5 < starts[0][1] < STEPS, starts  # mid-epoch
    assert starts[1][0] == 1 and 0 < starts[1][1] <= 5, starts

    # the same total steps, and every epoch the steps and examples of the reference's
    assert result["iterations"] == reference["iterations"]
    assert result["counts"] == [[1, STEPS, N], [2, STEPS, N]]
    epochs = _epochs(stitched(out, 0, len(attempts)))
    assert sorted(epochs) == list(range(EPOCHS))
    for epoch, batches in epochs.items():
        assert [step for step, _ in batches] == list(range(STEPS)), epoch
        assert all(len(ids) == BATCH for _, ids in batches), epoch
    # each resumed epoch: the resumed process trains the steps left, each example once
    for attempt, (epoch, start) in zip((1, 2), starts, strict=True):
        trained = [i for e, _, ids in seen(out, 0, attempt) if e == epoch for i in ids]
        assert len(trained) == len(set(trained)) == N - start * BATCH, (epoch, start)
        assert set(trained) <= set(IDS)
    # the epoch after the last resumed one is trained whole by the last process
    _assert_exact_epoch(epochs[2], 2)
    assert not (out / "preemption").exists() and not (out / "backup").exists()


# -- SessionLoop: tests/_graph_resume_child.py with read_batches(service=) --------------


def test_session_loop_resumed_through_the_service_trains_exact_epochs(
    tmp_path: Path, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 files of 22 examples at 8 a batch: 6 steps and 44 examples an epoch, whether the
    # workers take a file each (3 + 3 batches) or one takes both (6)
    monkeypatch.setenv("SERVICE", service)
    graph.write_data(str(tmp_path / "data"))
    counts = {str(e): [graph.STEPS, graph.EXAMPLES] for e in range(graph.EPOCHS)}
    args = ["--data", str(tmp_path / "data"), "--pipeline", "served"]
    started: list[Child] = []
    try:
        started.append(Child(tmp_path, "ref", *args, "--logdir", str(tmp_path / "ref")))
        assert started[0].wait(START) == 0, started[0].tail()
        ref_steps, ref_done = _lines(started[0].out)
        assert ref_done[0]["epoch_counts"] == counts

        logdir = tmp_path / "ckpt"
        args += ["--logdir", str(logdir)]
        started.append(Child(tmp_path, "first", *args, "--ready", "1:2", "--pace", "0.5"))
        started[1].wait_for("READY", START)  # epoch 1, step 2; the steps are now slow
        started[1].popen.send_signal(signal.SIGTERM)
        assert started[1].wait(60) == 0, started[1].tail()
        epoch, step, _ = resume_position_of(tf.train.latest_checkpoint(str(logdir)))
        assert epoch == 1 and 2 <= step < graph.STEPS, (epoch, step)  # saved mid-epoch
        steps, _ = _lines(started[1].out)

        started.append(Child(tmp_path, "second", *args))
        assert started[2].wait(START) == 0, started[2].tail()
        resumed, done = _lines(started[2].out)
    finally:
        for child in started:
            child.kill()
    assert done[0]["initial"] == [1, step]
    # the resumed epoch and the next have the steps and examples of the reference's, and
    # the run its total steps
    assert done[0]["epoch_counts"] == {"1": counts["1"], "2": counts["2"]}
    kept = [s for s in steps if (s[0], s[1]) < (1, step)]  # up to the save
    assert len(kept) + len(resumed) == len(ref_steps) == graph.EPOCHS * graph.STEPS
    assert [s[1] for s in resumed if s[0] == 1] == list(range(step, graph.STEPS))
    trained = [i for e, _, ids in resumed if e == 1 for i in ids]
    assert len(trained) == len(set(trained))  # each example at most once
    epoch_2 = sorted(i for e, _, ids in resumed if e == 2 for i in ids)
    assert epoch_2 == list(range(graph.EXAMPLES))  # each example once


# -- a resume whose service lost its workers: an error naming it, not a hang ------------

BOUND = 5.0  # service_timeout
#: what ending the read may take beyond the bound: the watch's checks, an RPC's timeout
MARGIN = 25.0


def _graph_run(logdir: Path, *hooks: tfr_hooks.Hook, service_timeout: float = 60.0) -> None:
    """The graph child's served run, in this process, with ``EpochCheckpoint(logdir)``."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(graph.SEED)
        batches, model, _ = graph.build({"plain": str(logdir.parent / "data" / "plain")}, "served")
        loop = tfr_hooks.SessionLoop(
            model.train_op,
            {"loss": model.loss},
            data=batches,
            hooks=[tfr_hooks.EpochCheckpoint(str(logdir)), *hooks],
            service_timeout=service_timeout,
        )
        loop.run(epochs=graph.EPOCHS)


# a regression hangs in a C++ read, which pytest-timeout's signal method cannot end
@pytest.mark.timeout(START + 120, method="thread")
def test_a_resume_mid_epoch_on_a_service_without_workers_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resumed run's first reads are bounded too: SessionLoop's skipped batches, and
    the pass FunctionLoop starts (and leaves) for each earlier epoch of the run.
    """
    graph.write_data(str(tmp_path / "data"))
    with LocalService(workers=1, timeout=START) as local:
        monkeypatch.setenv("SERVICE", local.address)
        logdir = tmp_path / "ckpt"
        _graph_run(logdir, graph.StopAt(epoch=1, step=3))
        assert resume_position_of(tf.train.latest_checkpoint(str(logdir)))[:2] == (1, 3)
        # FunctionLoop: a Keras run whose BackupAndRestore saved at epoch 1's step 2
        import keras

        plain = str(tmp_path / "data" / "plain")
        backup = str(tmp_path / "backup")

        def keras_run(*callbacks: keras.callbacks.Callback) -> None:
            data = tfrecord.dataset(plain, graph.BATCH, as_tuple=("x", "y"), service=local.address)
            model = keras_regressor(inputs=4)
            saves = [keras.callbacks.BackupAndRestore(backup, save_freq=2), *callbacks]
            hooks = [tfr_hooks.KerasCallbacks(saves, model)]
            FunctionLoop(data, model=model, hooks=hooks, service_timeout=BOUND).run(epochs=3)

        with pytest.raises(RuntimeError, match="simulated crash"):
            keras_run(Crash(epoch=1))  # after its second batch

        local.kill_worker(0)
        for resume in (functools.partial(_graph_run, logdir, service_timeout=BOUND), keras_run):
            started = time.monotonic()
            with pytest.raises(ConnectionError, match=f"{local.address}: no worker left"):
                resume()
            assert time.monotonic() - started < BOUND + MARGIN, resume
