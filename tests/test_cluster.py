"""SessionLoop on a tf.compat.v1.train.Server cluster: one ps and two workers on loopback.

The cluster tests start real processes (``tests/_graph_cluster_child.py``) on
``127.0.0.1`` ports, each with a timeout and killed in a ``finally``: a ``ps`` task
serving the shared variables, worker 1 (started waiting for the chief) and the chief,
then the chief once more to see it restore its checkpoint. The workers set
``inter_op_parallelism_threads`` to workers + 1. The other tests run in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from _cluster import ROOT, child_env, run_cluster
from tfr_hooks import SessionLoop, TensorBoardLogger
from tfr_hooks.tfrecord.pipelines.sharding import loopback_cluster

CHILD = "tests/_graph_cluster_child.py"
EXAMPLES = {0: 48, 1: 80}  # each worker's own file; 2 passes of batches of 8
BATCH, NUM_EPOCHS = 8, 2
TIMEOUT = 120

_v1 = tf.compat.v1


def _steps(index: int) -> int:
    return EXAMPLES[index] * NUM_EPOCHS // BATCH


def _cluster_spec() -> dict[str, list[str]]:
    """One ps and two workers on free loopback ports."""
    addresses = json.loads(loopback_cluster(3)[0])["cluster"]["worker"]
    return {"ps": addresses[:1], "worker": addresses[1:]}


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Train on the cluster, then restart the chief; what every process reported."""
    from tfr_hooks import tfrecord

    out = tmp_path_factory.mktemp("graph_cluster")
    rng = np.random.default_rng(0)
    for index, n in EXAMPLES.items():
        x = rng.normal(size=(n, 4)).astype(np.float32)
        tfrecord.write({"x": x, "y": x[:, 0] - x[:, 1]}, out / "data" / f"w{index}")
    spec = json.dumps(_cluster_spec())
    ps = subprocess.Popen(
        [sys.executable, CHILD, "ps", "0", spec, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(None),
        cwd=str(ROOT),
    )
    try:
        argv = [CHILD, "worker", "{index}", spec, str(out)]
        workers = run_cluster(argv, 0, configs=[None, None], timeout=TIMEOUT)
        ckpt = _v1.train.get_checkpoint_state(str(out / "ckpt"))
        # the value saved, read before the restart saves more
        saved_step = int(tf.train.load_variable(ckpt.model_checkpoint_path, "global_step"))
        listing = {
            name: sorted(p.name for p in (out / name).rglob("*") if p.is_file())
            for name in ("ckpt", "summaries", "board")
        }
        restart = run_cluster([CHILD, "restart", "0", spec, str(out)], 0, timeout=TIMEOUT)
    finally:
        ps.kill()
        ps.wait(timeout=30)
    return {
        "workers": workers,
        "restart": restart[0],
        "ckpt": ckpt,
        "saved_step": saved_step,
        "listing": listing,
    }


def _result(worker: Any) -> dict[str, Any]:
    assert worker.returncode == 0, worker.stderr[-4000:]
    return dict(worker.result())


@pytest.mark.slow
def test_workers_train_shared_variables_and_end_at_their_data(
    cluster_run: dict[str, Any],
) -> None:
    chief, other = (_result(w) for w in cluster_run["workers"])
    for result in (chief, other):
        # each worker read its own file num_epochs times, one epoch a pass (its
        # schema.json counts the examples), after exactly the batches it holds
        assert result["steps"] == _steps(result["index"]), result
        assert len(result["loss"]) == NUM_EPOCHS and np.isfinite(result["loss"]).all()
        # the loop's own variables stayed on the worker, though built in the setter's scope
        assert f"/job:worker/task:{result['index']}" in result["means_device"], result
    # one global step on the ps, counted up by both workers (asynchronous updates)
    restart = _result(cluster_run["restart"])
    assert restart["ps_global_step"] == _steps(0) + _steps(1)
    assert max(chief["global_step_end"], other["global_step_end"]) == _steps(0) + _steps(1)


@pytest.mark.slow
def test_the_non_chief_waits_for_the_chief_to_initialize(cluster_run: dict[str, Any]) -> None:
    chief, other = (_result(w) for w in cluster_run["workers"])
    # worker 1 started first and waited: it saw the chief's random initial value
    assert other["ready_after"] >= 1.0, other
    assert other["marker_at_start"] == chief["marker_at_start"]
    # the chief initialized the step (worker 1 may have run some or all of its steps by
    # the time the chief's hooks look: the chief's checkpoint hook saves first)
    assert 0 <= chief["global_step_start"] <= _steps(1)
    waiting = cluster_run["workers"][1].stderr
    assert "Waiting up to 60 s for the chief" in waiting


@pytest.mark.slow
def test_only_the_chief_writes_checkpoints_and_events(cluster_run: dict[str, Any]) -> None:
    chief, other = (_result(w) for w in cluster_run["workers"])
    listing = cluster_run["listing"]
    assert any(n.endswith(".index") for n in listing["ckpt"]), listing
    assert any(n.startswith("events.out.tfevents") for n in listing["summaries"]), listing
    board = [n for n in listing["board"] if n.startswith("events.out.tfevents")]
    assert board and all(f".{chief['pid']}." in n for n in board), (board, chief["pid"])
    # every checkpoint on disk is one the chief saved; worker 1 saved none
    saved = {int(n.split("-")[-1].split(".")[0]) for n in listing["ckpt"] if n.endswith(".index")}
    assert saved <= set(chief["saved_steps"]), (saved, chief["saved_steps"])
    assert other["saved_steps"] == []
    for name in ("CheckpointSaverHook", "SummarySaverHook", "TensorBoardLogger", "ChiefOnly"):
        assert name in chief["hooks"]
        assert name not in other["hooks"]
    assert chief["chief_only_ran"] and not other["chief_only_ran"]
    dropped = cluster_run["workers"][1].stderr
    assert dropped.count("dropped the hooks writing shared files") == 1
    assert "CheckpointSaverHook, SummarySaverHook, TensorBoardLogger" in dropped


@pytest.mark.slow
def test_a_restarted_chief_restores_its_checkpoint(cluster_run: dict[str, Any]) -> None:
    chief = _result(cluster_run["workers"][0])
    restart = _result(cluster_run["restart"])
    path = cluster_run["ckpt"].model_checkpoint_path
    # the value saved, not the name: CheckpointSaverHook names the checkpoint after the
    # global step it read, and with asynchronous updates the other worker may add a step
    # between that read and the save
    last = cluster_run["saved_step"]
    assert last >= int(path.rsplit("-", 1)[-1]) >= _steps(0)  # at least the chief's own steps
    # the global step (and the random marker) continue from the checkpoint
    assert restart["global_step_start"] == last
    assert restart["marker_at_start"] == chief["marker_at_start"]
    assert restart["global_step_end"] == last + _steps(0)


# ---- in this process: argument checks, the non-chief's timeout, hook choices ----


@pytest.fixture(scope="module")
def local_server() -> Any:
    """One in-process server for the module (such a server cannot be stopped)."""
    return _v1.train.Server.create_local_server()


def _graph(name: str) -> tuple[tf.Graph, Any, Any]:
    graph = tf.Graph()
    with graph.as_default():
        step = _v1.train.get_or_create_global_step()
        weight = _v1.get_variable(name, [], initializer=_v1.ones_initializer())
        loss = tf.square(weight)
        train_op = _v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    return graph, train_op, loss


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"master": 5},
            TypeError,
            r"Expected `master` to be a session target .* Received: master=5",
        ),
        ({"is_chief": "yes"}, TypeError, r"Expected `is_chief` to be a bool or None"),
        (
            {"is_chief": False},
            ValueError,
            r"Expected `is_chief` to be True or None without a `master`",
        ),
        ({"chief_only_hooks": [object()]}, TypeError, r"Expected `chief_only_hooks\[0\]`"),
        ({"log_dir": 3}, TypeError, r"Expected `log_dir` to be a directory path"),
        ({"wait_for_chief_secs": 0}, ValueError, r"Received: wait_for_chief_secs=0"),
    ],
)
def test_cluster_arguments_are_checked(kwargs: dict[str, Any], error: type, match: str) -> None:
    _, train_op, _ = _graph("checked")
    with pytest.raises(error, match=match):
        SessionLoop(train_op, **kwargs)


