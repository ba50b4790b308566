"""SequenceExample files from a plain writer, read whole on every pipeline (issue 26).

Every file is written with ``tf.io.TFRecordWriter`` directly (no ``schema.json``): 300
``tf.train.SequenceExample`` records with the context features ``id`` (one int64) and
``labels`` (0 to 4 int64 values) and the feature lists ``rgb`` (per frame 8 uint8 values
as one bytes value) and ``audio`` (per frame 4 floats), 5 to 40 frames each; GZIP too.
Each pipeline (streamed ``dataset``, graph ``read_batches`` through ``tf.data``, queues,
in memory decoded and encoded) must return what was written: per feature the sum over
one pass, and each record's frame counts.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _tfrecord_data import (
    new_session,
    run_graph_batches,
    sequence_frames,
    sequence_values,
    write_records,
    write_sequences,
)
from tfr_hooks import FunctionLoop, Hook, tfrecord
from tfr_hooks.tfrecord.schema.schema import Feature, Schema

N = 300
BATCH = 16
SCHEMA_LOGGER = "tfr_hooks.tfrecord.schema.schema"
LISTS = ("rgb", "audio")

DECLARED = Schema(
    [
        Feature("id", "int64"),
        Feature("labels", "int64", (None,)),
        Feature("rgb", "uint8", (8,), sequence=True),
        Feature("audio", "float32", (4,), sequence=True),
    ]
)


def decode_rgb(example: dict[str, Any]) -> dict[str, Any]:
    """``map_fn`` for the inferred schema: each frame's 8 bytes to 8 uint8 values."""
    out = dict(example)
    out["rgb"] = tf.reshape(tf.io.decode_raw(example["rgb"], tf.uint8), [-1, 8])
    return out


def dequantize_rgb(example: dict[str, Any]) -> dict[str, Any]:
    """``map_fn`` whose output is larger than the records: rgb as float32 values."""
    out = decode_rgb(example)
    out["rgb"] = tf.cast(out["rgb"], tf.float32)
    return out


