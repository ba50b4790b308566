"""One value names the kind of pipeline a reader built, for every consumer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tfrecord
from tfr_hooks.input_report import InputFacts, InputStats, facts_of_read, remedy
from tfr_hooks.tfrecord import PipelineKind, ReadFacts
from tfr_hooks.tfrecord.pipelines.decide import DataFacts

WIDE = 10_000  # map_fn's output per example: 40 kB of float32, from 12 bytes stored


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    arrays = {"x": np.arange(64, dtype=np.float32), "y": np.arange(64, dtype=np.int64)}
    plain, packed = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("packed")
    tfrecord.write(arrays, plain, shards=2)
    tfrecord.write(arrays, packed, shards=2, examples_per_record=8)
    return {"plain": plain, "packed": packed}


def _widen(example: dict[str, Any]) -> dict[str, Any]:
    return {"x": tf.fill([WIDE], example["x"]), "y": example["y"]}


# the decoded output (64 * 40 kB) is over the budget, the parsed records (768 B) are not
ENCODED = {
    "in_memory": "auto",
    "read_config": tfrecord.ReadConfig(memory_budget=100_000),
    "map_fn": _widen,
}


@pytest.mark.parametrize(
    "files, arguments, kind, pipeline, in_memory, per_record",
    [
        ("plain", {}, PipelineKind.STREAMED, "dataset", False, 1),
        ("packed", {}, PipelineKind.PACKED, "dataset", False, 8),
        ("plain", {"in_memory": True}, PipelineKind.MEMORY_DECODED, "dataset", True, 1),
        pytest.param(  # the kind as plain files' above, 8 a record as packed streamed's
            *("packed", {"in_memory": True}, PipelineKind.MEMORY_DECODED, "dataset", True, 8),
            marks=pytest.mark.slow,  # about 0.6 s of CPU
        ),
        ("plain", ENCODED, PipelineKind.MEMORY_ENCODED, "dataset", True, 1),
        ("plain", {"pipeline": "queue"}, PipelineKind.QUEUE, "queue", False, 1),
    ],
)
def test_batches_carry_the_kind_of_their_pipeline(
    data: dict[str, Path],
    files: str,
    arguments: dict[str, Any],
    kind: PipelineKind,
    pipeline: str,
    in_memory: bool,
    per_record: int,
) -> None:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(data[files], 16, **arguments)
        assert batches.facts.kind is kind
        assert (kind.pipeline, kind.in_memory) == (pipeline, in_memory)
        assert batches.facts.examples_per_record == per_record
        assert bool(batches.initializers) is (kind is not PipelineKind.QUEUE)
        if kind is not PipelineKind.QUEUE:  # the batches are what the kind says
            with tf.compat.v1.Session() as session:
                session.run(batches.initializers)
                first = session.run(batches.tensors)
            assert first["x"].shape == ((16, WIDE) if arguments is ENCODED else (16,))
    facts = facts_of_read(batches.facts)
    assert facts.kind is kind
    assert facts.measured is not None
    assert facts.measured.examples_per_record == per_record


def test_the_remedy_reads_the_kind() -> None:
    bound = _stats_input_bound()
    small = DataFacts(decoded_nbytes=10**12, memory_budget=10**9, record_nbytes=100.0)
    fits = dataclasses.replace(small, decoded_nbytes=10**6)

    def facts(kind: PipelineKind, measured: DataFacts) -> InputFacts:
        return InputFacts(ReadFacts(kind=kind), measured)

    assert "packed shards" in remedy(bound, facts(PipelineKind.STREAMED, small))
    assert "packed shards" in remedy(bound, facts(PipelineKind.QUEUE, small))
    assert "packed shards" not in remedy(bound, facts(PipelineKind.PACKED, small))
    assert "in_memory=True" in remedy(bound, facts(PipelineKind.PACKED, fits))
    assert "in_memory=True" not in remedy(bound, facts(PipelineKind.MEMORY_ENCODED, fits))
    assert InputFacts().kind is None


def _stats_input_bound() -> InputStats:
    steps = 100
    return InputStats(0, steps, steps * 32, 0.6 * steps * 0.01, steps * 0.01)
