"""Streamed and packed bucketing: batches cut by length from sorted pools (issue 46).

Token-id lists of long-tailed lengths, written by a plain ``tf.io.TFRecordWriter`` (and
packed by ``tfrecord.convert``), each example with its ``id``. With ``bucket_boundaries``
a streamed read takes pools of ``bucket_pool`` batches, sorts each by length, cuts it into
batches and shuffles their order: every example comes once an epoch, a pool's batches
follow one another and cover disjoint, increasing length ranges, the order follows the
seed and changes every epoch, and a run stopped mid-epoch resumes at the next batch.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import example, int64_feature, write_records
from helpers import preemptible_run
from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.pipelines.pools import DEFAULT_POOL, pool_order

BATCH = 4
POOL = DEFAULT_POOL * BATCH  # examples a pool
BOUNDARIES = [8, 16, 32]


def lengths_of(n: int) -> list[int]:
    rng = np.random.default_rng(n)
    return np.clip(rng.lognormal(2.3, 0.9, n).astype(int), 1, 90).tolist()


def write_texts(path: Path, n: int) -> str:
    records = [
        example(tokens=int64_feature([(i + k) % 50 + 1 for k in range(m)]), id=int64_feature([i]))
        for i, m in enumerate(lengths_of(n))
    ]
    return write_records(path / "text.tfrecord", records)


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Files of 300 (pools of 128, 128, 44; not a multiple of 4), 256 and 3 examples."""
    root = tmp_path_factory.mktemp("texts")
    out = {}
    for n in (300, 256, 3):
        (root / str(n)).mkdir()
        out[n] = write_texts(root / str(n), n)
    packed = root / "packed"
    tfrecord.convert(out[300], packed, examples_per_record=8)
    out[-300] = str(packed)  # the 300 examples, packed
    return out


def read(files: str | list[str], **kwargs: Any) -> tf.data.Dataset:
    options = {"shuffle": 64, "seed": 7, "bucket_boundaries": BOUNDARIES, **kwargs}
    return tfrecord.dataset(files, BATCH, **options)


def batches_of(data: tf.data.Dataset) -> list[tuple[list[int], list[int]]]:
    """Each batch's ids and lengths, in order."""
    return [
        (b["id"].numpy().ravel().tolist(), b["tokens"].row_lengths().numpy().tolist()) for b in data
    ]


def check_pools(batches: list[tuple[list[int], list[int]]], n: int, drop: bool) -> None:
    """A pool's batches follow one another; sorted by length, their ranges do not overlap."""
    full, rest = divmod(n, BATCH)
    sizes = [BATCH] * full + ([rest] if rest and not drop else [])
    assert [len(ids) for ids, _ in batches] == sizes
    for start in range(0, len(batches), DEFAULT_POOL):
        pool = sorted(batches[start : start + DEFAULT_POOL], key=lambda b: (min(b[1]), max(b[1])))
        for (_, shorter), (_, longer) in itertools.pairwise(pool):
            assert max(shorter) <= min(longer), (start, shorter, longer)


def sizes_and_drops() -> list[Any]:
    """Each file of ``texts`` with and without ``drop_remainder``; the fast run keeps one
    case of each (a streamed partial pool, a count of whole pools, the packed shards)."""
    cases = []
    for n, name in ((300, "300"), (256, "256"), (-300, "packed-300")):
        for drop, how in ((False, "partial"), (True, "drop_remainder")):
            slow = (n, drop) not in {(300, False), (256, True), (-300, False)}
            marks = [pytest.mark.slow] if slow else []  # about 1.5 s of CPU each
            cases.append(pytest.param(n, drop, marks=marks, id=f"{name}-{how}"))
    return cases


@pytest.mark.parametrize(("n", "drop"), sizes_and_drops())
def test_each_example_once_an_epoch_in_length_sorted_pools(texts, n, drop):
    count = abs(n)
    data = read(texts[n], drop_remainder=drop)
    epochs = [batches_of(data) for _ in range(2)]
    lengths = lengths_of(count)
    for batches in epochs:
        check_pools(batches, count, drop)
        ids = [i for b, _ in batches for i in b]
        assert len(ids) == len(set(ids))
        if not drop:
            assert sorted(ids) == list(range(count))
        for b, found in batches:  # each row keeps its own length
            assert found == [lengths[i] for i in b]
    assert epochs[0] != epochs[1]  # a new order every epoch
    # against padding to the longest of batches in the read order: far less padding
    padded = read(texts[n], bucket_boundaries=None, drop_remainder=drop)
    waste = [sum(max(ln) - x for x in ln) for _, ln in epochs[0]]
    plain = [sum(max(ln) - x for x in ln) for _, ln in batches_of(padded)]
    assert sum(waste) < sum(plain) / 3


@pytest.mark.slow  # about 2 s of CPU; the order tests of the fast run stay
def test_the_seed_fixes_every_epoch_and_another_seed_changes_it(texts):
    first = read(texts[300])
    again = read(texts[300])
    epochs = [batches_of(first) for _ in range(2)]
    assert epochs == [batches_of(again) for _ in range(2)]
    assert batches_of(read(texts[300], seed=8)) != epochs[0]


def test_without_shuffling_each_pool_serves_its_batches_shortest_first(texts):
    batches = batches_of(read(texts[300], shuffle=None))
    for start in range(0, len(batches), DEFAULT_POOL):
        pool = [ln for _, ln in batches[start : start + DEFAULT_POOL]]
        flat = [x for ln in pool for x in ln]
        assert flat == sorted(flat)
    assert [i for ids, _ in batches[:DEFAULT_POOL] for i in ids] != list(range(POOL))


