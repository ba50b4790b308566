"""Directories that TensorFlow Datasets itself prepared, read as TFDS meant them (issue 37).

Each layout (PNG and JPEG images with a ClassLabel, an ``objects`` sequence of boxes,
variable-length tokens, RLDS episodes, a sequence of sequences) is written by TFDS 4.9's
own ``download_and_prepare`` (``tests/_tfds_builders.py``), then read back: the values
must equal those written, and those TFDS's own reader
(``tfds.builder_from_directory(...).as_dataset``) returns.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import _tfds_builders as builders
import tfr_hooks
from _tfrecord_data import new_session, run_graph_batches, write_records
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles
from tfr_hooks.tfrecord.schema.decoding import parse_batch, stored_schema
from tfr_hooks.tfrecord.sources.base import open_source, resolve_files
from tfr_hooks.tfrecord.sources.tfds import TfdsSource

BATCH = 2
SLOW = pytest.mark.slow


@pytest.fixture(scope="session")
def tfds_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every builder of ``_tfds_builders``, prepared once by TFDS: name -> version dir."""
    data_dir = tmp_path_factory.mktemp("tfds")
    return {name: builders.prepare(name, data_dir) for name in builders.BUILDERS}


# --- what was written, what TFDS reads, what the package reads, example by example -------


def _leaf(value: Any) -> Any:
    """A written value as the nested lists a decoded tensor's ``tolist()`` gives."""
    if hasattr(value, "_fields"):  # tfds.features.BBox: stored as float32
        return np.asarray(tuple(value), np.float32).tolist()
    if isinstance(value, (list, tuple)):
        return [_leaf(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, float):
        return float(np.float32(value))
    if isinstance(value, str):
        return value.encode()
    return value


def _flat_written(example: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in example.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flat_written(value, key + "/"))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            steps = [_flat_written(step) for step in value]
            flat.update({f"{key}/{k}": [s[k] for s in steps] for k in steps[0]})
        else:
            flat[key] = _leaf(value)
    return flat


def _flat_tfds(element: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in element.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flat_tfds(value, key + "/"))
        elif isinstance(value, tf.data.Dataset):  # RLDS steps
            steps = [_flat_tfds(step) for step in value]
            flat.update({f"{key}/{k}": [s[k] for s in steps] for k in steps[0]})
        elif isinstance(value, tf.RaggedTensor):
            flat[key] = value.to_list()
        else:
            flat[key] = np.asarray(value.numpy()).tolist()
    return flat


def _canonical(examples: Iterable[dict[str, Any]]) -> list[str]:
    """The examples as sorted strings: TFDS shuffles the order it writes them in."""
    return sorted(repr(sorted(example.items())) for example in examples)


def _rows(value: Any) -> list[Any]:
    """A fetched batch value (eager, or from a session) as one list per example."""
    if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        return value.to_list()
    return np.asarray(value).tolist()


def _examples(batches: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for batch in batches:
        rows = {name: _rows(value) for name, value in batch.items()}
        size = len(next(iter(rows.values())))
        found.extend({name: rows[name][i] for name in rows} for i in range(size))
    return found


def _written(name: str, split: str) -> list[dict[str, Any]]:
    builder = builders.BUILDERS[name]
    n = builder.splits[split]
    offset = 0 if split == "train" else 100
    return [_flat_written(builder.example(builder, i + offset)) for i in range(n)]


@functools.cache
def _tfds_canonical(directory: str, split: str) -> tuple[str, ...]:
    """What TFDS's own reader reads, example by example (read once per split)."""
    data = tfds.builder_from_directory(directory).as_dataset(split=split)
    return tuple(_canonical(_flat_tfds(element) for element in data))


LAYOUTS = ["digits_png", "photos_jpeg", "detection", "tokens", "episodes", "nested"]
LOSSY = {"photos_jpeg": "photo"}  # JPEG: compared with TFDS's decode, and by shape here


def _assert_read_as_written(read: list[dict[str, Any]], name: str, directory: str) -> None:
    split = "train"
    assert tuple(_canonical(read)) == _tfds_canonical(directory, split)
    written = _written(name, split)
    lossy = LOSSY.get(name)
    if lossy is not None:
        shapes = sorted(np.shape(example.pop(lossy)) for example in read)
        assert shapes == sorted(np.shape(example.pop(lossy)) for example in written)
    assert _canonical(read) == _canonical(written)


@pytest.mark.parametrize("name", LAYOUTS)
def test_each_layout_streams_the_values_written(tfds_dirs, name):
    read = _examples(tfrecord.dataset(tfds_dirs[name], BATCH))
    _assert_read_as_written(read, name, tfds_dirs[name])


# in memory: images, boxes and sequences fast; the JPEG, token and nested layouts (about
# 0.3 s of CPU each) with the slow tests (every layout streams in the fast run above)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=SLOW) if n in {"photos_jpeg", "tokens", "nested"} else n
        for n in LAYOUTS
    ],
)
def test_each_layout_reads_the_values_written_in_memory(tfds_dirs, name):
    source = tfrecord.source(tfds_dirs[name], BATCH, in_memory=True)
    assert source.facts.kind is tfrecord.PipelineKind.MEMORY_DECODED
    _assert_read_as_written(_examples(source.dataset), name, tfds_dirs[name])


