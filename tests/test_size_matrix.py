"""Every pipeline kind under both loops, at sizes a batch divides, does not, and exceeds.

Issue 36: graph-mode epochs that never ended when the batch dimension was static
(``drop_remainder=True``, or an in-memory pass the batch size divides). Each case runs 2
epochs with a recording hook (:class:`helpers.EpochSizes`) that turns an epoch longer
than its data into a quick failure, and checks the steps and examples of each epoch (as
``self.loop.epoch_examples`` says at ``epoch_end``) and the history (one entry per epoch;
under ``FunctionLoop``, the mean of every example's index once when no batch is dropped).
``SessionLoop``'s train op is a counter and its fetches read no batch, as in the issue:
only the loop's batch size takes the batches.

The kinds: streamed, packed shards, in memory decoded, in memory encoded (a ``map_fn``
and a ``memory_budget`` only the records fit), queue (``SessionLoop`` only) and served (a
real :class:`~tfr_hooks.service.local.LocalService` of 2 workers: each batches the files
it is handed, so an epoch's steps are those of one of the ways the files can fall to the
workers, see :func:`served_epochs`). ``FunctionLoop`` reads
``tfrecord.dataset``, ``SessionLoop`` ``tfrecord.read_batches``. Fewer examples than a
batch with ``drop_remainder=True``: the in-memory kinds refuse it when built (their
documented ``ValueError``); the others give a first epoch of no step, which ends the run
with the engine's warning "got no data" and no ``epoch_end`` (the queue's one stream of 2
passes holds one batch: an epoch of it, then that end).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_hooks
from helpers import EpochSizes
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.tfrecord.pipelines.options import PipelineKind

v1 = tf.compat.v1

BATCH = 8
#: a batch divides it, it leaves a smaller final batch, it is less than one batch
SIZES = {"divisible": 32, "remainder": 37, "small": 5}
WIDTH = 4096  # floats map_fn decodes each example to: 16 KiB, the records about 30 bytes
BUDGET = 16 << 10  # fits the records of every size, not the decoded data of any
KINDS = ("streamed", "packed", "decoded", "encoded", "queue", "served")
EPOCHS = 2
SERVICE_WORKERS = 2  # the shared service's workers (``shared_service``, tests/conftest.py)

#: the loops' matrix, about a minute of CPU, is marked slow and size_matrix; the in-memory
#: gather's property test is fast
pytestmark = pytest.mark.timeout(300)


def _write(directory: Path, n: int, per_record: int = 1) -> Path:
    tfrecord.write(
        {
            "index": np.arange(n, dtype=np.int64),
            "code": np.full(n, b"\x01\x02\x03\x04", dtype=object),
        },
        directory,
        shards=min(2, n),
        examples_per_record=per_record,
    )
    return directory


def _decode(example: dict[str, Any]) -> dict[str, Any]:
    """The per-example ``map_fn``: 4 bytes to ``WIDTH`` floats, the index kept."""
    raw = tf.reshape(tf.cast(tf.io.decode_raw(example["code"], tf.uint8), tf.float32), [4])
    return {"index": example["index"], "x": tf.tile(raw, [WIDTH // 4])}


@pytest.fixture(scope="module", params=list(SIZES))
def files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One size's files: plain and packed shards, written once for every case of the size."""
    n = SIZES[request.param]
    plain = _write(tmp_path_factory.mktemp(f"plain{n}"), n)
    packed = _write(tmp_path_factory.mktemp(f"packed{n}"), n, per_record=4)
    return n, plain, packed


@pytest.fixture(scope="module")
def service(shared_service: str) -> str:
    return shared_service


def _reader_args(kind: str, n: int, plain: Path, packed: Path, drop: bool) -> dict[str, Any]:
    """The reader's arguments shared by ``dataset`` and ``read_batches`` for ``kind``."""
    args: dict[str, Any] = {"files": packed if kind == "packed" else plain}
    args.update(batch_size=BATCH, drop_remainder=drop, shuffle=4, seed=1)
    if kind == "decoded":  # map_fn once, at load: dense numbers, each pass gathered whole
        args.update(in_memory=True, map_fn=_decode, shuffle="global")
    elif kind == "encoded":
        config = tfrecord.ReadConfig(memory_budget=BUDGET)
        args.update(in_memory="auto", map_fn=_decode, read_config=config, shuffle="global")
    return args