def test_a_non_chief_that_waits_too_long_names_the_master(local_server: Any) -> None:
    _, train_op, loss = _graph("never_initialized")
    loop = SessionLoop(
        train_op,
        {"loss": loss},
        master=local_server.target,
        is_chief=False,
        wait_for_chief_secs=0.3,
    )
    target = local_server.target
    with pytest.raises(tf.errors.DeadlineExceededError, match=rf"waited 0.3 s .*master='{target}'"):
        loop.run()
    with pytest.raises(ValueError, match="Expected `session` to be None when the loop creates"):
        loop.run(session=_v1.Session(graph=loop.graph))


def test_the_chief_restores_log_dir_on_its_master(local_server: Any, tmp_path: Path) -> None:
    saved = str(tmp_path / "ckpt")
    for run in range(2):
        graph, train_op, loss = _graph("restored")
        hook = _v1.train.CheckpointSaverHook(saved, save_steps=100)
        loop = SessionLoop(
            train_op,
            {"loss": loss},
            hooks=[hook],
            steps_per_epoch=3,
            master=local_server.target,
            is_chief=True,
        )
        assert loop.log_dir == saved  # taken from the hook
        loop.run(epochs=1)
        with graph.as_default(), _v1.Session(local_server.target) as session:
            step = int(session.run(_v1.train.get_global_step()))
        assert step == 3 * (run + 1)  # the second chief went on from the checkpoint