def test_a_sequence_of_sequences_reads_in_two_ragged_levels(tfds_dirs):
    (batch,) = tfrecord.dataset(tfds_dirs["nested"], 5).take(1)
    paragraphs = batch["paragraphs"]
    assert paragraphs.shape.as_list() == [5, None, None]
    assert paragraphs.ragged_rank == 2
    assert sorted(paragraphs.row_lengths().numpy().tolist()) == [0, 0, 1, 1, 2]
    (held,) = tfrecord.dataset(tfds_dirs["nested"], 5, in_memory=True).take(1)
    assert held["paragraphs"].ragged_rank == 2
    assert held["paragraphs"].shape.as_list() == [5, None, None]


def test_features_get_the_shapes_and_dtypes_of_features_json(tfds_dirs):
    episodes = tfrecord.dataset(tfds_dirs["episodes"], BATCH).element_spec
    assert episodes["steps/observation/image"].shape.as_list() == [None, None, 4, 3, 3]
    assert episodes["steps/observation/image"].dtype == tf.uint8
    assert episodes["steps/action"].shape.as_list() == [None, None, 7]
    assert episodes["steps/is_last"].dtype == tf.bool
    assert episodes["episode_id"].shape.as_list() == [None]
    detection = tfrecord.dataset(tfds_dirs["detection"], BATCH).element_spec
    assert detection["objects/bbox"].shape.as_list() == [None, None, 4]
    assert detection["objects/bbox"].dtype == tf.float32
    photos = tfrecord.dataset(tfds_dirs["photos_jpeg"], BATCH).element_spec
    assert photos["photo"].shape.as_list() == [None, 8, 8, 3]
    assert photos["weights"].shape.as_list() == [None, 2, 3]
    assert photos["caption"].dtype == tf.string


def test_an_image_of_unknown_size_stays_encoded_and_byte_tensors_decode(tfds_dirs, caplog):
    with caplog.at_level(logging.WARNING, logger="tfr_hooks.tfrecord.sources.tfds"):
        (batch,) = tfrecord.dataset(tfds_dirs["extras"], 3).take(1)
    assert "'snapshot'" in caplog.text and "encoded bytes" in caplog.text
    by_mask = {int(m[0]): i for i, m in enumerate(batch["mask"].numpy())}
    assert batch["mask"].dtype == tf.uint8 and sorted(by_mask) == [0, 1, 2]
    for index, row in by_mask.items():
        snapshot = tf.io.decode_png(batch["snapshot"][row]).numpy()
        np.testing.assert_array_equal(snapshot, builders.image(index, (2 + index, 3, 3)))
        np.testing.assert_array_equal(batch["heatmap"][row], np.full((2, 2), index / 4))
    assert batch["heatmap"].dtype == tf.float32


