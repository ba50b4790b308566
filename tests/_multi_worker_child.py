"""One worker of a loopback MultiWorkerMirroredStrategy cluster (or one plain process).

Run by ``tests/test_distribute_cluster.py`` (``service`` mode: by
``tests/test_data_service_cluster.py``) through ``tests/_cluster.py``: with
``TF_CONFIG`` set the script trains under ``MultiWorkerMirroredStrategy``, without it in
one process and no strategy, on the same global batches. It prints one
``RESULT {json}`` line.

Modes:

* ``keras DATA OUT``: a compiled Keras 3 model through ``FunctionLoop`` with
  ``KerasCallbacks`` (ModelCheckpoint, BackupAndRestore, TensorBoard, CSVLogger, a
  progress bar), ``PreemptionCheckpoint`` and ``TensorBoardLogger``, writing under OUT.
  ``KILL_AT_EPOCH``/``TERM_AT_EPOCH`` (with ``..._AT_BATCH``, ``..._TASK``): the task
  sends itself SIGKILL/SIGTERM after that batch. ``GLOBAL_BATCH`` sets the global batch
  (24 by default). A preempted worker prints
  ``PREEMPTED {json}`` and exits with the hook's code.
* ``step DATA``: a ``step_fn`` whose logs show which examples each replica read.
* ``order DATA OUT``: a shuffled ``step_fn`` run with ``PreemptionCheckpoint`` that notes
  the examples of every step of this worker (``TERM_...`` as in ``keras`` mode).
* ``cardinality DATA``: for each pipeline (streamed ``stream*`` files, packed ``packed*``
  files, in memory) and ``drop_remainder``, the dataset's ``cardinality()``, the
  ``loop.steps_per_epoch`` hooks see at each epoch's start, and the steps and examples
  each epoch ran.
* ``class_weight DATA``: a compiled Keras 3 model through ``FunctionLoop`` with
  ``class_weight`` and ``steps_per_execution="auto"``, with validation; without
  ``TF_CONFIG`` also the same run without ``class_weight`` (``plain_weights``).
* ``service DATA ADDRESS``: a ``step_fn`` over ``tfrecord.dataset(DATA's files,
  SERVICE_BATCH, service=ADDRESS)`` (one tf.data service job shared by the cluster's
  trainers) that notes the ``id`` of every example this worker trained on, per epoch,
  and the steps and examples the loop reports for each epoch.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

import numpy as np

GLOBAL_BATCH = int(os.environ.get("GLOBAL_BATCH", "24"))
EPOCHS = 3


def _workers() -> int:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0
    cluster = json.loads(raw)["cluster"]
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _task_index() -> int:
    raw = os.environ.get("TF_CONFIG")
    return int(json.loads(raw)["task"]["index"]) if raw else 0


def _strategy(tf: Any) -> Any:
    workers = _workers()
    if not workers:
        return None
    # collectives can hang with fewer inter-op threads than workers + 1
    tf.config.threading.set_inter_op_parallelism_threads(workers + 1)
    return tf.distribute.MultiWorkerMirroredStrategy()


class Counts:
    """A hook recording each epoch's step and example counts (made lazily, after imports)."""

    @staticmethod
    def make(seen: list[list[int]]) -> Any:
        from tfr_hooks import Hook

        class _Counts(Hook):
            def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
                seen.append([self.loop.epoch_steps, self.loop.epoch_examples])

        return _Counts()


