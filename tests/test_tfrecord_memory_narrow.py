"""In memory, a ``map_fn`` that casts ``uint8`` images to float and scales them is held as
``uint8`` and cast each batch (issue 46): the values a user gets are the same, exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.pipelines.memory import build, serve
from tfr_hooks.tfrecord.pipelines.memory.narrow import narrowing

COUNT, SIDE = 50, 6
FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def _decoded(example: dict[str, Any]) -> Any:
    return tf.ensure_shape(tf.io.decode_png(example["image"], channels=3), [SIDE, SIDE, 3])


#: map_fn's last step -> whether the package holds the uint8 image for it
FINISHES: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "divided": (lambda img: tf.cast(img, tf.float32) / 255, True),
    "multiplied_first": (
        lambda img: tf.constant(1 / 255, tf.float32) * tf.cast(img, tf.float32),
        True,
    ),
    # the constant first, where the order matters: widened as x / 255, the values differ
    "divided_first": (lambda img: 255.0 / tf.cast(img, tf.float32), True),
    "convert_image_dtype": (lambda img: tf.image.convert_image_dtype(img, tf.float32), True),
    "cast_only": (lambda img: tf.cast(img, tf.float16), True),
    # decode_png's shape as TensorFlow knows it without ensure_shape: [None, None, 3]
    "shape_unknown": (lambda img: tf.cast(tf.reshape(img, tf.shape(img)), tf.float32) / 255, True),
    "centred": (lambda img: tf.cast(img, tf.float32) / 255 - 0.5, False),
    "per_channel": (
        lambda img: tf.cast(img, tf.float32) / tf.constant([255.0, 128.0, 64.0]),
        False,
    ),
}


def _map_fn(finish: Callable[[Any], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda example: {"image": finish(_decoded(example)), "label": example["label"]}


@pytest.fixture(scope="module")
def pngs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """50 random PNG images (0 and 255 among the values) by a plain TFRecordWriter."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (COUNT, SIDE, SIDE, 3), dtype=np.uint8)
    images[0], images[1] = 0, 255
    path = str(tmp_path_factory.mktemp("pngs") / "images.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for label, image in enumerate(images):
            feature = {
                "image": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])
                ),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return path


def _expected(path: str, map_fn: Callable[[dict[str, Any]], dict[str, Any]]) -> np.ndarray:
    """map_fn on each example, one at a time, eagerly: what a user computes by hand."""
    images = []
    for record in tf.data.TFRecordDataset(path):
        images.append(map_fn(tf.io.parse_single_example(record, FEATURES))["image"].numpy())
    return np.stack(images)


@pytest.fixture(scope="module")
def expected_images(pngs: str) -> dict[str, np.ndarray]:
    """Each finish's images by :func:`_expected`, computed once for the module's tests."""
    return {finish: _expected(pngs, _map_fn(fn)) for finish, (fn, _) in FINISHES.items()}


#: the finishes whose exact values the fast run checks through the whole pipeline: one that
#: narrows, the constant-first division, one whose shape TensorFlow does not know and one
#: held as floats (the unit test of ``narrowing`` below checks every finish's values fast)
WHOLE_FAST = ("divided", "divided_first", "shape_unknown", "centred")
#: those also checked batch by batch in the fast run
BY_BATCH_FAST = ("divided", "divided_first")
#: the finishes the pipeline's wiring is checked with in the fast run (one held as uint8,
#: one not); the unit test of ``narrowing`` below checks every finish fast
WIRING_FAST = ("divided", "centred")


def _whole_and_by_batch() -> list[Any]:
    cases = []
    for finish in FINISHES:
        marks = () if finish in WHOLE_FAST else (pytest.mark.slow,)
        cases.append(pytest.param(finish, True, id=f"{finish}-gathered_whole", marks=marks))
        marks = () if finish in BY_BATCH_FAST else (pytest.mark.slow,)
        cases.append(pytest.param(finish, False, id=f"{finish}-gathered_by_batch", marks=marks))
    return cases