def test_class_label_names_are_kept_on_the_declared_decoding(tfds_dirs):
    facts = tfrecord.source(tfds_dirs["digits_png"], BATCH).facts
    assert facts.decoding.labels == {"label": ("zero", "one", "two")}
    detection = tfrecord.source(tfds_dirs["detection"], BATCH).facts
    assert detection.decoding.labels == {"objects/label": ("cat", "dog")}


def test_the_schema_stays_a_plain_value_and_the_decoding_travels_beside_it(tfds_dirs):
    """The features returned are a plain Schema; how TFDS stored them is a separate value."""
    facts = tfrecord.source(tfds_dirs["digits_png"], BATCH, as_tuple=("label", "image")).facts
    assert type(facts.schema) is tfrecord.Schema
    assert facts.schema.names == ["label", "image"]
    assert facts.schema["image"].dtype == "uint8" and facts.schema["image"].shape == (6, 5, 1)
    stored = stored_schema(facts.schema, facts.decoding)  # what the records hold
    assert stored["image"].dtype == "bytes" and stored["image"].shape == ()
    records = [r.numpy() for r in tf.data.TFRecordDataset(list(facts.files))]
    parsed = parse_batch(facts.schema, tf.constant(records), facts.decoding)
    assert list(parsed) == ["label", "image"]
    assert parsed["image"].shape == (5, 6, 5, 1) and parsed["image"].dtype == tf.uint8


def test_a_data_error_hook_checks_the_tfds_records_as_stored(tfds_dirs):
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tfds_dirs["episodes"], BATCH)
    hook = tfr_hooks.DataErrorHook.for_batches(batches)
    assert hook.schema == stored_schema(batches.facts.schema, batches.facts.decoding)
    assert hook.translate_error(None) is None  # the shards are whole and match


# --- splits, counts, supervised keys --------------------------------------------------------


def test_split_reads_that_split_and_train_is_the_default(tfds_dirs):
    directory = tfds_dirs["tokens"]
    default = _examples(tfrecord.dataset(directory, BATCH))
    assert _canonical(default) == _canonical(_written("tokens", "train"))
    test = _examples(tfrecord.dataset(directory, BATCH, split="test"))
    assert _canonical(test) == _canonical(_written("tokens", "test"))


@pytest.mark.parametrize("in_memory", [False, True])
def test_cardinality_and_examples_are_known_before_the_first_pass(tfds_dirs, in_memory):
    source = tfrecord.source(tfds_dirs["detection"], 2, split="train", in_memory=in_memory)
    assert source.facts.examples == 5
    assert source.facts.steps == 3
    # a Source that can seek asserts no cardinality (a resumed pass is shorter); the
    # plain dataset does, and the loops take the steps from the facts
    plain = tfrecord.dataset(tfds_dirs["detection"], 2, split="train", in_memory=in_memory)
    assert int(plain.cardinality()) == 3
    dropped = tfrecord.dataset(tfds_dirs["detection"], 2, drop_remainder=True, num_epochs=2)
    assert int(dropped.cardinality()) == 5


def test_as_tuple_true_returns_the_supervised_keys(tfds_dirs):
    data = tfrecord.dataset(tfds_dirs["digits_png"], 5, as_tuple=True)
    images, labels = next(iter(data))
    assert images.shape == (5, 6, 5, 1)
    assert sorted(labels.numpy().tolist()) == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match=r"as_tuple=True.*supervised keys.*has none"):
        tfrecord.dataset(tfds_dirs["tokens"], 2, as_tuple=True)


def test_a_dataset_directory_of_one_version_reads_and_of_several_names_them(tfds_dirs, tmp_path):
    dataset_dir = os.path.dirname(tfds_dirs["tokens"])
    assert tfrecord.source(dataset_dir, BATCH).facts.examples == 5
    copy = tmp_path / "tokens"
    shutil.copytree(dataset_dir, copy)
    shutil.copytree(copy / "1.0.0", copy / "1.1.0")
    with pytest.raises(ValueError, match=r"holds the versions \['1.0.0', '1.1.0'\]"):
        tfrecord.dataset(copy, BATCH)