def expected_epochs(kind: str, n: int, drop: bool) -> list[tuple[int, int]]:
    """The (steps, examples) of each of the 2 epochs."""
    if kind != "queue":
        steps = n // BATCH if drop else math.ceil(n / BATCH)
        # an epoch of no step ends the run before its epoch_end (the engine's warning)
        return [(steps, steps * BATCH if drop else n)] * EPOCHS if steps else []
    # one stream of 2 passes: an epoch ends with the batch that reaches its pass's end
    total = EPOCHS * n
    sizes = [BATCH] * (total // BATCH) + ([] if drop or not total % BATCH else [total % BATCH])
    epochs, seen, position = [], 0, 0
    for epoch in range(1, EPOCHS + 1):
        steps = examples = 0
        while position < len(sizes) and seen < epoch * n:
            seen += sizes[position]
            examples += sizes[position]
            position, steps = position + 1, steps + 1
        if not steps:
            break
        epochs.append((steps, examples))
    return epochs


def served_epochs(plain: Path, drop: bool) -> set[tuple[int, int]]:
    """The (steps, examples) an epoch through the service may have, whoever reads what.

    ``"distributed_epoch"`` hands each file whole to whichever worker asks first, and each
    worker batches its own share: a share that ``BATCH`` does not divide ends in its own
    partial batch (or drops it), so 2 workers may make one step more than
    ``ceil(n / BATCH)`` (docs/data_service.md, "Not fixed"). Which happens is timing
    (whether the second worker asks for a file in time; seen mostly under load). Every
    outcome reads each file once: a batch trained twice, a file handed out twice, a job
    reused across epochs or read by another test, or every worker reading everything is
    in none.
    """
    counts = [s["num_records"] for s in json.loads((plain / "schema.json").read_text())["shards"]]
    outcomes = set()
    for owners in itertools.product(range(SERVICE_WORKERS), repeat=len(counts)):
        shares = [0] * SERVICE_WORKERS  # the examples each worker reads: its files'
        for count, owner in zip(counts, owners, strict=True):
            shares[owner] += count
        steps = [s // BATCH if drop else math.ceil(s / BATCH) for s in shares]
        examples = [s // BATCH * BATCH if drop else s for s in shares]
        outcomes.add((sum(steps), sum(examples)))
    return outcomes


def _check_sizes(sizes: list[tuple[int, int]], kind: str, files: Any, drop: bool) -> None:
    """Each epoch's (steps, examples), as :class:`helpers.EpochSizes` recorded them."""
    n, plain, _ = files
    if kind != "served":
        assert sizes == expected_epochs(kind, n, drop)
        return
    outcomes = served_epochs(plain, drop)
    assert len(sizes) == len(expected_epochs(kind, n, drop))  # every epoch, or none
    assert all(size in outcomes for size in sizes), (sizes, sorted(outcomes))


def _max_steps(kind: str, files: Any, drop: bool, passes: int) -> int:
    """More steps than an epoch (of ``passes`` passes) can hold: the never-ending bound."""
    n, plain, _ = files
    if kind == "served":
        return max(steps for steps, _ in served_epochs(plain, drop)) * passes + 1
    return passes * n // BATCH + 1


def _check_history(history: dict[str, list[float]], kind: str, n: int, drop: bool) -> None:
    ended = len(expected_epochs(kind, n, drop))
    assert len(history.get("index", [])) == ended  # an entry per epoch that ended
    if not drop and kind != "queue":  # every example once an epoch: the mean index
        assert history["index"] == pytest.approx([(n - 1) / 2] * EPOCHS)


def _refused(kind: str, n: int, drop: bool) -> bool:
    """Whether the reader refuses the case: fewer examples than a batch, dropped, in memory."""
    return drop and n < BATCH and kind in ("decoded", "encoded")


def _function_loop_case(kind: str, files: Any, drop: bool, service: str | None) -> None:
    n, plain, packed = files
    args = _reader_args(kind, n, plain, packed, drop)
    if _refused(kind, n, drop):
        with pytest.raises(ValueError, match="Expected at least `batch_size` examples"):
            tfrecord.dataset(**args)
        return
    data = tfrecord.dataset(**args, service=service)
    hook = EpochSizes(max_steps=_max_steps(kind, files, drop, 1))

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"index": tf.reduce_mean(tf.cast(batch["index"], tf.float32))}

    history = FunctionLoop(data, step_fn=step, hooks=[hook], handle_signals=False).run(EPOCHS)
    _check_sizes(hook.sizes, kind, files, drop)
    _check_history(history, kind, n, drop)


def _session_loop_case(kind: str, files: Any, drop: bool, service: str | None) -> None:
    n, plain, packed = files
    args = _reader_args(kind, n, plain, packed, drop)
    if kind == "queue":
        args.update(pipeline="queue", num_epochs=EPOCHS)
    with tf.Graph().as_default():
        if _refused(kind, n, drop):
            with pytest.raises(ValueError, match="Expected at least `batch_size` examples"):
                tfrecord.read_batches(**args)
            return
        batches = tfrecord.read_batches(**args, service=service)
        if kind == "encoded":
            assert batches.facts.kind is PipelineKind.MEMORY_ENCODED
        # a train op and fetches that read no batch (issue 36): only the loop's batch
        # size takes one each step, and finds the end of each epoch's data
        step = v1.train.get_or_create_global_step()
        hook = EpochSizes(max_steps=_max_steps(kind, files, drop, 2))
        loop = tfr_hooks.SessionLoop(
            v1.assign_add(step, 1),
            fetches={"index": tf.constant(-1.0)},
            hooks=[hook],
            data=batches,
            handle_signals=False,
        )
        history = loop.run(EPOCHS)
    _check_sizes(hook.sizes, kind, files, drop)
    assert history.get("index", []) == [-1.0] * len(hook.sizes)  # an entry per epoch


@pytest.mark.slow
@pytest.mark.size_matrix
@pytest.mark.parametrize("drop", [False, True], ids=["keep", "drop"])
@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("queue", "served")])
def test_function_loop_epochs_are_exact(files, kind, drop):
    _function_loop_case(kind, files, drop, None)


