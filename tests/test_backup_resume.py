"""Keras' ``BackupAndRestore(save_freq=N)`` through ``FunctionLoop`` resumes at the next batch.

Keras records the last batch of a batch-level backup but ``fit`` starts that epoch again
from its first batch (keras-team/keras#19179). Through ``KerasCallbacks`` the loop resumes
at the batch after the backup instead, as after a ``PreemptionCheckpoint``: a run that
fails in the middle of an epoch and is started again (a new model, a new dataset, as a
new process would make them) ends with the steps, the examples (each once an epoch, by
their ``id``) and the weights of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import keras_classifier

pytestmark = pytest.mark.slow  # runs of 39 steps, three a case: too long for the fast run

N, BATCH, EPOCHS, SAVE_FREQ = 200, 16, 3, 4
STEPS = -(-N // BATCH)  # 13 a pass


def _write(root: Path, pipeline: str = "stream") -> Path:
    from tfr_hooks import tfrecord

    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    if pipeline != "mixture":
        tfrecord.write({"id": np.arange(N), "x": x, "y": y}, root, shards=2)
        return root
    # two sources at weights 0.7 and 0.3 of their sizes: each mixture epoch reads each once
    for name, part in (("a", slice(0, 140)), ("b", slice(140, N))):
        arrays = {"id": np.arange(N)[part], "x": x[part], "y": y[part]}
        tfrecord.write(arrays, root / name, shards=2, compression="")
    return root


def _train_data(data: Path, pipeline: str, weights: dict[str, float] | None = None) -> Any:
    from tfr_hooks import tfrecord

    if pipeline == "mixture":
        return tfrecord.dataset(
            {"a": data / "a", "b": data / "b"},
            BATCH,
            weights=weights or {"a": 0.7, "b": 0.3},
            shuffle="global",
            seed=3,
            as_tuple=("x", "y", "id"),
        )
    return tfrecord.dataset(
        data,
        BATCH,
        shuffle="global" if pipeline == "memory" else 64,
        seed=3,
        as_tuple=("x", "y", "id"),
        in_memory=pipeline.startswith("memory"),
    )


class _Crash(RuntimeError):
    pass


def _run(
    data: Path,
    backup: Path,
    pipeline: str,
    crash_at: tuple[int, int] | None,
    weights: dict[str, float] | None = None,
) -> Any:
    import keras
    import tensorflow as tf

    from tfr_hooks import FunctionLoop, Hook, KerasCallbacks

    # first: it sets the global seed, which the dataset's seeded shuffle also uses
    model = keras_classifier(lr=0.1, momentum=0.9)
    train = _train_data(data, pipeline, weights)
    model.jit_compile = False  # the step notes its ids through a py_function
    seen: list[tuple[int, int, list[int]]] = []  # (epoch, step index, ids) of trained batches
    state: list[Any] = []

    def note(ids: Any) -> Any:
        loop = state[0]
        seen.append((loop.epoch, loop.epoch_steps, ids.numpy().tolist()))
        return np.int64(0)

    train_step = model.train_step

    def recording_step(batch: Any) -> Any:
        x, y, ids = batch
        done = tf.py_function(note, [ids], tf.int64)
        with tf.control_dependencies([done]):
            return train_step((x, y))

    model.train_step = recording_step

    class Crash(Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            if crash_at == (self.loop.epoch, self.loop.epoch_steps):
                raise _Crash("the machine went away")

    backup_cb = keras.callbacks.BackupAndRestore(str(backup), save_freq=SAVE_FREQ)
    loop = FunctionLoop(train, model=model, hooks=[KerasCallbacks([backup_cb], model), Crash()])
    state.append(loop.loop)
    with contextlib.suppress(_Crash):
        loop.run(epochs=EPOCHS)
    return seen, model, loop


@pytest.fixture(scope="module")
def mixture_crash(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Any]]:
    """The mixture's data, and its run that failed after step 9 of epoch 1: its backup
    directory and the batches it trained. Both mixture tests go on from a copy of it."""
    root = tmp_path_factory.mktemp("mixture")
    data = _write(root / "data", "mixture")
    first, _, _ = _run(data, root / "run", "mixture", (1, 9))
    return data, root / "run", first


def _crashed(tmp_path: Path, pipeline: str, request: pytest.FixtureRequest) -> tuple[Path, list]:
    """The data, and the batches of a run that failed after step 9 of epoch 1 and left
    its backup in ``tmp_path / "run"`` (the mixture's is shared by its two tests)."""
    if pipeline == "mixture":
        data, run, first = request.getfixturevalue("mixture_crash")
        shutil.copytree(run, tmp_path / "run")
        return data, first
    data = _write(tmp_path / "data", pipeline)
    first, _, _ = _run(data, tmp_path / "run", pipeline, (1, 9))
    return data, first


# memory-buffer: shuffle=N in memory is a buffer, which resumes as streamed (a replay);
# mixture: two named sources at weights= (a seek of the mixture's position)
@pytest.mark.parametrize("pipeline", ["stream", "memory", "memory-buffer", "mixture"])
def test_batch_level_backup_resumes_at_the_next_batch(
    tmp_path: Path, pipeline: str, request: pytest.FixtureRequest
) -> None:
    # fails after step 9 of epoch 1; the last backup (every 4 steps, counted over the
    # run: after steps 16, 20 of 39) was taken after epoch 1's step 7 (index 6)
    data, first = _crashed(tmp_path, pipeline, request)
    assert (tmp_path / "run" / "training_metadata.json").exists()
    ref_seen, ref_model, _ = _run(data, tmp_path / "ref", pipeline, None)
    assert len(ref_seen) == EPOCHS * STEPS

    backed_up = (STEPS + 9) // SAVE_FREQ * SAVE_FREQ - STEPS
    assert backed_up == 7
    second, model, _ = _run(data, tmp_path / "run", pipeline, None)

    # the second run starts at epoch 1's eighth batch and trains on the rest
    assert (second[0][0], second[0][1]) == (1, backed_up)
    assert int(model.optimizer.iterations.numpy()) == EPOCHS * STEPS
    kept = [s for s in first if (s[0], s[1]) < (1, backed_up)]  # trained before the backup
    assert kept + second == ref_seen  # the same batches, in the same order
    for epoch in range(EPOCHS):
        ids = sorted(i for e, _, batch in kept + second if e == epoch for i in batch)
        assert ids == list(range(N)), epoch
    for ours, theirs in zip(model.get_weights(), ref_model.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)  # bitwise
    assert not (tmp_path / "run").exists()  # the run completed: Keras removed its backup


def test_a_mixture_restarted_from_a_backup_with_other_weights_goes_on(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The mixture's state is kept beside the Keras backup: other weights go on from it."""
    from tfr_hooks import tfrecord

    data, first = _crashed(tmp_path, "mixture", request)
    assert (tmp_path / "run" / "tfr_hooks_input").exists()
    backed_up = 7  # as in the test above: epoch 1's seventh batch was the last backed up
    second, _, _ = _run(data, tmp_path / "run", "mixture", None, {"a": 0.3, "b": 0.7})
    assert (second[0][0], second[0][1]) == (1, backed_up)
    kept = [s for s in first if (s[0], s[1]) < (1, backed_up)]
    for name, pick, size in (("a", lambda i: i < 140, 140), ("b", lambda i: i >= 140, 60)):
        ids = [i for _, _, batch in kept + second for i in batch if pick(i)]
        alone = tfrecord.dataset(
            {name: data / name},
            BATCH,
            weights={name: 1},
            shuffle="global",
            seed=3,
            num_epochs=None,
        )
        stream = [int(i) for b in alone.take(-(-len(ids) // BATCH)) for i in b["id"]]
        assert ids == stream[: len(ids)], name  # each source goes on where it stopped
        for start in range(0, len(ids), size):  # each record once per its source's epoch
            assert len(set(ids[start : start + size])) == len(ids[start : start + size])
    for _, _, batch in second:  # at the new weights: b 0.7, within 0.05 a whole batch
        if len(batch) == BATCH:
            assert abs(np.mean(np.array(batch) >= 140) - 0.7) <= 1 / BATCH + 1e-9
    assert not (tmp_path / "run").exists()  # the run completed: the backup is removed