def test_bad_splits_are_errors_naming_the_splits(tfds_dirs, tmp_path):
    directory = tfds_dirs["tokens"]
    with pytest.raises(ValueError, match=r"split='valid'.*|\['train', 'test'\]"):
        tfrecord.dataset(directory, BATCH, split="valid")
    with pytest.raises(ValueError, match=r"slicing.*not supported.*split='train\[:10%\]'"):
        tfrecord.dataset(directory, BATCH, split="train[:10%]")
    path = write_records(tmp_path / "plain.tfrecord", [tf.train.Example().SerializeToString()])
    with pytest.raises(ValueError, match=r"split.*TensorFlow Datasets.*Received: split='train'"):
        tfrecord.dataset(path, BATCH, split="train")
    with pytest.raises(TypeError, match=r"Received: as_tuple=True"):
        tfrecord.dataset(path, BATCH, as_tuple=True)


def _edited_copy(directory: str, tmp_path: Path, name: str, edit: Any) -> Path:
    copy = tmp_path / "copy" / "1.0.0"
    shutil.copytree(directory, copy)
    data = json.loads((copy / name).read_text())
    edit(data)
    (copy / name).write_text(json.dumps(data))
    return copy


def test_a_feature_kind_it_cannot_decode_is_an_error_naming_it(tfds_dirs, tmp_path):
    def to_video(features: dict[str, Any]) -> None:
        label = features["featuresDict"]["features"]["label"]
        label["pythonClassName"] = "tensorflow_datasets.core.features.video_feature.Video"

    copy = _edited_copy(tfds_dirs["digits_png"], tmp_path, "features.json", to_video)
    with pytest.raises(ValueError, match=r"feature 'label'.*is a Video"):
        tfrecord.dataset(copy, BATCH)


def test_a_file_format_it_cannot_read_is_an_error_naming_the_format(tfds_dirs, tmp_path):
    def to_parquet(info: dict[str, Any]) -> None:
        info["fileFormat"] = "parquet"

    copy = _edited_copy(tfds_dirs["tokens"], tmp_path, "dataset_info.json", to_parquet)
    with pytest.raises(ValueError, match=r"fileFormat 'parquet', which the package cannot"):
        tfrecord.dataset(copy, BATCH)


# --- ArrayRecord directories (file_format="array_record", issue 55) -------------------------

ARRAY_LAYOUTS = ["digits_png", "detection", "tokens", "episodes", "nested"]