@pytest.mark.slow
@pytest.mark.size_matrix
@pytest.mark.parametrize("drop", [False, True], ids=["keep", "drop"])
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "served"])
def test_session_loop_epochs_are_exact(files, kind, drop):
    _session_loop_case(kind, files, drop, None)


@pytest.mark.slow
@pytest.mark.size_matrix
@pytest.mark.data_service
@pytest.mark.parametrize("drop", [False, True], ids=["keep", "drop"])
@pytest.mark.parametrize("loop", ["function", "session"])
def test_served_epochs_are_exact(files, service, loop, drop):
    case = _function_loop_case if loop == "function" else _session_loop_case
    case("served", files, drop, service)


@pytest.mark.slow
@pytest.mark.size_matrix
def test_encoded_kind_is_what_the_budget_chooses(files, caplog):
    n, plain, packed = files
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.pipelines.pipeline"):
        tfrecord.dataset(**_reader_args("encoded", n, plain, packed, False))
    assert "holding the encoded records in memory" in caplog.text


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    batch=st.integers(1, 12),
    drop=st.booleans(),
    shuffle=st.sampled_from([None, 5, "global"]),
)
@pytest.mark.slow  # hypothesis: many in-memory passes in both modes; about 2 s of CPU
def test_in_memory_passes_are_exact_in_both_modes(n, batch, drop, shuffle):
    """The in-memory gather alone: every pass, eager and graph, holds the exact batches."""
    from tfr_hooks.tfrecord.pipelines.memory.serve import memory_dataset

    arrays = {"index": np.arange(n, dtype=np.int64)}
    kwargs = dict(shuffle=shuffle, seed=3, drop_remainder=drop, num_epochs=1, prefetch=1)
    if drop and n < batch:
        with pytest.raises(ValueError, match="Expected at least `batch_size` examples"):
            memory_dataset(arrays, batch, **kwargs)
        return
    full, rest = divmod(n, batch)
    sizes = [batch] * full + ([rest] if rest and not drop else [])
    eager = memory_dataset(arrays, batch, **kwargs)
    assert int(eager.cardinality()) == len(sizes)
    for _ in range(EPOCHS):
        got = [b["index"].numpy() for b in eager]
        assert [len(b) for b in got] == sizes
        assert len(set(np.concatenate(got).tolist())) == sum(sizes)
    with tf.Graph().as_default():
        batches = memory_dataset(arrays, batch, **kwargs)
        iterator = v1.data.make_initializable_iterator(batches)
        index = iterator.get_next()["index"]
        with v1.Session() as session:
            for _ in range(EPOCHS):
                session.run(iterator.initializer)
                found = []
                for _ in range(len(sizes) + 1):
                    try:
                        found.append(len(session.run(index)))
                    except tf.errors.OutOfRangeError:
                        break
                assert found == sizes