@pytest.mark.parametrize(("finish", "whole"), _whole_and_by_batch())
def test_in_memory_float_images_equal_map_fn_values_exactly(
    pngs: str,
    expected_images: dict[str, np.ndarray],
    finish: str,
    whole: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not whole:  # as data over WHOLE_PASS_BYTES: each batch gathered on its own
        monkeypatch.setattr(serve, "WHOLE_PASS_BYTES", 0)
    map_fn = _map_fn(FINISHES[finish][0])
    expected = expected_images[finish]
    data = tfrecord.dataset([pngs], 8, in_memory=True, shuffle=None, num_epochs=1, map_fn=map_fn)
    assert data.element_spec["image"].dtype == expected.dtype
    batches = list(data)
    assert [len(b["label"]) for b in batches] == [8] * 6 + [2]
    images = np.concatenate([b["image"].numpy() for b in batches])
    labels = np.concatenate([b["label"].numpy() for b in batches])
    np.testing.assert_array_equal(labels, np.arange(COUNT))
    assert images.dtype == expected.dtype
    assert np.array_equal(images.view(np.uint8), expected.view(np.uint8))  # bit for bit


@pytest.mark.parametrize(
    "finish",
    [pytest.param(f, marks=() if f in WIRING_FAST else pytest.mark.slow) for f in FINISHES],
)
def test_in_memory_pipeline_holds_uint8_where_map_fn_casts_and_scales(
    pngs: str, finish: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the pipeline serves from: the arrays handed to memory_dataset (the real one)
    held: list[dict[str, Any]] = []

    def serving(arrays: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        held.append(dict(arrays))
        return pipeline_memory_dataset(arrays, *args, **kwargs)

    pipeline_memory_dataset = build.memory_dataset
    monkeypatch.setattr(build, "memory_dataset", serving)
    fn, narrows = FINISHES[finish]
    data = tfrecord.dataset(
        [pngs], 8, in_memory=True, shuffle=None, num_epochs=1, map_fn=_map_fn(fn)
    )
    assert data.element_spec["image"].dtype != tf.uint8  # served as map_fn returns it
    [arrays] = held
    image = np.asarray(arrays["image"])
    # a quarter of the floats' bytes where map_fn only casts and scales
    assert image.dtype == (np.uint8 if narrows else np.float32)
    assert image.nbytes == COUNT * SIDE * SIDE * 3 * (1 if narrows else 4)


def test_shuffled_float_images_in_memory_are_the_same_values_as_tuples(
    pngs: str, expected_images: dict[str, np.ndarray]
) -> None:
    map_fn = _map_fn(FINISHES["divided"][0])
    expected = expected_images["divided"]
    data = tfrecord.dataset(
        [pngs], 16, in_memory=True, shuffle="global", seed=5, num_epochs=2, map_fn=map_fn,
        as_tuple=("image", "label"),
    )  # fmt: skip
    seen = [(x.numpy(), y.numpy()) for x, y in data]
    labels = np.concatenate([y for _, y in seen])
    assert sorted(labels[:COUNT]) == list(range(COUNT))  # each example once an epoch
    assert not np.array_equal(labels[:COUNT], np.arange(COUNT))  # shuffled
    for images, ys in seen:
        assert np.array_equal(images.view(np.uint8), expected[ys].view(np.uint8))


@pytest.mark.parametrize("finish", list(FINISHES))
def test_narrowing_holds_uint8_only_where_map_fn_casts_and_scales(
    pngs: str, expected_images: dict[str, np.ndarray], finish: str
) -> None:
    fn, narrows = FINISHES[finish]
    narrowed, widen = narrowing(_map_fn(fn))
    parsed = tf.data.TFRecordDataset(pngs).map(lambda r: tf.io.parse_single_example(r, FEATURES))
    held = parsed.map(narrowed)
    assert held.element_spec["image"].dtype == (tf.uint8 if narrows else tf.float32)
    assert ("image" in widen.features) is narrows and "label" not in widen.features
    batch = next(iter(held.batch(COUNT)))
    served = widen(batch)["image"].numpy()
    expected = expected_images[finish]
    assert np.array_equal(served.view(np.uint8), expected.view(np.uint8))


def test_graph_mode_serves_the_same_float_images(
    pngs: str, expected_images: dict[str, np.ndarray]
) -> None:
    map_fn = _map_fn(FINISHES["divided"][0])
    expected = expected_images["divided"]
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            [pngs], 8, in_memory=True, shuffle=None, num_epochs=1, map_fn=map_fn
        )
        images = []
        with tf.compat.v1.Session() as session:
            session.run(batches.initializers)
            with pytest.raises(tf.errors.OutOfRangeError):
                while True:
                    images.append(session.run(batches.tensors["image"]))
    got = np.concatenate(images)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.slow  # 2,000 images loaded under tracemalloc: several s of CPU; the tests
# above check that uint8 is what is held
def test_float_images_are_held_in_a_quarter_of_the_memory(tmp_path: Path) -> None:
    # what holding uint8 is for: the floats map_fn returns are never all in memory at once
    import tracemalloc

    count, side = 2000, 32
    images = np.random.default_rng(0).integers(0, 256, (count, side, side, 3), dtype=np.uint8)
    path = str(tmp_path / "images.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for label, image in enumerate(images):
            feature = {
                "image": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])
                ),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())

    def map_fn(example: dict[str, Any]) -> dict[str, Any]:
        image = tf.io.decode_png(example["image"], channels=3)
        return {"image": tf.cast(image, tf.float32) / 255, "label": example["label"]}

    floats = images.size * 4
    tracemalloc.start()
    try:
        data = tfrecord.dataset([path], 100, in_memory=True, shuffle=None, map_fn=map_fn)
        _, peak = tracemalloc.get_traced_memory()  # numpy's buffers: the held arrays
    finally:
        tracemalloc.stop()
    assert peak < 0.8 * floats, (peak, floats)  # held as floats: at least 1.0x
    first = next(iter(data))["image"].numpy()
    assert first.dtype == np.float32
    np.testing.assert_array_equal(first, images[:100].astype(np.float32) / 255)
