"""tfr_hooks.tfrecord.pipelines.mixture: the order of a mixture of named sources.

Exact shares per window and per batch, each source's own epochs, seeds, weights changed
at a checkpoint, constant-time entry, any number of workers, and the streamed read of
TFRecord sources in their global orders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import example, int64_feature, write_records
from tfr_hooks.tfrecord.formats import index as ix
from tfr_hooks.tfrecord.pipelines.mixture import (
    Interleave,
    MixtureOrder,
    MixtureState,
    integer_weights,
    source_seed,
)
from tfr_hooks.tfrecord.pipelines.mixture_streams import global_streams, interleave, mixed_batches
from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalOrder

WEIGHTS = {"web": 0.5, "books": 0.3, "code": 0.2}
SIZES = {"web": 300, "books": 100, "code": 20}

WEIGHT_SETS = [
    WEIGHTS,
    {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3},
    {"a": 0.7, "b": 0.2, "c": 0.1},
    {"a": 0.005, "b": 0.495, "c": 0.5},
    {"a": 0.31, "b": 0.17, "c": 0.23, "d": 0.29},
    {"a": 3.0, "b": 1.0},
    {f"s{i}": w for i, w in enumerate([0.25, 0.2, 0.15, 0.12, 0.1, 0.08, 0.06, 0.04])},
]


def share_errors(sources: np.ndarray, weights: dict[str, float], window: int) -> np.ndarray:
    """The largest |share - weight| of each source over every window of ``window``."""
    total = sum(weights.values())
    errors = []
    for i, weight in enumerate(weights.values()):
        counts = np.concatenate(([0], np.cumsum(sources == i)))
        shares = (counts[window:] - counts[:-window]) / window
        errors.append(np.abs(shares - weight / total).max())
    return np.array(errors)


def order_of(weights: dict[str, float], sizes: dict[str, int], seed: int = 3) -> MixtureOrder:
    return MixtureOrder(MixtureState.initial(weights, sizes), seed=seed)


@pytest.mark.parametrize("weights", WEIGHT_SETS, ids=lambda w: "-".join(w))
def test_shares_within_bounds_in_every_window_and_batch(weights: dict[str, float]) -> None:
    order = order_of(weights, {name: 1000 for name in weights})
    sources, _, _ = order.draws_numpy(np.arange(40_000))
    # every window of 10,000 consecutive positions, not only the aligned ones
    assert share_errors(sources, weights, 10_000).max() <= 0.005
    # every run of 256 positions, so every batch of 256 wherever batches start
    assert share_errors(sources, weights, 256).max() <= 0.05


def test_shares_within_bounds_for_random_weights_of_2_to_8_sources() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(2, 9))
        weights = {f"s{i}": float(w) for i, w in enumerate(rng.dirichlet(np.full(n, 0.5)))}
        sources = order_of(weights, dict.fromkeys(weights, 100)).draws_numpy(np.arange(30_000))[0]
        assert share_errors(sources, weights, 10_000).max() <= 0.005, weights
        assert share_errors(sources, weights, 256).max() <= 0.05, weights


def test_interleave_counts_are_exact_and_constant_time() -> None:
    inter = Interleave([5, 3, 2])
    sequence = inter.source_at(np.arange(1000))
    for k in (0, 1, 7, 10, 11, 999):
        assert inter.counts_before(k).tolist() == [int((sequence[:k] == i).sum()) for i in range(3)]
    # a position far beyond any stream: two table reads, no walk to it
    huge = 10**15 + 7
    assert inter.counts_before(huge).sum() == huge
    assert np.abs(inter.counts_before(huge) - huge * np.array([0.5, 0.3, 0.2])).max() < 2


def test_integer_weights_keep_shares_and_every_positive_source() -> None:
    ints = integer_weights({"a": 0.5, "b": 0.3, "c": 0.2})
    assert ints == {"a": 5, "b": 3, "c": 2}
    tiny = integer_weights({"a": 1.0, "b": 1e-9})
    assert tiny["b"] >= 1
    thirds = integer_weights({"a": 1, "b": 1, "c": 1})
    assert sum(thirds.values()) == 10_000
    assert max(thirds.values()) - min(thirds.values()) == 1
    assert integer_weights({"a": 2, "b": 2}) == {"a": 1, "b": 1}


def test_a_source_at_weight_zero_is_kept_but_never_drawn() -> None:
    assert integer_weights({"a": 0.6, "b": 0.0, "c": 0.4}) == {"a": 3, "b": 0, "c": 2}
    order = order_of({"a": 0.6, "b": 0.0, "c": 0.4}, {"a": 10, "b": 10, "c": 10})
    sources, _, _ = order.draws_numpy(np.arange(1000))
    assert not (sources == order.names.index("b")).any()
    assert order.batch_counts(0, 7)[:, order.names.index("b")].sum() == 0


@pytest.mark.parametrize(
    "weights",
    [{}, {"a": -1.0}, {"a": 0.0}, {"a": float("nan")}, {"a": "x"}, [0.5, 0.5], {1: 1.0}],
)
def test_bad_weights_are_refused_naming_the_argument(weights: object) -> None:
    with pytest.raises(ValueError, match="Received: weights="):
        integer_weights(weights)  # type: ignore[arg-type]


def test_bad_sizes_are_refused_naming_the_argument() -> None:
    with pytest.raises(ValueError, match=r"missing \['code'\].*Received: sizes="):
        MixtureState.initial(WEIGHTS, {"web": 3, "books": 3})
    with pytest.raises(ValueError, match="Received: sizes="):
        MixtureState.initial(WEIGHTS, {"web": 3, "books": 3, "code": 0})


def test_each_record_once_per_epoch_of_its_source_in_a_new_order() -> None:
    sizes = {"web": 50, "books": 7, "code": 13}
    order = order_of(WEIGHTS, sizes)
    source, epoch, at = order.draws(tf.range(600, dtype=tf.int64))
    record = order.records(source, epoch, at).numpy()
    source, epoch = source.numpy(), epoch.numpy()
    for i, name in enumerate(order.names):
        mine = source == i
        epochs = epoch[mine]
        full = epochs.max()  # the last epoch may be partial
        orders = []
        for e in range(full):
            records = record[mine][epochs == e]
            assert sorted(records.tolist()) == list(range(sizes[name])), (name, e)
            orders.append(records.tolist())
        # a new order each epoch
        assert len({tuple(o) for o in orders}) == len(orders)
    # the small source cycles while the large one is in its first epoch
    first = slice(0, 100)
    assert (epoch[first][source[first] == order.names.index("web")] == 0).all()
    assert epoch[first][source[first] == order.names.index("books")].max() >= 4


def test_the_tensorflow_and_numpy_draws_agree_and_records_are_index_shuffle() -> None:
    state = MixtureState.initial(WEIGHTS, SIZES).reweighted(
        1500, {"web": 0.25, "code": 0.75}, {"web": 300, "code": 20}
    )
    order = MixtureOrder(state, seed=11)
    positions = np.arange(3000)
    source, epoch, at = order.draws(tf.constant(positions, tf.int64))
    expected = order.draws_numpy(positions)
    for got, want in zip((source, epoch, at), expected, strict=True):
        assert got.numpy().tolist() == want.tolist()
    records = order.records(source, epoch, at).numpy()
    for k in (0, 5, 17, 2999):
        s = int(source[k])
        one = tf.random.experimental.index_shuffle(
            int(at[k]), [source_seed(11, order.names[s]), int(epoch[k])], int(order.sizes[s]) - 1
        )
        assert int(one) == records[k]


def stream(order: MixtureOrder, start: int, count: int) -> list[tuple[int, int, int, int]]:
    rows = order.positions(start, start + count, batch_size=64)
    out: list[tuple[int, int, int, int]] = []
    for source, epoch, at, record in rows.as_numpy_iterator():
        out.extend(zip(source.tolist(), epoch.tolist(), at.tolist(), record.tolist(), strict=True))
    return out


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    first = stream(order_of(WEIGHTS, SIZES, seed=3), 0, 1000)
    again = stream(order_of(WEIGHTS, SIZES, seed=3), 0, 1000)
    other = stream(order_of(WEIGHTS, SIZES, seed=4), 0, 1000)
    assert first == again
    assert [r[3] for r in first] != [r[3] for r in other]
    # the interleave of sources depends on the weights only
    assert [r[0] for r in first] == [r[0] for r in other]


@pytest.fixture(scope="module")
def reweighted() -> tuple[MixtureOrder, list[tuple[int, int, int, int]]]:
    """An order reweighted at 2,000 and its whole stream of 5,000 (read once a module)."""
    state = MixtureState.initial(WEIGHTS, SIZES).reweighted(
        2000, {"web": 0.2, "books": 0.8}, {"web": 300, "books": 100}
    )
    order = MixtureOrder(state, seed=5)
    return order, stream(order, 0, 5000)


@pytest.mark.parametrize("start", [1, 255, 1000, 4321])
def test_a_stream_entered_at_a_position_is_the_tail_of_the_whole(
    reweighted: tuple[MixtureOrder, list[tuple[int, int, int, int]]], start: int
) -> None:
    order, whole = reweighted
    assert stream(order, start, 5000 - start) == whole[start:]


def test_entering_far_away_costs_no_walk_and_works_in_a_graph() -> None:
    order = order_of(WEIGHTS, SIZES)
    far = 10**15 + 3

    @tf.function
    def first(start: tf.Tensor) -> tf.Tensor:
        return next(iter(order.positions(start, batch_size=8)))[3]

    got = first(tf.constant(far, tf.int64)).numpy().tolist()
    assert got == [r[3] for r in stream(order, far, 8)]
    _, epoch, _ = order.draws_numpy(np.arange(far, far + 8))
    assert (order.draws_before(far) >= order.draws_before(far - 1)).all()
    assert epoch.min() > 10**12  # a source's epochs are counted, not replayed


def test_a_weights_change_at_a_checkpoint_continues_every_source() -> None:
    sizes = {"web": 300, "books": 100, "code": 20}
    before = MixtureState.initial(WEIGHTS, sizes)
    saved = MixtureState.from_bytes(before.to_bytes())  # what the checkpoint holds
    # restarted at position 1000 with other weights: code dropped, news added
    after = saved.reweighted(
        1000, {"web": 0.3, "books": 0.5, "news": 0.2}, {"web": 300, "books": 100, "news": 40}
    )
    old, new = MixtureOrder(before, seed=3), MixtureOrder(after, seed=3)
    # earlier positions stay reproducible
    assert stream(new, 0, 1000) == stream(old, 0, 1000)
    rows = stream(new, 0, 6000)
    names = new.names
    for i, name in enumerate(names):
        draws = [(e, at, r) for s, e, at, r in rows if s == i]
        # every source continues where it stopped: its draws are consecutive from 0
        numbers = [e * new.sizes[i] + at for e, at, _ in draws]
        assert numbers == list(range(len(numbers))), name
        # so no record repeats within an epoch of its source
        for e in {e for e, _, _ in draws}:
            records = [r for d, _, r in draws if d == e]
            assert len(records) == len(set(records)), (name, e)
    late = np.array([s for s, *_ in rows[1000:]])
    assert not (late == names.index("code")).any()  # dropped
    news = [r for r in rows[1000:] if r[0] == names.index("news")]
    assert (news[0][1], news[0][2]) == (0, 0)  # added: from its beginning
    shares = {n: (late == names.index(n)).mean() for n in ("web", "books", "news")}
    assert shares == pytest.approx({"web": 0.3, "books": 0.5, "news": 0.2}, abs=0.005)


def test_a_source_added_back_continues_where_it_stopped() -> None:
    state = (
        MixtureState.initial(WEIGHTS, SIZES)
        .reweighted(500, {"web": 1.0}, {"web": 300})
        .reweighted(900, WEIGHTS, SIZES)
    )
    order = MixtureOrder(state, seed=3)
    at_500 = order.draws_before(500)
    assert (order.draws_before(900) - at_500).tolist() == [400, 0, 0]
    assert state.stretches[2].draws == tuple(order.draws_before(900).tolist())


def test_a_changed_source_size_is_refused() -> None:
    state = MixtureState.initial(WEIGHTS, SIZES)
    with pytest.raises(ValueError, match=r"'web': \(300, 301\).*Received: sizes="):
        state.reweighted(10, WEIGHTS, {**SIZES, "web": 301})


def test_the_state_is_under_a_kilobyte_and_round_trips() -> None:
    state = MixtureState.initial(
        {"web": 0.5, "books": 0.3, "code": 0.2},
        {"web": 1_000_000_000, "books": 250_000_000, "code": 3_000_000},
    )
    sizes = dict(zip(state.stretches[0].names, state.stretches[0].sizes, strict=True))
    changes = [
        (10**9, {"web": 0.4, "books": 0.4, "code": 0.2}),
        (3 * 10**9, {"web": 0.1234, "books": 0.5, "code": 0.3766}),
    ]
    for position, weights in changes:
        state = state.reweighted(position, weights, sizes)
    data = state.to_bytes()
    assert len(data) < 1024
    assert MixtureState.from_bytes(data) == state


def write_sources(directory: Path, sizes: dict[str, int]) -> dict[str, list[str]]:
    """Each source in two files by a plain TFRecordWriter; a record holds its source and id."""
    files = {}
    for s, (name, size) in enumerate(sizes.items()):
        records = [example(source=int64_feature([s]), id=int64_feature([i])) for i in range(size)]
        half = size // 2
        files[name] = [
            write_records(directory / f"{name}-0.tfrecord", records[:half]),
            write_records(directory / f"{name}-1.tfrecord", records[half:]),
        ]
    return files


def ids_of(dataset: tf.data.Dataset) -> list[tuple[int, int]]:
    features = {
        "source": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
    }
    parsed = dataset.batch(64).map(lambda r: tf.io.parse_example(r, features))
    out: list[tuple[int, int]] = []
    for batch in parsed.as_numpy_iterator():
        out.extend(zip(batch["source"].tolist(), batch["id"].tolist(), strict=True))
    return out


@pytest.mark.slow
def test_tfrecord_sources_streamed_in_their_global_orders(tmp_path: Path) -> None:
    sizes = {"web": 300, "books": 130, "code": 40}
    files = write_sources(tmp_path, sizes)
    indexes = {name: ix.index_files(paths) for name, paths in files.items()}
    order = order_of(WEIGHTS, sizes, seed=7)
    count = 500
    mixed = ids_of(interleave(order, global_streams(order, indexes, 0, window=128), 0, count))
    source, epoch, at = order.draws_numpy(np.arange(count))
    # each position holds its draw: that position of its source's global order
    epochs_of = {}
    for i, name in enumerate(order.names):
        g = GlobalOrder(indexes[name], seed=source_seed(7, name), window=128)
        last = int(epoch[source == i].max())
        epochs_of[name] = [ids_of(g.records(e)) for e in range(last + 1)]
    expected = [
        epochs_of[order.names[s]][e][a] for s, e, a in zip(source.tolist(), epoch, at, strict=True)
    ]
    assert mixed == expected
    # entered at a position: the tail of the whole
    start = 277
    tail = ids_of(
        interleave(order, global_streams(order, indexes, start, window=128), start, count)
    )
    assert len(tail) == count - start
    assert tail == mixed[start:]
    # a batch at a time: the same records, from the start and entered at a batch
    for begin, chunk in ((0, 4096), (256, 32), (100, 100)):
        vectors = global_streams(order, indexes, begin, window=128, vectors=True)
        batched = mixed_batches(order, vectors, begin, 32, chunk=chunk)
        batched = batched.unbatch().take(count - begin)
        assert ids_of(batched) == mixed[begin:]


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
def test_the_mixture_benchmark_runs_every_row_on_tiny_data(tmp_path: Path) -> None:
    # bench/mixture_rows.py, issue 54's rows: it never asserts speed, only that each row is there
    bench = Path(__file__).resolve().parents[1] / "bench" / "mixture_rows.py"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = tmp_path / "rows.json"
    result = subprocess.run(
        [
            sys.executable,
            str(bench),
            "--records=4200",
            "--peer-examples=1024",
            "--rounds=1",
            "--repeats=1",
            f"--data-dir={tmp_path / 'data'}",
            f"--json={out}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {"mixture", "single_global", "sample_from_datasets", "grain_mix"} <= set(
        rows["examples_per_sec"]
    )
    assert all(rate > 0 for rate in rows["examples_per_sec"].values())
    assert rows["share_error"]["mixture"] <= 0.005
    ours = rows["checkpoint"]["mixture"]
    assert 0 < ours["bytes"] < 1024
    assert "## Mixtures (issue 54)" in result.stdout