#: Between the encoded records (bytes per frame) and ``dequantize_rgb``'s output.
ENCODED_BUDGET = 300_000


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The 300 records, plain and GZIP, and the values written."""
    directory = tmp_path_factory.mktemp("sequences")
    values = [sequence_values(i, sequence_frames(i)) for i in range(N)]
    return {
        "": write_sequences(directory / "videos.tfrecord", values),
        "GZIP": write_sequences(directory / "videos.tfrecord.gz", values, "GZIP"),
        "values": values,
    }


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    """Records with empty feature lists (0 frames) and records that lack ``audio``."""
    directory = tmp_path_factory.mktemp("sparse")
    values = [sequence_values(i, [0, 3, 6][i % 3], audio=i % 4 != 1) for i in range(40)]
    return write_sequences(directory / "sparse.tfrecord", values), values


# --- what was written, and what a pipeline read ------------------------------------------


def _summary_of_written(values: list[dict]) -> dict[str, Any]:
    def total(name: str) -> float:
        arrays = [np.asarray(v[name], np.float64) for v in values if v[name] is not None]
        return float(sum(a.sum() for a in arrays))

    return {
        "sums": {name: total(name) for name in ("id", "labels", *LISTS)},
        "frames": {
            name: {v["id"]: 0 if v[name] is None else len(v[name]) for v in values}
            for name in LISTS
        },
    }


def _flat(value: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """A fetched batch value: its flat values, and its row lengths if ragged."""
    if isinstance(value, tf.RaggedTensor):
        return value.flat_values.numpy(), value.row_lengths().numpy()
    if isinstance(value, tf.compat.v1.ragged.RaggedTensorValue):
        flat = value.values
        while isinstance(flat, tf.compat.v1.ragged.RaggedTensorValue):
            flat = flat.values
        return np.asarray(flat), np.diff(value.row_splits)
    return np.asarray(value), None


def _summary_of_read(batches: Iterable[dict[str, Any]]) -> dict[str, Any]:
    sums: dict[str, float] = {}
    frames: dict[str, dict[int, int]] = {name: {} for name in LISTS}
    for batch in batches:
        ids = _flat(batch["id"])[0].tolist()
        for name, value in batch.items():
            flat, lengths = _flat(value)
            sums[name] = sums.get(name, 0.0) + float(flat.astype(np.float64).sum())
            if name in LISTS:
                assert lengths is not None, f"{name} is not ragged in its frames"
                for index, count in zip(ids, lengths.tolist(), strict=True):
                    assert index not in frames[name], f"id {index} read twice"
                    frames[name][index] = count
    return {"sums": sums, "frames": frames}


def _assert_read_as_written(read: dict[str, Any], values: list[dict]) -> None:
    written = _summary_of_written(values)
    assert read["frames"] == written["frames"]
    assert read["sums"].keys() == written["sums"].keys()
    for name, total in written["sums"].items():
        assert read["sums"][name] == pytest.approx(total, rel=1e-9), name


# --- each pipeline, read once --------------------------------------------------------------


def _eager(path: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(tfrecord.dataset(path, BATCH, **kwargs))


def _graph(path: str, **kwargs: Any) -> list[dict[str, Any]]:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(path, BATCH, **kwargs)
        with new_session() as session:
            return run_graph_batches(session, batches.tensors, batches.initializers)


PIPELINES: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "streamed": lambda path, **kw: _eager(path, schema=DECLARED, **kw),
    "graph_dataset": lambda path, **kw: _graph(path, schema=DECLARED, **kw),
    "queue": lambda path, **kw: _graph(path, schema=DECLARED, pipeline="queue", **kw),
    "memory_decoded": lambda path, **kw: _eager(path, in_memory=True, map_fn=decode_rgb, **kw),
    "graph_memory": lambda path, **kw: _graph(path, schema=DECLARED, in_memory=True, **kw),
    "memory_encoded": lambda path, **kw: _eager(
        path,
        in_memory="auto",
        map_fn=dequantize_rgb,
        **{"read_config": tfrecord.ReadConfig(memory_budget=ENCODED_BUDGET), **kw},
    ),
}
HEAVY = {"graph_dataset", "queue", "graph_memory", "memory_encoded"}


@pytest.mark.parametrize(
    "pipeline",
    [pytest.param(p, marks=pytest.mark.slow) if p in HEAVY else p for p in PIPELINES],
)
def test_every_pipeline_reads_the_values_and_frames_written(files, pipeline):
    shuffle = "global" if "memory" in pipeline else 64  # in memory: as before, a full one
    read = PIPELINES[pipeline](files[""], shuffle=shuffle, seed=1)
    _assert_read_as_written(_summary_of_read(read), files["values"])


@pytest.mark.parametrize(
    "pipeline", ["streamed", "queue", pytest.param("memory_decoded", marks=pytest.mark.slow)]
)
def test_gzip_files_read_whole(files, pipeline):
    _assert_read_as_written(_summary_of_read(PIPELINES[pipeline](files["GZIP"])), files["values"])


# the graph-mode builds parse as the eager ones do: slow (about 0.4 s of CPU each), the
# eager streamed, queue and both in-memory cases stay in the fast run
@pytest.mark.parametrize(
    "pipeline",
    [pytest.param(p, marks=pytest.mark.slow) if p.startswith("graph") else p for p in PIPELINES],
)
def test_empty_and_missing_feature_lists_read_as_0_frames(sparse, pipeline):
    path, values = sparse
    read = _summary_of_read(PIPELINES[pipeline](path))
    _assert_read_as_written(read, values)
    assert 0 in read["frames"]["rgb"].values() and 0 in read["frames"]["audio"].values()


@pytest.mark.slow  # decodes every record for each pipeline; about 2 s of CPU
def test_in_memory_pipelines_hold_what_they_say(files, caplog):
    with caplog.at_level(logging.INFO, logger="tfr_hooks.tfrecord.pipelines.memory.build"):
        encoded = tfrecord.dataset(
            files[""],
            BATCH,
            in_memory="auto",
            read_config=tfrecord.ReadConfig(memory_budget=ENCODED_BUDGET),
            map_fn=dequantize_rgb,
        )
        decoded = tfrecord.dataset(files[""], BATCH, in_memory="auto", map_fn=decode_rgb)
        plain = tfrecord.dataset(files[""], BATCH, in_memory="auto")
    messages = [r.getMessage() for r in caplog.records]
    assert any("holding the encoded records in memory" in m for m in messages), messages
    assert any("holding the decoded data (map_fn's output)" in m for m in messages), messages
    assert any("holding the data in memory" in m for m in messages), messages
    for ds in (encoded, decoded, plain):
        spec = ds.element_spec
        assert spec["audio"].shape.as_list() == [None, None, 4]
        assert isinstance(spec["audio"], tf.RaggedTensorSpec) and spec["audio"].ragged_rank == 1
    assert decoded.element_spec["rgb"].shape.as_list() == [None, None, 8]
    assert plain.element_spec["rgb"].shape.as_list() == [None, None]  # a bytes value a frame


def test_a_schema_without_feature_lists_reads_sequence_examples_context(tmp_path):
    values = [sequence_values(i, 0, audio=False, rgb=False) for i in range(30)]
    path = write_sequences(tmp_path / "context.tfrecord", values)
    for batches in (_eager(path), _eager(path, in_memory=True), _graph(path, pipeline="queue")):
        assert sorted(np.concatenate([_flat(b["id"])[0] for b in batches]).tolist()) == list(
            range(30)
        )
        assert set(batches[0]) == {"id", "labels"}


# --- map_fn, batch_map_fn, as_tuple, padding and buckets see the frames ---------------------


def test_map_fn_and_batch_map_fn_see_the_feature_lists(files):
    seen: dict[str, Any] = {}

    def per_example(example: dict[str, Any]) -> dict[str, Any]:
        seen["example"] = {k: v.shape.as_list() for k, v in example.items()}
        return decode_rgb(example)

    def per_batch(batch: dict[str, Any]) -> dict[str, Any]:
        seen["batch"] = {k: type(v).__name__ for k, v in batch.items()}
        return {**batch, "frames": batch["rgb"].row_lengths()}

    ds = tfrecord.dataset(files[""], BATCH, map_fn=per_example, batch_map_fn=per_batch)
    assert seen["example"]["audio"] == [None, 4] and seen["example"]["rgb"] == [None]
    assert seen["batch"]["rgb"] == "RaggedTensor" and seen["batch"]["audio"] == "RaggedTensor"
    frames = np.concatenate([b["frames"].numpy() for b in ds])
    assert frames.tolist() == [sequence_frames(i) for i in range(N)]


def test_as_tuple_returns_the_feature_lists(files, caplog):
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        ds = tfrecord.dataset(files[""], BATCH, schema=DECLARED, as_tuple=("rgb", "id"))
    (warning,) = [r.getMessage() for r in caplog.records if r.name == SCHEMA_LOGGER]
    assert "it holds the feature lists ['audio'], which the schema leaves out" in warning
    rgb, ids = next(iter(ds))
    assert isinstance(rgb, tf.RaggedTensor) and rgb.shape.as_list() == [BATCH, None, 8]
    assert ids.numpy().tolist() == list(range(BATCH))
    assert rgb.row_lengths().numpy().tolist() == [sequence_frames(i) for i in range(BATCH)]


@pytest.mark.parametrize("pipeline", ["streamed", "memory_decoded", "queue"])
def test_pad_to_pads_and_cuts_the_frames(files, pipeline):
    pad_to = {"rgb": 12, "audio": "longest"}
    padding = tfrecord.ReadConfig(padding_values={"audio": -1.0})
    first = PIPELINES[pipeline](files[""], pad_to=pad_to, read_config=padding)[0]
    rgb, audio = np.asarray(first["rgb"]), np.asarray(first["audio"])
    frames = [sequence_frames(i) for i in _flat(first["id"])[0].tolist()]
    assert rgb.shape == (BATCH, 12, 8) and audio.shape == (BATCH, max(frames), 4)
    for row, count in enumerate(frames):
        written = sequence_values(int(_flat(first["id"])[0][row]), count)
        np.testing.assert_array_equal(rgb[row, : min(count, 12)], written["rgb"][:12])
        assert not rgb[row, count:].any()  # padded with 0
        np.testing.assert_array_equal(audio[row, :count], written["audio"])
        assert (audio[row, count:] == -1.0).all()


def test_pad_to_an_integer_gives_every_feature_list_a_fixed_shape(files):
    ds = tfrecord.dataset(files[""], BATCH, schema=DECLARED, pad_to=10, drop_remainder=True)
    assert ds.element_spec["rgb"].shape.as_list() == [BATCH, 10, 8]
    assert ds.element_spec["audio"].shape.as_list() == [BATCH, 10, 4]
    assert ds.element_spec["labels"].shape.as_list() == [BATCH, 10]


@pytest.mark.parametrize("pipeline", ["streamed", "memory_decoded"])
def test_buckets_hold_examples_of_about_the_same_frame_count(files, pipeline):
    boundaries = [10, 20, 30]
    read = PIPELINES[pipeline](
        files[""], shuffle=64, bucket_boundaries=boundaries, bucket_by="audio"
    )
    ranges = []
    for batch in read:
        counts = _flat(batch["audio"])[1]
        if pipeline == "memory_decoded":  # in memory, one bucket a batch
            buckets = np.searchsorted(boundaries, counts, side="right")
            assert len(set(buckets.tolist())) == 1, counts
        ranges.append((min(counts), max(counts)))
    if pipeline == "streamed":  # one pool sorted by frame count (300 < 32 batches)
        ranges.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), ranges
    _assert_read_as_written(_summary_of_read(read), files["values"])


def test_bucket_by_must_be_named_among_several_feature_lists(files):
    with pytest.raises(ValueError, match="several features vary in length"):
        tfrecord.dataset(files[""], BATCH, schema=DECLARED, bucket_boundaries=[10])


# --- never silent: warnings and errors ---------------------------------------------------


def test_reading_with_a_schema_that_leaves_out_a_feature_list_warns(files, caplog):
    schema = DECLARED.select(["id", "labels", "rgb"])
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        tfrecord.dataset(files[""], BATCH, schema=schema)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == SCHEMA_LOGGER]
    assert warning.startswith("Record 0 of file '") and "videos.tfrecord" in warning
    assert "['audio'], which the schema leaves out and the reader will not return" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=SCHEMA_LOGGER):
        tfrecord.dataset(files[""], BATCH, schema=DECLARED)
        tfrecord.dataset(files[""], BATCH)  # inferred: every feature list
    assert not [r for r in caplog.records if r.name == SCHEMA_LOGGER]


@pytest.mark.parametrize("content", ["serialize_tensor", "raw"])
@pytest.mark.parametrize("reader", ["dataset", "read_batches"])
def test_records_that_are_no_protos_are_an_error_naming_the_file(tmp_path, content, reader):
    if content == "serialize_tensor":
        records = [tf.io.serialize_tensor(tf.fill([2, 3], float(i))).numpy() for i in range(4)]
        found = "of a serialized TensorProto of dtype float32 and shape \\[2, 3\\]"
    else:
        records = [np.random.default_rng(i).bytes(64) for i in range(4)]
        found = "that do not parse as a protocol buffer"
    path = write_records(tmp_path / "tensors.tfrecord", records)
    schema = Schema([Feature("x", "float32", (None,))])  # declared: no inference to fail
    message = rf"Record 0 of file '.*tensors.tfrecord' is not a tf.train.Example .* found .*{found}"
    with pytest.raises(tfrecord.CorruptRecordError, match=message) as info:
        if reader == "dataset":
            tfrecord.dataset(path, 4, schema=schema)
        else:
            with tf.Graph().as_default():
                tfrecord.read_batches(path, 4, schema=schema)
    assert info.value.file == path


def test_feature_lists_of_frames_of_varying_length_are_held_in_memory_in_two_levels(tmp_path):
    records = []
    for i in range(4):
        sequence = tf.train.SequenceExample()
        tokens = sequence.feature_lists.feature_list["tokens"]
        for length in (1, 3 + i)[: 1 + i % 2]:
            tokens.feature.add().int64_list.value.extend(range(length))
        records.append(sequence.SerializeToString())
    path = write_records(tmp_path / "tokens.tfrecord", records)
    schema = Schema([Feature("tokens", "int64", (None,), sequence=True)])
    (streamed,) = tfrecord.dataset(path, 4, schema=schema)
    (held,) = tfrecord.dataset(path, 4, schema=schema, in_memory=True)
    assert streamed["tokens"].to_list() == [
        [[0]],
        [[0], [0, 1, 2, 3]],
        [[0]],
        [[0], [0, 1, 2, 3, 4, 5]],
    ]
    assert held["tokens"].ragged_rank == 2
    assert held["tokens"].to_list() == streamed["tokens"].to_list()


# --- the loops train on feature lists ------------------------------------------------------


class EpochCounts(Hook):
    def begin(self) -> None:
        self.counts: list[tuple[int, int]] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.counts.append((self.loop.epoch_steps, self.loop.epoch_examples))


def _mean_rgb(batch: Any) -> Any:
    """Each record's rgb averaged over its frames: ``[batch, 8]`` (0 for no frames)."""
    rgb = tf.cast(batch["rgb"], tf.float32) / 255.0
    return tf.math.divide_no_nan(
        tf.reduce_sum(rgb, axis=1), tf.cast(rgb.row_lengths(), tf.float32)[:, None]
    )