def keras_mode(data: str, out: str, extra: list[str]) -> dict[str, Any]:
    import tensorflow as tf

    strategy = _strategy(tf)
    import keras

    from tfr_hooks import (
        FunctionLoop,
        KerasCallbacks,
        Preempted,
        PreemptionCheckpoint,
        TensorBoardLogger,
        tfrecord,
    )

    shard = extra[0] if extra else "auto"
    train = tfrecord.dataset(
        os.path.join(data, "train"),
        GLOBAL_BATCH,
        as_tuple=("x", "y"),
        read_config=tfrecord.ReadConfig(shard=shard),
    )
    val = tfrecord.dataset(os.path.join(data, "val"), GLOBAL_BATCH, as_tuple=("x", "y"))
    scope = strategy.scope() if strategy is not None else _nothing()
    from helpers import keras_classifier

    with scope:
        model = keras_classifier(lr=0.1, momentum=0.9)
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            os.path.join(out, "ckpt", "model.weights.h5"), save_weights_only=True
        ),
        keras.callbacks.BackupAndRestore(os.path.join(out, "backup"), delete_checkpoint=False),
        keras.callbacks.TensorBoard(os.path.join(out, "tb")),
        keras.callbacks.CSVLogger(os.path.join(out, "log.csv")),
    ]
    seen: dict[str, Any] = {"epochs": []}

    class Watch(keras.callbacks.Callback):
        """Records the epochs run; ``KILL_AT_EPOCH`` on task ``KILL_TASK``: SIGKILL itself."""

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            seen["epochs"].append(epoch)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            # the state the run really starts from (after every hook restored its part)
            if "first_batch" not in seen:
                seen["first_batch"] = batch
                seen["iterations_at_begin"] = int(self.model.optimizer.iterations.numpy())

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            for kind, sig in (("KILL", signal.SIGKILL), ("TERM", signal.SIGTERM)):
                at = os.environ.get(f"{kind}_AT_EPOCH")
                if (
                    at is not None
                    and seen["epochs"][-1] == int(at)
                    and batch == int(os.environ.get(f"{kind}_AT_BATCH", "1"))
                    and _task_index() == int(os.environ.get(f"{kind}_TASK", "1"))
                ):
                    print(f"{kind} task {_task_index()}", flush=True)
                    os.kill(os.getpid(), sig)
                    time.sleep(2.0)  # TensorFlow's handler polls for SIGTERM once a second

    callbacks.append(Watch())
    counts: list[list[int]] = []
    hooks = [
        KerasCallbacks(callbacks, model, verbose=2),
        # after KerasCallbacks: its mid-epoch state wins over BackupAndRestore's
        PreemptionCheckpoint(os.path.join(out, "preemption"), model=model),
        TensorBoardLogger(os.path.join(out, "tbl"), model=model),
        Counts.make(counts),
    ]
    loop = FunctionLoop(train, model=model, hooks=hooks, strategy=strategy)
    try:
        history = loop.run(epochs=EPOCHS, validation_data=val)
    except Preempted as stop:
        state = {"epoch": stop.epoch, "step": stop.step, "path": stop.path, **seen}
        print("PREEMPTED " + json.dumps(state), flush=True)
        raise
    return {
        **_split(history),
        "counts": counts,
        "weights": [w.tolist() for w in model.get_weights()],
        "iterations": int(model.optimizer.iterations.numpy()),
        **seen,
    }


def step_mode(data: str, extra: list[str]) -> dict[str, Any]:
    import tensorflow as tf

    strategy = _strategy(tf)
    from tfr_hooks import FunctionLoop, tfrecord

    shard = extra[0] if extra else "auto"
    train = tfrecord.dataset(
        os.path.join(data, "train"), GLOBAL_BATCH, read_config=tfrecord.ReadConfig(shard=shard)
    )

    def step_fn(batch: dict[str, Any]) -> dict[str, Any]:
        index = tf.cast(batch["index"], tf.float64)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        on_second = tf.cast(replica, tf.float64)
        return {
            "index": tf.reduce_mean(index),
            # the mean over all examples of (index if read by replica 1, else 0)
            "index_on_replica1": on_second * tf.reduce_mean(index),
        }

    counts: list[list[int]] = []
    loop = FunctionLoop(train, step_fn=step_fn, hooks=[Counts.make(counts)], strategy=strategy)
    history = loop.run(epochs=2)
    return {**_split(history), "counts": counts}


def _split(history: dict[str, Any]) -> dict[str, Any]:
    """The logged metrics as ``history``; the loop's input measurements (each worker's own
    timings, which the tests do not compare between workers) as ``input``."""
    inputs = {k: v for k, v in history.items() if k.startswith("input/")}
    return {"history": {k: v for k, v in history.items() if k not in inputs}, "input": inputs}