@pytest.fixture(scope="module")
def tfds_array_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Builders prepared by TFDS with ``file_format="array_record"``: name -> version dir."""
    data_dir = tmp_path_factory.mktemp("tfds_array_record")
    return {name: builders.prepare(name, data_dir, "array_record") for name in ARRAY_LAYOUTS}


def _flat_source(element: Any, prefix: str = "") -> dict[str, Any]:
    """An element of ``tfds.data_source`` as flat keys of nested lists."""
    flat: dict[str, Any] = {}
    for name, value in element.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flat_source(value, key + "/"))
        elif (
            hasattr(value, "__getitem__")
            and hasattr(value, "__len__")
            and not isinstance(value, (list, np.ndarray, bytes, str))
        ):  # a Dataset feature (RLDS steps): a data source of its own
            steps = [_flat_source(value[i]) for i in range(len(value))]
            flat.update({f"{key}/{k}": [s[k] for s in steps] for k in steps[0]})
        else:
            flat[key] = (
                np.asarray(value).tolist()
                if not isinstance(value, list)
                else [np.asarray(v).tolist() for v in value]
            )
    return flat


@pytest.mark.parametrize("name", ARRAY_LAYOUTS)
def test_an_array_record_directory_lists_its_shards_counts_and_features(tfds_array_dirs, name):
    directory = tfds_array_dirs[name]
    for split, size in builders.BUILDERS[name].splits.items():
        source = open_source(directory, split)
        assert isinstance(source, TfdsSource) and source.record_format == "array_record"
        assert [os.path.basename(f) for f in source.files] == [
            f"{name}-{split}.array_record-00000-of-00001"
        ]
        reference = tfds.data_source(name, data_dir=Path(directory).parents[1], split=split)
        assert source.counts() == [size] == [len(reference)]
        assert len(ArrayRecordFiles(source.files)) == size
    assert source.directory.check_files(source.split) == ""  # counts and first records
    assert resolve_files(directory) == sorted(
        os.path.join(directory, f"{name}-{s}.array_record-00000-of-00001")
        for s in builders.BUILDERS[name].splits
    )


@pytest.mark.parametrize("name", ARRAY_LAYOUTS)
def test_array_record_records_decode_to_what_tfds_data_source_gives(
    tfds_array_dirs, tfds_dirs, name
):
    directory = tfds_array_dirs[name]
    source = open_source(directory, "train")
    assert source.directory.schema == open_source(tfds_dirs[name], "train").directory.schema
    assert source.decoding() == open_source(tfds_dirs[name], "train").decoding()
    reference = tfds.data_source(name, data_dir=Path(directory).parents[1], split="train")
    records = ArrayRecordFiles(source.files).read(range(len(reference)))
    schema = source.schema(None, None, "")
    batch = parse_batch(schema, tf.constant(list(records)), source.decoding())
    read = _examples([batch])
    assert read == [_flat_source(reference[i]) for i in range(len(reference))]


def test_the_tfds_labels_and_describe_of_an_array_record_directory(tfds_array_dirs):
    source = open_source(tfds_array_dirs["digits_png"], "train")
    assert source.decoding().labels == {"label": ("zero", "one", "two")}
    assert "5 examples in 1 ArrayRecord shard(s)" in source.describe()
    assert source.to_dict()["tfds"]["file_format"] == "array_record"
    infos = tfrecord.inspect(tfds_array_dirs["digits_png"])  # each shard, by index reads
    found = [(i.record_format, i.num_records) for i in infos]
    assert found == [("array_record", 3), ("array_record", 5)]  # test, train
    assert sorted(infos[0].features) == ["image", "label"]


# images and nested features fast; the boxes' layout (about 0.3 s of CPU) with the slow tests
@pytest.mark.parametrize("name", ["digits_png", pytest.param("detection", marks=SLOW), "nested"])
def test_convert_makes_an_array_record_split_tfrecord_shards_the_readers_read(
    tfds_array_dirs, tmp_path, name
):
    directory = tfds_array_dirs[name]
    result = tfrecord.convert(directory, tmp_path / "out", split="train")
    assert result.num_records == builders.BUILDERS[name].splits["train"]
    reference = tfds.data_source(name, data_dir=Path(directory).parents[1], split="train")
    read = _examples(tfrecord.dataset(tmp_path / "out", BATCH))  # the files' order
    assert read == [_flat_source(reference[i]) for i in range(len(reference))]


def _data_source(directory: str, name: str, split: str = "train") -> list[dict[str, Any]]:
    reference = tfds.data_source(name, data_dir=Path(directory).parents[1], split=split)
    return [_flat_source(reference[i]) for i in range(len(reference))]


@pytest.mark.parametrize(
    ("name", "options"),
    [  # three layouts streamed, the orders on two layouts (the other cells in CI; every
        # layout's records decode as tfds.data_source's in the fast run above)
        *[
            pytest.param(n, {}, id=f"{n}-streamed", marks=[SLOW] * (n in {"detection", "tokens"}))
            for n in ARRAY_LAYOUTS
        ],
        pytest.param("digits_png", {"shuffle": "global", "seed": 3}, id="digits-global"),
        pytest.param("detection", {"shuffle": 4, "seed": 1}, id="detection-buffer", marks=SLOW),
        pytest.param("detection", {"in_memory": True}, id="detection-memory", marks=SLOW),
        pytest.param("nested", {"shuffle": "global", "seed": 2}, id="nested-global", marks=SLOW),
        pytest.param("episodes", {"in_memory": True}, id="episodes-memory", marks=SLOW),
    ],
)
def test_an_array_record_split_reads_what_tfds_data_source_gives(tfds_array_dirs, name, options):
    directory = tfds_array_dirs[name]
    read = _examples(tfrecord.dataset(directory, BATCH, split="train", **options))
    assert _canonical(read) == _canonical(_data_source(directory, name))  # each once
    if not options:  # one shard, unshuffled: the shard's order
        assert read == _data_source(directory, name)


def test_an_array_record_split_reads_each_example_once_an_epoch_in_the_global_order(
    tfds_array_dirs,
):
    directory = tfds_array_dirs["tokens"]
    expected = _canonical(_data_source(directory, "tokens", "test"))
    data = tfrecord.dataset(directory, 1, split="test", shuffle="global", seed=5, num_epochs=2)
    read = _examples(data)
    half = len(read) // 2
    assert _canonical(read[:half]) == _canonical(read[half:]) == expected


@pytest.mark.parametrize(
    "options",
    [{"shuffle": "global", "seed": 1}, pytest.param({"in_memory": True}, marks=pytest.mark.slow)],
)
def test_function_loop_runs_an_array_record_split_with_exact_epochs(tfds_array_dirs, options):
    source = tfrecord.source(tfds_array_dirs["detection"], 2, **options)
    counter = _EpochExamples()

    def step(batch: Any) -> dict[str, Any]:
        return {"total": _touch(batch)}

    FunctionLoop(source, step_fn=step, hooks=[counter], handle_signals=False).run(epochs=2)
    n = builders.BUILDERS["detection"].splits["train"]
    assert counter.examples == [n, n]


@pytest.mark.slow  # a graph-mode SessionLoop a case (the FunctionLoop case stays fast)
@pytest.mark.parametrize("options", [{"shuffle": "global", "seed": 1}, {"shuffle": 4}])
def test_session_loop_runs_an_array_record_split_with_exact_epochs(tfds_array_dirs, options):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tfds_array_dirs["episodes"], 2, **options)
        total = v1.get_variable("total", [], initializer=v1.zeros_initializer())
        train = total.assign_add(_touch(batches.tensors))
        counter = _EpochExamples()
        loop = tfr_hooks.SessionLoop(
            train, hooks=[counter], data=batches, run_timeout_secs=60, handle_signals=False
        )
        loop.run(epochs=2)
    n = builders.BUILDERS["episodes"].splits["train"]
    assert counter.examples == [n, n]


def test_read_batches_reads_an_array_record_split_in_graph_mode(tfds_array_dirs):
    directory = tfds_array_dirs["nested"]
    read = _graph_read(directory, shuffle="global", seed=4)
    assert _canonical(read) == _canonical(_data_source(directory, "nested"))


def test_the_tf_data_service_refuses_an_array_record_split_clearly(tfds_array_dirs):
    with pytest.raises(ValueError, match=r"ArrayRecord files are read through tf.numpy_function"):
        tfrecord.dataset(tfds_array_dirs["tokens"], BATCH, service="grpc://127.0.0.1:1")


# --- both loops ----------------------------------------------------------------------------


class _EpochExamples(tfr_hooks.Hook):
    def __init__(self) -> None:
        self.examples: list[int] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.examples.append(self.loop.epoch_examples)


@pytest.mark.parametrize("in_memory", [False, True])
def test_function_loop_trains_on_a_tfds_image_directory(tfds_dirs, in_memory):
    source = tfrecord.source(
        tfds_dirs["digits_png"],
        2,
        as_tuple=True,
        in_memory=in_memory,
        shuffle="global" if in_memory else 5,
    )
    weights = tf.Variable(tf.zeros([30, 3]))

    def step(batch: Any) -> dict[str, Any]:
        images, labels = batch
        x = tf.reshape(tf.cast(images, tf.float32) / 255.0, [-1, 30])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(labels, x @ weights, True)
            )
        weights.assign_sub(0.1 * tape.gradient(loss, weights))
        return {"loss": loss}

    counter = _EpochExamples()
    loop = FunctionLoop(source, step_fn=step, hooks=[counter], handle_signals=False)
    loop.run(epochs=2)
    assert counter.examples == [5, 5]
    assert float(tf.reduce_sum(tf.abs(weights))) > 0


def _touch(batch: dict[str, Any]) -> Any:
    """A number that depends on every numeric feature of the batch (strings aside)."""
    total = tf.constant(0.0)
    for value in batch.values():
        if value.dtype != tf.string:
            flat = value.flat_values if isinstance(value, tf.RaggedTensor) else value
            total += tf.reduce_sum(tf.cast(flat, tf.float32))
    return total


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.slow  # trains on 6 layouts; the streamed reads stay in the fast run; about 3 s of CPU
def test_function_loop_runs_each_layout_in_memory_with_exact_epochs(tfds_dirs, name):
    source = tfrecord.source(tfds_dirs[name], 2, in_memory=True, shuffle="global")
    counter = _EpochExamples()

    def step(batch: Any) -> dict[str, Any]:
        return {"total": _touch(batch)}

    FunctionLoop(source, step_fn=step, hooks=[counter], handle_signals=False).run(epochs=2)
    n = builders.BUILDERS[name].splits["train"]
    assert counter.examples == [n, n]


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.slow  # trains on 6 layouts; about 2 s of CPU
@pytest.mark.range_ends
def test_session_loop_runs_each_layout_streamed_with_exact_epochs(tfds_dirs, name):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tfds_dirs[name], 2, shuffle=4)
        total = v1.get_variable("total", [], initializer=v1.zeros_initializer())
        train = total.assign_add(_touch(batches.tensors))
        counter = _EpochExamples()
        loop = tfr_hooks.SessionLoop(
            train, hooks=[counter], data=batches, run_timeout_secs=60, handle_signals=False
        )
        loop.run(epochs=2)
    n = builders.BUILDERS[name].splits["train"]
    assert counter.examples == [n, n]


def _graph_read(directory: str, **kwargs: Any) -> list[dict[str, Any]]:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(directory, BATCH, **kwargs)
        with new_session() as session:
            return _examples(run_graph_batches(session, batches.tensors, batches.initializers))


@pytest.mark.parametrize(
    "kwargs", [{}, {"in_memory": True}, {"pipeline": "queue"}], ids=["dataset", "memory", "queue"]
)
@pytest.mark.slow  # graph-mode pipelines; about 2 s of CPU
def test_read_batches_reads_rlds_episodes_in_graph_mode(tfds_dirs, kwargs):
    read = _graph_read(tfds_dirs["episodes"], **kwargs)
    _assert_read_as_written(read, "episodes", tfds_dirs["episodes"])


def test_read_batches_holds_a_sequence_of_sequences_in_memory_in_graph_mode(tfds_dirs):
    read = _graph_read(tfds_dirs["nested"], in_memory=True)
    _assert_read_as_written(read, "nested", tfds_dirs["nested"])


def test_session_loop_counts_the_examples_of_a_tfds_split(tfds_dirs):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(tfds_dirs["detection"], 2, split="test")
        boxes = batches.tensors["objects/bbox"]
        total = v1.get_variable("total", [], initializer=v1.zeros_initializer())
        train = total.assign_add(tf.reduce_sum(boxes.flat_values))
        counter = _EpochExamples()
        loop = tfr_hooks.SessionLoop(
            train,
            fetches={"total": total},
            hooks=[counter],
            data=batches,
            run_timeout_secs=60,
            handle_signals=False,
        )
        loop.run(epochs=2)
    assert counter.examples == [3, 3]
    assert batches.facts.examples == 3


@pytest.mark.data_service
@pytest.mark.slow  # the shared service: 3 processes importing TensorFlow, 42 s of CPU
def test_a_tfds_directory_is_read_through_the_tf_data_service(tfds_dirs, shared_service):
    data = tfrecord.dataset(tfds_dirs["detection"], BATCH, service=shared_service)
    _assert_read_as_written(_examples(data), "detection", tfds_dirs["detection"])


# --- the command line and convert ----------------------------------------------------------


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from tfr_hooks import cli

    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_inspect_shows_the_splits_counts_features_and_label_names(tfds_dirs, capsys):
    out = _cli(["inspect", tfds_dirs["detection"]], capsys)
    assert "split train: 5 examples in 1 shard(s)" in out
    assert "split test: 3 examples in 1 shard(s)" in out
    assert "objects/bbox   float32 [batch, None, 4]" in out
    assert "labels (2): cat, dog" in out
    listed = json.loads(_cli(["inspect", "--json", tfds_dirs["digits_png"]], capsys))
    assert listed["splits"] == {
        "train": {"examples": 5, "shards": 1},
        "test": {"examples": 3, "shards": 1},
    }
    assert listed["supervised_keys"] == ["image", "label"]
    label = next(f for f in listed["features"] if f["name"] == "label")
    assert label["labels"] == ["zero", "one", "two"]


@pytest.mark.slow  # times every pipeline; about 1 s of CPU
def test_measure_times_a_tfds_split(tfds_dirs, capsys):
    argv = ["measure", tfds_dirs["digits_png"], "--split", "test", "--batch-size", "2"]
    result = json.loads(_cli([*argv, "--batches", "2", "--json"], capsys))
    assert result["num_examples"] == 3
    assert [os.path.basename(f) for f in result["files"]] == [
        "digits_png-test.tfrecord-00000-of-00001"
    ]
    rates = {r["pipeline"]: r for r in result["rates"]}
    assert rates["streamed"]["examples_per_sec"] > 0
    assert rates["in_memory"]["examples_per_sec"] > 0


@pytest.mark.parametrize(
    "per_record", [1, pytest.param(2, marks=pytest.mark.slow)]
)  # about 1.5 s of CPU each: the fast run converts once
def test_convert_writes_a_tfds_split_decoded(tfds_dirs, tmp_path, capsys, per_record):
    out = tmp_path / "converted"
    argv = ["convert", tfds_dirs["detection"], str(out), "--split", "train", "--no-progress"]
    _cli([*argv, "--examples-per-record", str(per_record)], capsys)
    source = tfrecord.source(out, BATCH)
    assert source.facts.examples == 5 and source.facts.examples_per_record == per_record
    read = _examples(source.dataset)
    _assert_read_as_written(read, "detection", tfds_dirs["detection"])


def test_the_labels_files_are_no_records_to_inspect(tfds_dirs):
    infos = tfrecord.inspect(tfds_dirs["digits_png"])
    assert sorted(os.path.basename(i.path) for i in infos) == [
        "digits_png-test.tfrecord-00000-of-00001",
        "digits_png-train.tfrecord-00000-of-00001",
    ]
    assert sum(info.num_records for info in infos) == 8


@pytest.mark.parametrize("in_memory", [False, True])
def test_a_damaged_record_of_a_tfds_shard_is_skipped_and_counted(tfds_dirs, tmp_path, in_memory):
    copy = tmp_path / "tokens" / "1.0.0"
    shutil.copytree(tfds_dirs["tokens"], copy)
    (shard,) = sorted(copy.glob("*-train.tfrecord-*"))
    data = bytearray(shard.read_bytes())
    length = int.from_bytes(data[:8], "little")  # the first record: 8 + 4 + length + 4
    data[12 + length + 4 + 12 + 1] ^= 0x5A  # a byte of the second record's data
    shard.write_bytes(bytes(data))
    with pytest.raises((tfrecord.CorruptRecordError, tf.errors.DataLossError)):
        _examples(tfrecord.dataset(str(copy), BATCH, in_memory=in_memory))  # by default
    source = tfrecord.source(str(copy), BATCH, in_memory=in_memory, max_corrupt_records=1)
    written = _canonical(_written("tokens", "train"))
    assert [(r.file, r.index) for r in source.facts.corrupt_records] == [(str(shard), 1)]
    assert source.facts.examples == len(written) - 1  # known before the first pass
    read = _canonical(_examples(source.dataset))
    assert len(read) == len(written) - 1 and set(read) < set(written)
