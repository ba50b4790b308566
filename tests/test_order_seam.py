"""An order added as one module, read by every pipeline kind that supports it (issue 53).

``tests/_reverse_order.py`` reads the files last to first; the pipeline builds it
streamed (with ``map_fn`` and padding after it) and on packed shards with no branch of
its own, declares no position for it (a resumed run replays), and the order refuses the
in-memory kinds it cannot be held in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from _reverse_order import ReverseFileOrder
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.pipelines.memory.build import memory_kind
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, read_options
from tfr_hooks.tfrecord.pipelines.pipeline import build_pipeline, choose_kind, plan_of


def _reversed_ids(files: list[str]) -> list[int]:
    """The ids of ``files`` last to first, each file read on its own in file order."""
    return [int(i) for path in reversed(files) for b in tfrecord.dataset(path, 64) for i in b["id"]]


def _built(files: list[str], batch: int, **given: Any) -> tuple[Any, PipelineKind, Any]:
    options = read_options("dataset", batch, given)
    plan = plan_of(files, options)
    kind = choose_kind(plan, options)
    data, _, position = build_pipeline(
        plan, options, kind, seekable=True, order=ReverseFileOrder(options)
    )
    return data, kind, position


@pytest.mark.parametrize(
    ("per_record", "kind"),
    [
        pytest.param(1, PipelineKind.STREAMED, id="streamed"),
        pytest.param(4, PipelineKind.PACKED, id="packed", marks=pytest.mark.slow),  # CI runs it
    ],
)
def test_a_new_order_reads_streamed_and_packed_through_the_seam(
    tmp_path: Path, per_record: int, kind: PipelineKind
) -> None:
    tfrecord.write(
        {"id": np.arange(203)}, tmp_path / "data", shards=3, examples_per_record=per_record
    )
    files = tfrecord.resolve_files(tmp_path / "data")
    expected = _reversed_ids(files)
    assert sorted(expected) == list(range(203)) and expected != list(range(203))
    data, built, position = _built(files, 10, num_epochs=2)
    assert built is kind
    assert position is None  # the order enters no pass: a resumed run replays
    got = [int(i) for batch in data for i in batch["id"]]
    assert got == expected + expected


@pytest.mark.slow  # about 2 s; CI runs it
def test_the_stages_after_the_order_apply_to_it(tmp_path: Path) -> None:
    """map_fn (examples), padding and batch_map_fn follow whatever order read."""
    tfrecord.write({"id": np.arange(50)}, tmp_path / "data", shards=2)
    files = tfrecord.resolve_files(tmp_path / "data")
    data, _, _ = _built(
        files,
        8,
        map_fn=lambda ex: {"id": ex["id"], "twice": tf.fill([ex["id"] % 3 + 1], ex["id"] * 2)},
        pad_to="longest",
        batch_map_fn=lambda b: {**b, "id": b["id"] + 1000},
    )
    batches = list(data)
    assert [int(i) - 1000 for b in batches for i in b["id"]] == _reversed_ids(files)
    assert all(b["twice"].shape[1] <= 3 for b in batches)  # padded to each batch's longest


def test_an_order_memory_cannot_hold_is_refused_in_memory(tmp_path: Path) -> None:
    tfrecord.write({"id": np.arange(20)}, tmp_path / "data", shards=2)
    files = tfrecord.resolve_files(tmp_path / "data")
    with pytest.raises(ValueError, match="in_memory=False with the reverse file order"):
        ReverseFileOrder.refuse(read_options("dataset", 4, {"in_memory": True}))
    auto = read_options("dataset", 4, {"in_memory": "auto"})
    assert memory_kind(plan_of(files, auto), auto, ReverseFileOrder(auto)) is None  # streams
    options = read_options("dataset", 4, {"in_memory": True})
    plan = plan_of(files, options)
    with pytest.raises(ValueError, match="order the in-memory pipeline can serve"):
        build_pipeline(plan, options, PipelineKind.MEMORY_DECODED, order=ReverseFileOrder(options))
