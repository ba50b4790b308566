"""One task of a loopback ``tf.compat.v1.train.Server`` cluster with a ``ps`` job.

Run by ``tests/test_cluster.py``: between-graph replication with
``SessionLoop(master=server.target, is_chief=...)``, asynchronous updates of variables
on the ``ps`` task. Workers print one ``RESULT {json}`` line.

Usage: ``_graph_cluster_child.py ROLE INDEX CLUSTER_JSON OUT`` where ROLE is

* ``ps``: serve the variables until killed;
* ``worker``: train ``num_epochs`` loop epochs (one pass each over ``OUT/data/w<INDEX>``,
  a queue stream the loop splits by its schema.json's count), with checkpoint and
  summary hooks writing to shared directories under OUT; worker 1 creates ``OUT/gate``
  just before its run, the chief waits for that file and then ``CHIEF_DELAY`` seconds,
  so that worker 1 is waiting;
* ``restart``: the chief again, after the first run: it first reads the global step
  held by the ``ps`` task, then trains as ``worker`` does (restoring the checkpoint).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

BATCH = 8
NUM_EPOCHS = 2
STARTED = time.monotonic()
CHIEF_DELAY = float(os.environ.get("CHIEF_DELAY", "1.5"))
GATE_TIMEOUT = 60.0


def _config(tf: Any, index: int, workers: int) -> Any:
    return tf.compat.v1.ConfigProto(
        # talk only to the ps and this worker: the other worker may be gone already
        device_filters=["/job:ps", f"/job:worker/task:{index}"],
        inter_op_parallelism_threads=workers + 1,
        intra_op_parallelism_threads=1,
        operation_timeout_in_ms=60_000,
    )


def serve_ps(cluster: dict[str, Any]) -> None:
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=3)
    server = tf.compat.v1.train.Server(
        tf.train.ClusterSpec(cluster), job_name="ps", task_index=0, config=config
    )
    print("PS READY", flush=True)
    server.join()


def train(index: int, cluster: dict[str, Any], out: str, restart: bool) -> dict[str, Any]:
    import tensorflow as tf

    from tfr_hooks import Hook, SessionLoop, TensorBoardLogger, tfrecord

    logging.info("timing: imported at %.1f s", time.monotonic() - STARTED)

    v1 = tf.compat.v1
    workers = len(cluster["worker"])
    config = _config(tf, index, workers)
    server = v1.train.Server(
        tf.train.ClusterSpec(cluster), job_name="worker", task_index=index, config=config
    )
    worker_device = f"/job:worker/task:{index}"
    seen: dict[str, Any] = {"saved_steps": [], "chief_only_ran": False}

    class Listener(v1.train.CheckpointSaverListener):
        def after_save(self, session: Any, global_step_value: int) -> None:
            seen["saved_steps"].append(int(global_step_value))

    class Probe(Hook):
        def after_create_session(self, session: Any, coord: Any) -> None:
            seen["ready_after"] = time.monotonic() - seen["run_start"]
            seen["marker_at_start"], seen["global_step_start"] = (
                float(v) for v in session.run([marker, global_step])
            )

        def end(self, session: Any) -> None:
            seen["global_step_end"] = int(session.run(global_step))

    class ChiefOnly(Hook):
        def begin(self) -> None:
            seen["chief_only_ran"] = True

    graph = tf.Graph()
    with graph.as_default():
        with tf.device(worker_device):  # the input (and its epoch counter) is this worker's
            batches = tfrecord.read_batches(
                os.path.join(out, "data", f"w{index}"),
                BATCH,
                pipeline="queue",
                num_epochs=NUM_EPOCHS,
                shuffle=4 * BATCH,
                read_config=tfrecord.ReadConfig(num_parallel_reads=1),
                as_tuple=("x", "y"),
                seed=index,
            )
        x, y = batches.tensors
        setter = v1.train.replica_device_setter(cluster=cluster, worker_device=worker_device)
        with v1.device(setter):
            global_step = v1.train.get_or_create_global_step()
            # random per process: equal on both workers only if one initialized it
            marker = v1.get_variable(
                "marker", [], initializer=v1.random_uniform_initializer(), trainable=False
            )
            w = v1.get_variable("w", [4, 1], initializer=v1.zeros_initializer())
            loss = tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(x, w), 1) - y))
            train_op = v1.train.GradientDescentOptimizer(0.05).minimize(
                loss, global_step=global_step
            )
            summary = v1.summary.scalar("loss", loss)
            hooks = [
                v1.train.CheckpointSaverHook(
                    os.path.join(out, "ckpt"), save_steps=5, listeners=[Listener()]
                ),
                v1.train.SummarySaverHook(
                    save_steps=5, output_dir=os.path.join(out, "summaries"), summary_op=summary
                ),
                TensorBoardLogger(os.path.join(out, "board")),
                Probe(),
            ]
            # built inside the setter's scope on purpose: the loop's own (local)
            # variables must still stay on this worker
            loop = SessionLoop(
                train_op,
                fetches={"loss": loss},
                data=batches,
                hooks=hooks,
                chief_only_hooks=[ChiefOnly()],
                master=server.target,
                is_chief=index == 0,
                session_config=config,
                run_timeout_secs=30,
                wait_for_chief_secs=60,
            )
    result: dict[str, Any] = {"index": index, "pid": os.getpid()}
    if restart:  # what the ps holds now, before the chief restores its checkpoint
        with v1.Session(server.target, graph=graph, config=config) as session:
            result["ps_global_step"] = int(session.run(global_step))
    gate = os.path.join(out, "gate")
    if index == 0 and not restart:  # let worker 1 wait for us
        deadline = time.monotonic() + GATE_TIMEOUT
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(CHIEF_DELAY)
    elif index == 1:
        open(gate, "w").close()
    seen["run_start"] = time.monotonic()
    logging.info("timing: run at %.1f s", seen["run_start"] - STARTED)
    # a queue stream of NUM_EPOCHS passes, one per epoch
    history = loop.run(epochs=NUM_EPOCHS)
    logging.info("timing: trained at %.1f s", time.monotonic() - STARTED)
    result.update(
        steps=loop.loop.global_step,
        loss=history["loss"],
        hooks=[type(h).__name__ for h in loop.hooks.hooks],
        means_device=loop._means.count.device,
        **{k: v for k, v in seen.items() if k != "run_start"},
    )
    return result


def main(argv: list[str]) -> None:
    role, index, cluster, out = argv[0], int(argv[1]), json.loads(argv[2]), argv[3]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if role == "ps":
        serve_ps(cluster)
        return
    result = train(index, cluster, out, restart=role == "restart")
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