def test_writers_are_dropped_on_a_non_chief_and_chief_only_hooks_added(tmp_path: Path) -> None:
    _, train_op, loss = _graph("hooks")
    writers = [
        _v1.train.CheckpointSaverHook(str(tmp_path), save_steps=1),
        _v1.train.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=loss),
        TensorBoardLogger(tmp_path),
    ]
    chief_only = _v1.train.StepCounterHook(output_dir=str(tmp_path))
    kept = _v1.train.StopAtStepHook(last_step=1)
    common = {"master": "grpc://127.0.0.1:9", "chief_only_hooks": [chief_only]}
    other = SessionLoop(train_op, {"loss": loss}, hooks=[*writers, kept], is_chief=False, **common)
    assert kept in other.hooks.hooks
    assert not set(map(id, [*writers, chief_only])) & set(map(id, other.hooks.hooks))
    chief = SessionLoop(train_op, {"loss": loss}, hooks=[*writers, kept], is_chief=True, **common)
    assert all(h in chief.hooks.hooks for h in [*writers, kept, chief_only])
    assert chief.hooks.hooks.index(chief_only) > chief.hooks.hooks.index(kept)
    assert chief.log_dir == str(tmp_path)


def test_drop_writers_drops_every_chief_only_hook_on_a_non_chief(tmp_path: Path) -> None:
    from tfr_hooks import EpochCheckpoint, Hook
    from tfr_hooks.graph.cluster import drop_writers
    from tfr_hooks.hooks import capabilities_of

    class WritesSharedFiles(Hook):
        chief_only = True

    class Plain(_v1.train.SessionRunHook):  # a user's hook, not a tfr_hooks.Hook
        pass

    own = WritesSharedFiles()
    stock = _v1.train.CheckpointSaverHook(str(tmp_path), save_steps=1)
    kept = [Hook(), Plain(), _v1.train.StopAtStepHook(last_step=1)]
    hooks = [own, kept[0], EpochCheckpoint(tmp_path), kept[1], stock, kept[2]]
    assert drop_writers(hooks, is_chief=False) == kept
    assert drop_writers(hooks, is_chief=True) == hooks
    assert [capabilities_of(h).chief_only for h in hooks] == [1, 0, 1, 0, 1, 0]
    # a plain hook of the user's gets the defaults; TensorFlow's own need a session
    assert not capabilities_of(Plain()).requires_session
    assert capabilities_of(kept[2]).requires_session


def test_tensorboard_logger_follows_the_loop_s_is_chief(tmp_path: Path) -> None:
    from tfr_hooks import LoopState

    board = TensorBoardLogger(tmp_path)
    board.set_loop(LoopState())
    board.loop.is_chief = False
    board.begin()
    board.epoch_end(0, {"loss": 1.0})
    board.end(None)
    assert not list(tmp_path.rglob("events.out.tfevents*"))