def order_mode(data: str, out: str) -> dict[str, Any]:
    """A ``step_fn`` that notes the examples each step of this worker trains on.

    Shuffled (with the seed all workers share), sharded by file (with
    ``ORDER_READ=global``: ``tfrecord.source(..., shuffle="global")``, one global
    sequence each worker takes its part of; with ``ORDER_BUCKET_POOL=N`` too, bucketed
    from pools of ``N`` batches; ``ORDER_READ=unshuffled``: ``tfrecord.source`` without
    a shuffle; ``ORDER_READ=mixture``: the named sources ``train`` and ``extra`` at
    weights 0.7 and 0.3), for ``ORDER_EPOCHS`` epochs (3; ``ORDER_LOG=1`` logs at INFO level), with
    ``PreemptionCheckpoint``; ``TERM_AT_EPOCH``/``TERM_AT_BATCH``/``TERM_TASK`` as in
    ``keras`` mode. The result (or the ``PREEMPTED`` line) holds ``seen``: epoch to the
    list of this worker's batches of example indexes.
    """
    import tensorflow as tf

    strategy = _strategy(tf)
    from tfr_hooks import FunctionLoop, Hook, Preempted, PreemptionCheckpoint, tfrecord

    if os.environ.get("ORDER_LOG"):  # the loop's resume lines, to stderr
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    epochs = int(os.environ.get("ORDER_EPOCHS", EPOCHS))
    if os.environ.get("ORDER_READ") == "unshuffled":  # one global stream; seeks
        train: Any = tfrecord.source(os.path.join(data, "train"), GLOBAL_BATCH)
    elif os.environ.get("ORDER_READ") == "global":  # one global sequence; seeks
        pool = os.environ.get("ORDER_BUCKET_POOL")  # bucketed: pools of that many batches
        bucketed: dict[str, Any] = (
            {}
            if pool is None
            else {
                "bucket_boundaries": [2],
                "bucket_by": "index",
                "read_config": tfrecord.ReadConfig(bucket_pool=int(pool)),
            }
        )
        train = tfrecord.source(
            os.path.join(data, "train"), GLOBAL_BATCH, shuffle="global", seed=5, **bucketed
        )
    elif os.environ.get("ORDER_READ") == "mixture":  # train and extra at 0.7/0.3; seeks
        train = tfrecord.source(
            {"train": os.path.join(data, "train"), "extra": os.path.join(data, "extra")},
            GLOBAL_BATCH,
            weights={"train": 0.7, "extra": 0.3},
            shuffle="global",
            seed=5,
        )
    else:
        train = tfrecord.dataset(os.path.join(data, "train"), GLOBAL_BATCH, shuffle=64)
    seen: dict[str, list[list[int]]] = {}
    state: list[Any] = []
    with strategy.scope():
        counter = tf.Variable(
            0, dtype=tf.int64, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
        )

    def note(indices: Any) -> Any:
        if indices.shape[0]:  # a worker out of data joins with empty batches
            seen.setdefault(str(state[0].epoch), []).append(indices.numpy().tolist())
        return np.int64(0)

    def step_fn(batch: dict[str, Any]) -> dict[str, Any]:
        tf.py_function(note, [batch["index"]], tf.int64)
        counter.assign_add(1)
        return {"size": tf.cast(tf.shape(batch["index"])[0], tf.float64)}

    class Term(Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            at = os.environ.get("TERM_AT_EPOCH")
            if (
                at is not None
                and (self.loop.epoch, self.loop.epoch_steps)
                == (int(at), int(os.environ.get("TERM_AT_BATCH", "1")))
                and _task_index() == int(os.environ.get("TERM_TASK", "1"))
            ):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(2.0)  # TensorFlow's handler polls for SIGTERM once a second

    preemption = PreemptionCheckpoint(os.path.join(out, "preemption"), objects={"n": counter})
    loop = FunctionLoop(train, step_fn=step_fn, hooks=[Term(), preemption], strategy=strategy)
    state.append(loop.loop)
    try:
        loop.run(epochs=epochs)
    except Preempted as stop:
        print("PREEMPTED " + json.dumps({"epoch": stop.epoch, "step": stop.step, "seen": seen}))
        sys.stdout.flush()
        raise
    result = {"seen": seen, "steps": int(counter.numpy())}
    if os.environ.get("ORDER_READ") in ("global", "unshuffled", "mixture"):
        position = train.position
        result["position"] = None if position is None else position.state()
    return result


class _EpochWatch:
    """A hook noting, per epoch, the steps known at its start and those it ran."""

    @staticmethod
    def make() -> Any:
        from tfr_hooks import Hook

        class _Watch(Hook):
            def __init__(self) -> None:
                self.seen: list[dict[str, Any]] = []

            def epoch_begin(self, epoch: int) -> None:
                self.seen.append({"known": self.loop.steps_per_epoch})

            def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
                self.seen[-1].update(steps=self.loop.epoch_steps, examples=self.loop.epoch_examples)

        return _Watch()


def cardinality_mode(data: str) -> dict[str, Any]:
    import tensorflow as tf

    strategy = _strategy(tf)
    from tfr_hooks import FunctionLoop, tfrecord

    names = sorted(os.listdir(data))
    result: dict[str, Any] = {}
    for pipeline in ("stream", "packed", "memory"):
        prefix = "packed" if pipeline == "packed" else "stream"
        files = [os.path.join(data, n) for n in names if n.startswith(prefix)]
        for drop in (False, True):
            # the reader's Source: its facts carry the steps the strategy makes
            train = tfrecord.source(
                files,
                GLOBAL_BATCH,
                shuffle="global" if pipeline == "memory" else 32,
                seed=5,
                drop_remainder=drop,
                in_memory=pipeline == "memory",
            )
            watch = _EpochWatch.make()

            def step_fn(batch: dict[str, Any]) -> dict[str, Any]:
                return {"n": tf.cast(tf.shape(batch["id"])[0], tf.float64)}

            loop = FunctionLoop(train, step_fn=step_fn, hooks=[watch], strategy=strategy)
            loop.run(epochs=2)
            result[f"{pipeline} drop={drop}"] = {
                "cardinality": int(train.dataset.cardinality()),
                "epochs": watch.seen,
            }
    return result


def class_weight_mode(data: str) -> dict[str, Any]:
    """Train with ``class_weight`` (and ``"auto"`` steps): the global logs and weights."""
    import tensorflow as tf

    strategy = _strategy(tf)
    from helpers import keras_classifier
    from tfr_hooks import FunctionLoop, tfrecord

    train = tfrecord.dataset(os.path.join(data, "train"), GLOBAL_BATCH, as_tuple=("x", "y"))
    val = tfrecord.dataset(os.path.join(data, "val"), GLOBAL_BATCH, as_tuple=("x", "y"))

    def run(class_weight: dict[int, float] | None) -> tuple[Any, dict[str, Any]]:
        with strategy.scope() if strategy is not None else _nothing():
            model = keras_classifier(lr=0.1)
        loop = FunctionLoop(
            train,
            model=model,
            class_weight=class_weight,
            strategy=strategy,
            steps_per_execution="auto",
        )
        history = loop.run(epochs=2, validation_data=val)
        return model, _split(history)["history"]

    model, history = run({0: 1.0, 1: 4.0})
    result = {"history": history, "weights": [w.tolist() for w in model.get_weights()]}
    if strategy is None:
        plain, _ = run(None)
        result["plain_weights"] = [w.tolist() for w in plain.get_weights()]
    return result


def service_mode(data: str, address: str) -> dict[str, Any]:
    """Train on batches of a tf.data service job this worker shares with the others."""
    import tensorflow as tf

    strategy = _strategy(tf)
    from tfr_hooks import FunctionLoop, tfrecord

    files = sorted(os.path.join(data, name) for name in os.listdir(data))
    batch = int(os.environ.get("SERVICE_BATCH", "10"))
    train = tfrecord.dataset(files, batch, service=address)
    watch = _EpochWatch.make()
    ids: list[list[int]] = []  # per epoch, the ids this worker trained on
    sizes: list[list[int]] = []  # per epoch, the size of each local batch (0: none left)

    def note(batch_ids: Any) -> Any:
        if len(sizes) < len(watch.seen):
            ids.append([])
            sizes.append([])
        ids[-1] += batch_ids.numpy().ravel().tolist()
        sizes[-1].append(int(batch_ids.shape[0]))
        return np.int64(0)

    def step_fn(batch: dict[str, Any]) -> dict[str, Any]:
        tf.py_function(note, [batch["id"]], tf.int64)
        return {"n": tf.cast(tf.shape(batch["id"])[0], tf.float64)}

    loop = FunctionLoop(train, step_fn=step_fn, hooks=[watch], strategy=strategy)
    loop.run(epochs=EPOCHS)
    return {"epochs": watch.seen, "ids": ids, "sizes": sizes}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "keras":
        result = keras_mode(argv[1], argv[2], argv[3:])
    elif mode == "step":
        result = step_mode(argv[1], argv[2:])
    elif mode == "order":
        result = order_mode(argv[1], argv[2])
    elif mode == "cardinality":
        result = cardinality_mode(argv[1])
    elif mode == "class_weight":
        result = class_weight_mode(argv[1])
    elif mode == "service":
        result = service_mode(argv[1], argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
