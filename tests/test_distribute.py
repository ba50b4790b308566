"""tfr_hooks.tf2.distribute in one process: roles from TF_CONFIG, sharding, chief-only writing.

A process's role in a cluster comes from ``TF_CONFIG`` (what cluster launchers set), so
these tests set it in the environment and run the real loops, callbacks and writers in
this process; ``test_distribute_cluster`` runs real clusters.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from helpers import keras_regressor
from tfr_hooks import distribute, tfrecord
from tfr_hooks.chief_only import ChiefOnlyWriting
from tfr_hooks.tfrecord.pipelines import sharding

v1 = tf.compat.v1
Policy = tf.data.experimental.AutoShardPolicy


def _config(index: int, workers: int = 2, chief: bool = False, kind: str = "worker") -> str:
    cluster: dict[str, list[str]] = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["127.0.0.1:1999"]
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


@pytest.fixture
def as_task(monkeypatch: pytest.MonkeyPatch):
    def set_task(config: str | None) -> None:
        if config is None:
            monkeypatch.delenv("TF_CONFIG", raising=False)
        else:
            monkeypatch.setenv("TF_CONFIG", config)

    return set_task


# -- roles -------------------------------------------------------------------------------


def test_roles_come_from_tf_config(as_task) -> None:
    as_task(None)
    assert distribute.current_task() == distribute.TaskInfo(None, 0, 1, True)
    as_task(_config(0))
    assert distribute.current_task() == distribute.TaskInfo("worker", 0, 2, True)
    as_task(_config(1))
    task = distribute.current_task()
    assert (task.is_chief, task.num_workers, task.name) == (
        False,
        2,
        "/job:worker/replica:0/task:1",
    )
    # with a chief task, worker 0 is not the chief
    as_task(_config(0, chief=True))
    assert not distribute.current_task().is_chief
    as_task(_config(0, chief=True, kind="chief"))
    assert distribute.current_task() == distribute.TaskInfo("chief", 0, 3, True)


def test_a_broken_tf_config_is_named(as_task) -> None:
    as_task("{not json")
    with pytest.raises(ValueError, match=r"Expected `TF_CONFIG` to be JSON.*Received: TF_CONFIG="):
        distribute.current_task()


def test_loopback_cluster_uses_distinct_loopback_ports() -> None:
    configs = [json.loads(c) for c in sharding.loopback_cluster(3)]
    addresses = configs[0]["cluster"]["worker"]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"]["worker"] == addresses for c in configs)
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len({a.rsplit(":", 1)[1] for a in addresses}) == 3
    with pytest.raises(ValueError, match="Received: num_workers=0"):
        sharding.loopback_cluster(0)


# -- sharding ----------------------------------------------------------------------------


def _shards(root: Path, shards: int, n: int = 24) -> Path:
    rng = np.random.default_rng(0)
    data = {"index": np.arange(n), "x": rng.normal(size=(n, 4)).astype(np.float32)}
    tfrecord.write(data, root, shards=shards)
    return root


def _policy(ds: tf.data.Dataset) -> int:
    return ds.options().experimental_distribute.auto_shard_policy


def test_datasets_shard_by_file_with_enough_files_else_by_data(tmp_path, as_task) -> None:
    one, two = _shards(tmp_path / "one", 1), _shards(tmp_path / "two", 2)
    as_task(_config(1))
    # a read that cannot seek (a buffer): by file when every worker has a file
    assert _policy(tfrecord.dataset(two, 4, shuffle=8)) == Policy.FILE
    assert _policy(tfrecord.dataset(one, 4, shuffle=8)) == Policy.DATA
    # a read that seeks (unshuffled, uncompressed): one sequence split by data, so that its
    # position holds on any worker count (issue 52)
    assert _policy(tfrecord.dataset(two, 4)) == Policy.DATA
    assert tfrecord.source(two, 4).position is not None
    assert (
        _policy(tfrecord.dataset(two, 4, read_config=tfrecord.ReadConfig(shard="file")))
        == Policy.FILE
    )
    assert tfrecord.source(two, 4, read_config=tfrecord.ReadConfig(shard="file")).position is None
    assert (
        _policy(tfrecord.dataset(two, 4, read_config=tfrecord.ReadConfig(shard="data")))
        == Policy.DATA
    )
    assert (
        _policy(tfrecord.dataset(one, 4, read_config=tfrecord.ReadConfig(shard="off")))
        == Policy.OFF
    )
    with pytest.raises(
        ValueError, match=r"at least as many files as workers.*2 workers.*1 file.*shard='file'"
    ):
        tfrecord.dataset(one, 4, read_config=tfrecord.ReadConfig(shard="file"))
    with pytest.raises(ValueError, match=r"Expected `shard` to be one of.*Received: shard='rows'"):
        tfrecord.dataset(two, 4, read_config=tfrecord.ReadConfig(shard="rows"))
    as_task(None)  # no cluster known: TensorFlow's own AUTO policy, or what is asked
    assert _policy(tfrecord.dataset(one, 4)) == Policy.AUTO
    assert (
        _policy(tfrecord.dataset(one, 4, read_config=tfrecord.ReadConfig(shard="file")))
        == Policy.FILE
    )


def test_workers_shuffle_alike_without_a_seed(tmp_path, as_task) -> None:
    root = _shards(tmp_path / "d", 2, n=64)

    def order() -> list[int]:
        ds = tfrecord.dataset(root, 64, shuffle=64, as_tuple=("index",))
        return next(iter(ds))[0].numpy().tolist()

    as_task(_config(0))
    first = order()
    as_task(_config(1))
    assert order() == first  # else sharding would read some examples twice, others never
    assert sorted(first) == list(range(64)) and first != list(range(64))


# -- chief-only writing ------------------------------------------------------------------


def _model() -> keras.Model:
    return keras_regressor(momentum=0.9)


def _data() -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x.sum(1))).batch(8)


def _callbacks(out: Path) -> list[keras.callbacks.Callback]:
    return [
        keras.callbacks.ModelCheckpoint(str(out / "ckpt" / "m.weights.h5"), save_weights_only=True),
        keras.callbacks.BackupAndRestore(str(out / "backup"), delete_checkpoint=False),
        keras.callbacks.TensorBoard(str(out / "tb")),
        keras.callbacks.CSVLogger(str(out / "log.csv")),
    ]


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.slow  # trains; about 1 s of CPU
def test_a_non_chief_worker_writes_to_a_temporary_place_that_is_removed(
    tmp_path, as_task, monkeypatch, capsys
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    out = tmp_path / "out"
    callbacks = _callbacks(out)
    before = {id(c): dict(vars(c)) for c in callbacks}
    seen_temp: list[str] = []

    class Look(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen_temp.extend(_files(scratch))

    as_task(_config(1))
    model = _model()
    hooks = [
        tfr_hooks.KerasCallbacks([*callbacks, Look()], model, verbose=1),
        tfr_hooks.TensorBoardLogger(out / "board", model=model),
    ]
    history = tfr_hooks.FunctionLoop(_data(), model=model, hooks=hooks).run(epochs=2)
    assert len(history["loss"]) == 2
    assert not out.exists()  # nothing at the chief's paths
    assert any(name.endswith("m.weights.h5") for name in seen_temp)  # it did save, elsewhere
    assert list(scratch.iterdir()) == []  # and that place is gone
    assert "Epoch 1/2" not in capsys.readouterr().out  # progress on the chief only
    for callback in callbacks:  # the callbacks are as they were, for the next run
        for attr in ("filepath", "log_dir", "filename", "backup_dir", "_weights_path"):
            if attr in before[id(callback)]:
                assert getattr(callback, attr) == before[id(callback)][attr]

    as_task(_config(0))  # the chief writes at the paths, and shows progress
    model = _model()
    hooks = [
        tfr_hooks.KerasCallbacks(callbacks, model, verbose=1),
        tfr_hooks.TensorBoardLogger(out / "board", model=model),
    ]
    tfr_hooks.FunctionLoop(_data(), model=model, hooks=hooks).run(epochs=2)
    files = _files(out)
    assert "ckpt/m.weights.h5" in files and "log.csv" in files
    assert "backup/latest.weights.h5" in files
    assert any(f.startswith("tb/train/events") for f in files)
    assert any(f.startswith("board/train/events") for f in files)
    assert "Epoch 1/2" in capsys.readouterr().out


@pytest.mark.slow  # trains and resumes; about 1 s of CPU
@pytest.mark.range_ends
def test_a_non_chief_worker_resumes_from_the_chiefs_backup_without_touching_it(
    tmp_path, as_task
) -> None:
    backup = tmp_path / "backup"

    class StopAfter(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.stop_training = True

    as_task(_config(0))  # the chief's first run: 2 of 4 epochs, backup kept
    model = _model()
    cbs = [keras.callbacks.BackupAndRestore(str(backup), delete_checkpoint=False), StopAfter()]
    tfr_hooks.FunctionLoop(_data(), model=model, hooks=[tfr_hooks.KerasCallbacks(cbs, model)]).run(
        epochs=4
    )
    saved = {name: (backup / name).read_bytes() for name in _files(backup)}
    assert json.loads(saved["training_metadata.json"])["epoch"] == 2

    as_task(_config(1))  # the other worker, restarted: same epoch, chief's files untouched
    model = _model()
    epochs: list[int] = []
    watch = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: epochs.append(e))
    cbs = [keras.callbacks.BackupAndRestore(str(backup)), watch]
    tfr_hooks.FunctionLoop(_data(), model=model, hooks=[tfr_hooks.KerasCallbacks(cbs, model)]).run(
        epochs=4
    )
    assert epochs == [2, 3]
    assert {name: (backup / name).read_bytes() for name in _files(backup)} == saved


def test_epoch_checkpoint_saves_on_the_chief_only(tmp_path, as_task) -> None:
    def run(logdir: Path) -> None:
        with tf.Graph().as_default():
            x = tf.constant(np.ones((8, 4), np.float32))
            w = tf.Variable(tf.zeros([4, 1]))
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            step = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
            loop = tfr_hooks.SessionLoop(
                step, {"loss": loss}, hooks=[tfr_hooks.EpochCheckpoint(logdir)], steps_per_epoch=2
            )
            loop.run(epochs=2)

    as_task(_config(1))
    run(tmp_path / "other")
    assert not (tmp_path / "other").exists()
    as_task(_config(0))
    run(tmp_path / "chief")
    assert tf.train.latest_checkpoint(str(tmp_path / "chief")).endswith("ckpt-epoch2-1")


def test_chief_only_writing_on_the_chief_changes_nothing() -> None:
    callbacks = _callbacks(Path("/nonexistent"))
    writing = ChiefOnlyWriting(distribute.TaskInfo())
    assert writing.apply(callbacks, keras) == callbacks
    writing.restore()
    assert writing.tempdir is None
    assert os.fspath(callbacks[0].filepath).startswith("/nonexistent")


def test_a_lost_worker_error_names_the_task() -> None:
    seen_by_chief = tf.errors.UnavailableError(
        None,
        None,
        "Collective ops is aborted by: recvmsg:Connection reset by peer\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1 "
        "while calling /tensorflow.WorkerService/RecvBuf:",
    )
    chief = distribute.TaskInfo("worker", 0, 2, True)
    better = distribute.explain_lost_worker(seen_by_chief, chief)
    assert isinstance(better, distribute.WorkerLostError)
    assert better.task == "/job:worker/replica:0/task:1"
    assert str(better).startswith("Lost task /job:worker/replica:0/task:1 of the cluster")
    assert "resume from the last backup" in str(better)
    assert distribute.explain_lost_worker(ValueError("bad value"), chief) is None
    unrelated = tf.errors.UnavailableError(None, None, "x")
    assert distribute.explain_lost_worker(unrelated, chief) is None


def test_a_lost_worker_has_one_spelling_whichever_part_of_tensorflow_names_it() -> None:
    # the coordination service (PreemptionCheckpoint's handler) spells tasks without the
    # replica; gRPC's details with it: WorkerLostError.task has TensorFlow's device form
    chief = distribute.TaskInfo("worker", 0, 2, True)
    short = tf.errors.UnavailableError(
        None,
        None,
        "The following tasks are unhealthy (stopped sending heartbeats):\n"
        "/job:worker/task:1\nThe tasks have crashed. Reported by /job:worker/task:0",
    )
    better = distribute.explain_lost_worker(short, chief)
    assert isinstance(better, distribute.WorkerLostError)
    assert better.task == "/job:worker/replica:0/task:1"
    assert str(better).startswith("Lost task /job:worker/replica:0/task:1 of the cluster")
    # this process's own task, in either spelling, is never the lost one
    own = tf.errors.UnavailableError(None, None, "Socket closed by /job:worker/task:0")
    assert distribute.explain_lost_worker(own, chief).task is None
    assert chief.name == "/job:worker/replica:0/task:0"


def test_the_steps_a_pass_makes_under_a_multi_worker_strategy() -> None:
    from tfr_hooks.tfrecord.pipelines.sharding import distributed_steps

    policies = tf.data.experimental.AutoShardPolicy

    def sharded(policy: object) -> tf.data.Dataset:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = policy
        return tf.data.Dataset.range(4000).batch(32).with_options(options)

    assert distributed_steps(sharded(policies.FILE), 1) == 125  # one worker: as it reads
    assert distributed_steps(sharded(policies.DATA), 2) == 125  # global batches, split
    assert distributed_steps(sharded(policies.OFF), 2) == 250  # every worker reads all
    # by file, each worker's share decides (126 for 2 shards of 2,000): not known up front
    assert distributed_steps(sharded(policies.FILE), 2) is None
    assert distributed_steps(sharded(policies.AUTO), 2) is None
    assert distributed_steps(tf.data.Dataset.range(5).repeat().batch(2), 2) is None
