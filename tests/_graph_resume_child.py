"""A seeded graph-mode run on TFRecords with an ``id`` feature, stopped and resumed (issue 20).

Imported by ``tests/test_checkpoint_mid_epoch.py`` for the runs in its own process, and
run as a script for the SIGTERM and SIGKILL tests::

    python _graph_resume_child.py --data DIR --pipeline memory --logdir DIR --out FILE
        [--ready EPOCH:STEP] [--pace SECS] [--save-steps N]

The script appends one line per step to ``--out`` (``STEP <json>``: epoch, step in the
epoch, the ids of the batch the train op consumed), flushed at once, so that the lines
of a SIGKILLed process are there; at the end it writes ``DONE <json>`` (the final
variables, the epochs run). On stdout it prints ``READY`` after the step ``--ready``
names, and ``SAVED <path>`` after each checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tfr_hooks
from _faults import LinearModel
from tfr_hooks import tfrecord

EXAMPLES, BATCH, EPOCHS, SEED = 44, 8, 3, 5  # 6 batches an epoch, the last one of 4
STEPS = -(-EXAMPLES // BATCH)
PIPELINES = ("stream", "memory", "packed", "stream_bucketed")


def write_data(directory: str) -> dict[str, str]:
    """The same 44 examples as plain shards and as packed shards; return both dirs."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(EXAMPLES, 4)).astype(np.float32)
    arrays = {
        "id": np.arange(EXAMPLES, dtype=np.int64),
        "x": x,
        "y": (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32) + 0.3).astype(np.float32),
    }
    plain, packed = os.path.join(directory, "plain"), os.path.join(directory, "packed")
    tfrecord.write(arrays, plain, shards=2)
    tfrecord.write(arrays, packed, shards=2, examples_per_record=4)
    # a second source for mixtures: 20 examples of ids 1000..1019
    other = os.path.join(directory, "other")
    tfrecord.write({k: v[:20] for k, v in arrays.items()} | {"id": np.arange(1000, 1020)}, other)
    return {"plain": plain, "packed": packed, "other": other}


class Record(tfr_hooks.Hook):
    """Fetches the ids of every batch with the train op; keeps them (and writes lines)."""

    def __init__(self, ids: Any, out: Any = None) -> None:
        self.ids = ids
        self.out = out
        self.steps: list[tuple[int, int, list[int]]] = []
        self.epoch_counts: dict[int, tuple[int, int]] = {}

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self.ids)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = (self.loop.epoch, self.loop.epoch_steps, [int(i) for i in run_values.results])
        self.steps.append(step)
        if self.out is not None:
            self.out.write("STEP " + json.dumps(step) + "\n")
            self.out.flush()

    def epoch_end(self, epoch: int, logs: Any) -> None:
        self.epoch_counts[epoch] = (self.loop.epoch_steps, self.loop.epoch_examples)


class StopAt(tfr_hooks.Hook):
    """Requests a stop after step ``step`` (counted from 1) of ``epoch``."""

    def __init__(self, epoch: int, step: int) -> None:
        self.epoch, self.step = epoch, step

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.loop.epoch == self.epoch and self.loop.epoch_steps + 1 == self.step:
            self.loop.request_stop("the test's StopAt")


class Ready(tfr_hooks.Hook):
    """Prints READY after a step, then paces every step; prints each new checkpoint."""

    def __init__(self, at: tuple[int, int] | None, pace: float, checkpoint: Any) -> None:
        self.at, self.pace, self.checkpoint = at, pace, checkpoint
        self.seen: str | None = None

    def before_run(self, run_context: Any) -> None:
        self._saved()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        position = (self.loop.epoch, self.loop.epoch_steps + 1)
        if self.at is not None and position == self.at:
            print("READY", flush=True)
        if self.at is not None and position >= self.at:
            time.sleep(self.pace)

    def epoch_end(self, epoch: int, logs: Any) -> None:
        self._saved()

    def _saved(self) -> None:
        if self.checkpoint.last_saved != self.seen:
            self.seen = self.checkpoint.last_saved
            print("SAVED", self.seen, flush=True)


