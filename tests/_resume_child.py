"""One attempt of a seeded, deterministic FunctionLoop run that may be interrupted (issue 20).

Run by ``tests/test_function_loop_determinism.py`` and ``tests/test_resume_chaos.py``
through ``tests/_cluster.py``: with ``TF_CONFIG`` as one worker of a loopback
``MultiWorkerMirroredStrategy`` cluster, without it as one plain process.

``python tests/_resume_child.py DATA OUT PIPELINE`` trains a compiled Keras 3 model
(seeded, under ``tf.config.experimental.enable_op_determinism()``) for ``EPOCHS`` epochs
on the TFRecords in DATA, shuffled with a seed, through ``FunctionLoop`` with
``KerasCallbacks([BackupAndRestore(OUT/backup, save_freq=SAVE_FREQ)])`` (the periodic
save a SIGKILL resumes from) and ``PreemptionCheckpoint(OUT/preemption)`` (the save a
SIGTERM makes). PIPELINE is ``memory`` (``in_memory=True``), ``stream`` or ``packed``
(the files as they are), or ``served`` (the files as they are, read through the tf.data
service at ``SERVICE``).

Environment:

* ``STOP=KIND:EPOCH:STEP:TASK``: after step STEP (counted from 0, as the seen file
  notes it) of EPOCH, task TASK sends itself
  ``SIGTERM`` (KIND ``TERM``) or ``SIGKILL`` (KIND ``KILL``).
* ``ATTEMPT``: names the file OUT/seen/<task>.<ATTEMPT>.jsonl where every trained batch
  is noted as it runs, one ``[epoch, step, ids]`` line each (a SIGKILL loses none).
* ``EPOCHS`` (3), ``BATCH`` (global batch, 16), ``SAVE_FREQ`` (3).
* ``SERVICE``: the dispatcher's address, for PIPELINE ``served``.

A run that completes prints ``RESULT {json}``: the weights, the optimizer's steps, each
epoch's steps and examples, and whether the input wait was measured.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import numpy as np

EPOCHS = int(os.environ.get("EPOCHS", "3"))
BATCH = int(os.environ.get("BATCH", "16"))
SAVE_FREQ = int(os.environ.get("SAVE_FREQ", "3"))


def _task_index() -> int:
    raw = os.environ.get("TF_CONFIG")
    return int(json.loads(raw)["task"]["index"]) if raw else 0


def _stop() -> tuple[str, int, int, int] | None:
    raw = os.environ.get("STOP")
    if not raw:
        return None
    kind, epoch, step, task = raw.split(":")
    return kind, int(epoch), int(step), int(task)


def main(data: str, out: str, pipeline: str) -> dict[str, Any]:
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    strategy = None
    if os.environ.get("TF_CONFIG"):
        workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
        # collectives can hang with fewer inter-op threads than workers + 1
        tf.config.threading.set_inter_op_parallelism_threads(workers + 1)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    from helpers import keras_classifier
    from tfr_hooks import FunctionLoop, Hook, KerasCallbacks, PreemptionCheckpoint, tfrecord
    from tfr_hooks.input_report import HISTORY_KEYS as MEASURED

    # first: it sets the global seed, which the dataset's seeded shuffle also uses
    if strategy is not None:
        with strategy.scope():
            model = keras_classifier(lr=0.1, momentum=0.9)
    else:
        model = keras_classifier(lr=0.1, momentum=0.9)
    files: Any = data  # packed shards, with their schema.json
    if pipeline != "packed":  # plain TFRecordWriter files
        files = sorted(os.path.join(data, n) for n in os.listdir(data) if n.endswith(".tfrecord"))
    train = tfrecord.dataset(
        files,
        BATCH,
        shuffle="global" if pipeline == "memory" else 64,
        seed=3,
        as_tuple=("x", "y", "id"),
        in_memory=pipeline == "memory",
        service=os.environ["SERVICE"] if pipeline == "served" else None,
    )
    model.jit_compile = False  # the step notes its ids through a py_function
    task = _task_index()
    seen_dir = os.path.join(out, "seen")
    os.makedirs(seen_dir, exist_ok=True)
    seen = open(  # noqa: SIM115  (open for the whole run, closed at exit)
        os.path.join(seen_dir, f"{task}.{os.environ.get('ATTEMPT', '0')}.jsonl"), "a"
    )
    state: list[Any] = []

    def note(ids: Any) -> Any:
        if ids.shape[0]:  # a worker out of data joins with an empty batch
            loop = state[0]
            seen.write(json.dumps([loop.epoch, loop.epoch_steps, ids.numpy().tolist()]) + "\n")
            seen.flush()
        return np.int64(0)

    train_step = model.train_step

    def recording_step(batch: Any) -> Any:
        x, y, ids = batch
        done = tf.py_function(note, [ids], tf.int64)
        with tf.control_dependencies([done]):
            return train_step((x, y))

    model.train_step = recording_step
    stop = _stop()
    counts: list[list[int]] = []

    class Interrupt(Hook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            if stop is None or task != stop[3]:
                return
            kind, epoch, step, _ = stop
            if (self.loop.epoch, self.loop.epoch_steps) == (epoch, step):
                print(f"{kind} task {task} at {epoch}:{step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL if kind == "KILL" else signal.SIGTERM)
                time.sleep(1.5)  # TensorFlow's handler polls for SIGTERM once a second

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            counts.append([epoch, self.loop.epoch_steps, self.loop.epoch_examples])

    backup = keras.callbacks.BackupAndRestore(os.path.join(out, "backup"), save_freq=SAVE_FREQ)
    hooks = [
        KerasCallbacks([backup], model),
        # after KerasCallbacks: the newer of its backup and this checkpoint wins
        PreemptionCheckpoint(os.path.join(out, "preemption"), model=model),
        Interrupt(),
    ]
    loop = FunctionLoop(train, model=model, hooks=hooks, strategy=strategy)
    state.append(loop.loop)
    history = loop.run(epochs=EPOCHS)
    return {
        "weights": [w.tolist() for w in model.get_weights()],
        "iterations": int(model.optimizer.iterations.numpy()),
        "counts": counts,
        "wait_measured": any(k in MEASURED for k in history),
    }


if __name__ == "__main__":
    result = main(*sys.argv[1:4])
    print("RESULT " + json.dumps(result), flush=True)