@pytest.mark.slow  # trains; about 1 s of CPU
def test_function_loop_trains_on_a_feature_list_in_memory(files):
    ds = tfrecord.dataset(files[""], 32, schema=DECLARED, in_memory=True, shuffle="global")
    weights = tf.Variable(tf.zeros([8, 1]))

    def step(batch: Any) -> dict[str, Any]:
        target = tf.cast(batch["id"] % 2, tf.float32)[:, None]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(_mean_rgb(batch) @ weights - target))
        weights.assign_sub(0.1 * tape.gradient(loss, weights))
        return {"loss": loss}

    counter = EpochCounts()
    FunctionLoop(ds, step_fn=step, hooks=[counter], handle_signals=False).run(epochs=2)
    assert counter.counts == [(10, N)] * 2  # 9 batches of 32 and one of 12, each epoch
    assert float(tf.reduce_sum(tf.abs(weights))) > 0


@pytest.mark.slow
def test_session_loop_counts_examples_of_feature_list_batches(files):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        # the batch size comes from the first tensor: here the ragged rgb
        batches = tfrecord.read_batches(files[""], 32, schema=DECLARED, as_tuple=("rgb", "id"))
        rgb, ids = batches.tensors
        weights = v1.get_variable("w", [8, 1], initializer=v1.zeros_initializer())
        target = tf.cast(ids % 2, tf.float32)[:, None]
        loss = tf.reduce_mean(tf.square(_mean_rgb({"rgb": rgb}) @ weights - target))
        step = v1.train.get_or_create_global_step()
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        counter = EpochCounts()
        loop = tfr_hooks.SessionLoop(
            train,
            fetches={"loss": loss},
            hooks=[counter],
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        loop.run(epochs=2)
    assert counter.counts == [(10, N)] * 2