def build(data: dict[str, str], pipeline: str) -> tuple[Any, LinearModel, Any]:
    """The pipeline's batches and the model, in the current default graph."""
    if pipeline == "stream":
        batches = tfrecord.read_batches(data["plain"], BATCH, shuffle=16, seed=SEED)
    elif pipeline == "stream_bucketed":  # sorted pools (x: a length of 4, ties shuffled)
        batches = tfrecord.read_batches(
            data["plain"], BATCH, shuffle=16, seed=SEED, bucket_boundaries=[4], bucket_by="x"
        )
    elif pipeline == "global_bucketed":  # pools of 2 batches: a seek to a pool's start
        batches = tfrecord.read_batches(
            data["plain"],
            BATCH,
            shuffle="global",
            seed=SEED,
            bucket_boundaries=[4],
            bucket_by="x",
            read_config=tfrecord.ReadConfig(bucket_pool=2),
        )
    elif pipeline == "memory":
        batches = tfrecord.read_batches(
            data["plain"], BATCH, shuffle="global", seed=SEED, in_memory=True
        )
    elif pipeline == "global":  # shuffle="global": a resumed run seeks
        batches = tfrecord.read_batches(data["plain"], BATCH, shuffle="global", seed=SEED)
    elif pipeline == "dataset_map":  # tfrecord.dataset(...).map(...) in the graph: a seek
        train = tfrecord.dataset(data["plain"], BATCH, shuffle="global", seed=SEED)
        batches = tfrecord.batches_of(train.map(lambda b: {**b, "x": b["x"] * 1.0}))
    elif pipeline == "dataset_filter":  # behind a filter: a replay
        train = tfrecord.dataset(data["plain"], BATCH, shuffle="global", seed=SEED)
        batches = tfrecord.batches_of(train.filter(lambda b: tf.size(b["id"]) > 0))
    elif pipeline == "mixture":  # two named sources at weights: a seek too
        batches = tfrecord.read_batches(
            {"a": data["plain"], "b": data["plain"]},
            BATCH,
            weights={"a": 0.75, "b": 0.25},
            shuffle="global",
            seed=SEED,
        )
    elif pipeline.startswith("mixture_ac_"):  # plain and other, "a" at this percent
        share = int(pipeline.rsplit("_", 1)[1]) / 100
        batches = tfrecord.read_batches(
            {"a": data["plain"], "c": data["other"]},
            BATCH,
            weights={"a": share, "c": 1 - share},
            shuffle="global",
            seed=SEED,
        )
    elif pipeline == "unshuffled":  # no shuffle: a resumed run seeks
        batches = tfrecord.read_batches(data["plain"], BATCH)
    elif pipeline == "packed_global":  # packed shards, shuffle="global": a seek too
        batches = tfrecord.read_batches(data["packed"], BATCH, shuffle="global", seed=SEED)
    elif pipeline == "packed":
        batches = tfrecord.read_batches(data["packed"], BATCH, shuffle=3, seed=SEED)
    elif pipeline == "served":  # through the tf.data service at $SERVICE
        batches = tfrecord.read_batches(
            data["plain"], BATCH, shuffle=16, seed=SEED, service=os.environ["SERVICE"]
        )
    elif pipeline == "damaged":  # data["damaged"]: shards with damaged records, skipped
        batches = tfrecord.read_batches(
            data["damaged"], BATCH, shuffle=16, seed=SEED, max_corrupt_records=1
        )
    elif pipeline == "queue":
        batches = tfrecord.read_batches(
            data["plain"],
            BATCH,
            pipeline="queue",
            num_epochs=EPOCHS,
            read_config=tfrecord.ReadConfig(num_parallel_reads=1),
        )
    else:
        raise ValueError(
            f"Expected one of {PIPELINES}, 'global', 'global_bucketed', 'unshuffled', "
            "'dataset_map', 'dataset_filter', "
            "'packed_global', 'served', "
            f"'damaged' or 'queue'. Received: {pipeline!r}"
        )
    model = LinearModel(batches.tensors["x"], batches.tensors["y"])
    return batches, model, batches.tensors["id"]


class Final(tfr_hooks.Hook):
    """Keeps every global variable's value at the run's end."""

    def __init__(self, model: LinearModel) -> None:
        self.model = model
        self.state: dict[str, np.ndarray] = {}

    def end(self, session: Any) -> None:
        self.state = self.model.state(session)


def run(
    data: dict[str, str],
    pipeline: str,
    logdir: str | None,
    *hooks: Any,
    out: Any = None,
    save_steps: int | None = None,
    ready: tuple[tuple[int, int] | None, float] | None = None,
) -> dict[str, Any]:
    """One run in a new graph; returns the ids per step, the state, the history."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(SEED)
        batches, model, ids = build(data, pipeline)
        record, final = Record(ids, out), Final(model)
        own: list[Any] = []
        if logdir is not None:
            checkpoint = tfr_hooks.EpochCheckpoint(logdir, save_steps=save_steps)
            own.append(checkpoint)
            if ready is not None:
                own.append(Ready(ready[0], ready[1], checkpoint))
        loop = tfr_hooks.SessionLoop(
            model.train_op,
            {"loss": model.loss},
            data=batches,
            hooks=[*own, record, *hooks, final],
        )
        history = loop.run(epochs=EPOCHS)
        return {
            "steps": record.steps,
            "state": final.state,
            "history": history,
            "epoch_counts": record.epoch_counts,
            "initial": (loop.loop.initial_epoch, loop.loop.initial_step),
            "resumes_mid_epoch": loop.loop.resumes_mid_epoch,
            "last_saved": own[0].last_saved if own else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready")
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("--save-steps", type=int)
    args = parser.parse_args()
    tf.config.experimental.enable_op_determinism()
    at = None if args.ready is None else tuple(int(p) for p in args.ready.split(":"))
    data = {"plain": os.path.join(args.data, "plain"), "packed": os.path.join(args.data, "packed")}
    with open(args.out, "a") as out:
        result = run(
            data,
            args.pipeline,
            args.logdir,
            out=out,
            save_steps=args.save_steps,
            ready=(at, args.pace),  # type: ignore[arg-type]
        )
        done = {
            "state": {name: value.tolist() for name, value in result["state"].items()},
            "epoch_counts": result["epoch_counts"],
            "initial": result["initial"],
        }
        out.write("DONE " + json.dumps(done) + "\n")
    print("RESULT", json.dumps({"epochs": sorted(result["epoch_counts"])}), flush=True)


if __name__ == "__main__":
    main()