@pytest.mark.parametrize("drop", [False, True])
def test_a_dense_feature_stays_dense(texts, drop):
    """The partial batch is cut by ragged rows; the spec stays what padding gives."""
    spec = read(texts[300], drop_remainder=drop).element_spec
    padded = read(texts[300], bucket_boundaries=None, drop_remainder=drop).element_spec
    assert spec["id"] == padded["id"] and isinstance(spec["id"], tf.TensorSpec)
    assert isinstance(spec["tokens"], tf.RaggedTensorSpec)


@pytest.mark.slow  # a record index built for the global order: about 2 s of CPU
def test_the_global_order_shuffles_each_pools_batches_too(texts):
    data = read(texts[300], shuffle="global")
    epochs = [batches_of(data) for _ in range(2)]
    for batches in epochs:
        check_pools(batches, 300, False)
        assert sorted(i for ids, _ in batches for i in ids) == list(range(300))
    assert epochs[0] != epochs[1]  # a new global order every epoch
    # not served shortest first: the first pool's batches come in a shuffled order
    longest = [max(ln) for _, ln in epochs[0][:DEFAULT_POOL]]
    assert longest != sorted(longest)


@pytest.mark.parametrize("drop", [False, True])
def test_fewer_examples_than_a_batch(texts, drop):
    batches = batches_of(read(texts[3], drop_remainder=drop))
    assert batches == ([] if drop else [(batches[0][0], sorted(batches[0][1]))])
    if not drop:
        assert sorted(batches[0][0]) == [0, 1, 2]


def test_padded_to_each_batchs_longest_in_graph_mode_too(texts):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            texts[300], BATCH, pad_to="longest", bucket_boundaries=BOUNDARIES, seed=7,
            shuffle=64,
        )  # fmt: skip
        ids: list[int] = []
        with tf.compat.v1.Session() as session:
            session.run(batches.initializers)
            try:
                while True:
                    tokens, index = session.run([batches.tensors["tokens"], batches.tensors["id"]])
                    lengths = (tokens != 0).sum(axis=1)
                    assert tokens.shape[1] == lengths.max()
                    ids += index.ravel().tolist()
            except tf.errors.OutOfRangeError:
                pass
    assert sorted(ids) == list(range(300))


def test_pool_order_sorts_cuts_and_shuffles_the_batches():
    lengths = tf.constant([5, 1, 4, 2, 3, 9, 7], tf.int64)
    full, rest = pool_order(lengths, 2, seed=None)
    assert full.numpy().tolist() == [[1, 3], [4, 2], [0, 6]] and rest.numpy().tolist() == [5]
    seed = tf.constant([3, 0], tf.int64)
    shuffled, rest = pool_order(lengths, 2, seed=seed)
    assert sorted(map(sorted, shuffled.numpy().tolist())) == [[0, 6], [1, 3], [2, 4]]
    assert rest.numpy().tolist() == [5]
    again, _ = pool_order(lengths, 2, seed=seed)
    assert again.numpy().tolist() == shuffled.numpy().tolist()


# --- resumed mid-epoch (FunctionLoop; SessionLoop in test_checkpoint_mid_epoch.py) ------


@pytest.mark.slow  # three training runs, one stopped and resumed: about 5 s of CPU
def test_a_preempted_function_loop_resumes_at_the_next_bucketed_batch(texts, tmp_path, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # no cloud probe: refused at once
    epochs, steps = 3, -(-300 // BATCH)

    def run(directory: Path, at: tuple[int, int] | None) -> tuple[dict[int, list], Any]:
        return preemptible_run(read(texts[300], pad_to="longest"), "id", directory, at, epochs)

    reference, (_, total) = run(tmp_path / "ref", None)
    assert total == epochs * steps and reference[1] != reference[2]
    before, (stop, _) = run(tmp_path / "p", (1, 40))  # in the second pool of epoch 1
    assert stop is not None and stop.epoch == 1 and 40 < stop.step < steps
    after, (_, total) = run(tmp_path / "p", None)
    assert total == epochs * steps
    assert before[1][: stop.step] + after[1] == reference[1]
    assert after[2] == reference[2]
    resumed = [i for b in before[1][: stop.step] + after[1] for i in b]
    assert sorted(resumed) == list(range(300))


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The 300 examples in 4 files (the service hands the workers whole files)."""
    root = tmp_path_factory.mktemp("shards")
    lengths = lengths_of(300)
    files = []
    for f in range(4):
        records = [
            example(tokens=int64_feature([(i + k) % 50 + 1 for k in range(lengths[i])]),
                    id=int64_feature([i]))
            for i in range(f * 75, (f + 1) * 75)
        ]  # fmt: skip
        files.append(write_records(root / f"part-{f}.tfrecord", records))
    return files


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(600)
def test_the_service_workers_batch_by_length_from_pools(shards, shared_service):
    data = read(shards, service=shared_service)
    lengths = lengths_of(300)
    for _ in range(2):  # a new iterator each: a new epoch
        batches = batches_of(data)
        assert sorted(i for ids, _ in batches for i in ids) == list(range(300))
        assert all(found == [lengths[i] for i in ids] for ids, found in batches)
        waste = sum(max(found) - x for _, found in batches for x in found)
        plain = read(shards, bucket_boundaries=None, service=shared_service)
        assert waste < sum(max(ln) - x for _, ln in batches_of(plain) for x in ln) / 3
