"""Variable-length features on every pipeline, in both modes (issue 19 item 2).

Every file here is written with a plain ``tf.io.TFRecordWriter`` in the layouts real
producers use: TensorFlow's image layout (``image/encoded`` JPEG or PNG bytes,
``image/class/label``, variable-length ``image/object/bbox/label`` int lists and
``image/object/bbox/xmin`` float lists, absent from some records), GZIP-compressed,
and token-id sequences of long-tailed lengths. Each example carries an ``id`` so a test
can check that every example is read once per epoch with its own values.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from _tfrecord_data import (
    bytes_feature,
    example,
    float_feature,
    int64_feature,
    new_session,
    run_graph_batches,
    write_records,
)
from tfr_hooks import tfrecord

IMAGES = 60
SIDE = 8
TEXTS = 300
BATCH = 16


def _image(i: int) -> np.ndarray:
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    return np.stack([(x * 30 + i) % 256, (y * 30) % 256, np.full_like(x, i % 256)], -1).astype(
        np.uint8
    )


def boxes(i: int) -> list[int]:
    """Example ``i``'s box labels: none for every fifth (the feature is then absent)."""
    return [] if i % 5 == 0 else [(i + k) % 7 for k in range(i % 4 + 1)]


#: Codec -> each image as its decoder returns it (PNG is lossless, JPEG is not).
ENCODED: dict[str, list[np.ndarray]] = {}


def write_images(path: Path, codec: str) -> str:
    encode = tf.io.encode_png if codec == "png" else tf.io.encode_jpeg
    records = []
    ENCODED[codec] = []
    for i in range(IMAGES):
        encoded = encode(_image(i)).numpy()
        ENCODED[codec].append(tf.io.decode_image(encoded, channels=3).numpy())
        if codec == "png":
            np.testing.assert_array_equal(ENCODED[codec][-1], _image(i))
        features = {
            "image/encoded": bytes_feature([encoded]),
            "image/format": bytes_feature([codec.encode()]),
            "image/class/label": int64_feature([i % 3]),
            "id": int64_feature([i]),
        }
        if boxes(i):  # producers leave the key out for an image without boxes
            features["image/object/bbox/label"] = int64_feature(boxes(i))
            features["image/object/bbox/xmin"] = float_feature([b / 10 for b in boxes(i)])
        records.append(example(**features))
    return write_records(path, records, compression="GZIP")


@pytest.fixture(scope="module", params=["jpeg", "png"])
def images(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp(request.param)
    return write_images(folder / "images.tfrecord.gz", request.param)


def decode(ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    image = tf.io.decode_image(ex["image/encoded"], channels=3, expand_animations=False)
    image.set_shape([SIDE, SIDE, 3])
    return {
        "image": image,
        "label": ex["image/class/label"],
        "boxes": ex["image/object/bbox/label"],
        "xmin": ex["image/object/bbox/xmin"],
        "id": ex["id"],
    }


def rows(value: Any) -> list:
    if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        return value.to_list()
    return np.asarray(value).tolist()


def by_id(batches: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each example of the batches, by its ``id``, failing on an example read twice."""
    out: dict[int, dict[str, Any]] = {}
    for batch in batches:
        columns = {name: rows(value) for name, value in batch.items()}
        for k, i in enumerate(columns["id"]):
            assert i not in out, f"example {i} read twice in one epoch"
            out[i] = {name: values[k] for name, values in columns.items()}
    return out


def check_images(found: dict[int, dict[str, Any]], codec: str) -> None:
    assert sorted(found) == list(range(IMAGES))
    for i, ex in found.items():
        assert ex["label"] == i % 3
        assert ex["boxes"] == boxes(i), i
        np.testing.assert_allclose(ex["xmin"], [b / 10 for b in boxes(i)], rtol=1e-6)
        image = np.asarray(ex["image"])
        np.testing.assert_array_equal(image, ENCODED[codec][i])


TF2_PIPELINES = {
    "stream": {},
    "stream-shuffled": {"shuffle": 20, "seed": 1},
    "memory": {"in_memory": True, "shuffle": "global", "seed": 2},
    "auto": {"in_memory": "auto"},
}


# PNG on every pipeline; JPEG streamed and in memory (its shuffled stream and "auto", about
# 0.5 s of CPU each, with the slow tests)
@pytest.mark.parametrize(
    ("images", "pipeline"),
    [
        pytest.param(
            codec,
            pipeline,
            id=f"{codec}-{pipeline}",
            marks=[pytest.mark.slow]
            * (codec == "jpeg" and pipeline in {"auto", "stream-shuffled"}),
        )
        for codec in ("jpeg", "png")
        for pipeline in sorted(TF2_PIPELINES)
    ],
    indirect=["images"],
)
def test_images_with_box_lists_read_on_every_tf2_pipeline(images, pipeline):
    codec = "png" if "png" in str(Path(images).parent.name) else "jpeg"
    data = tfrecord.dataset(images, BATCH, map_fn=decode, **TF2_PIPELINES[pipeline])
    for _ in range(2):  # every epoch: each example once, with its own lists
        check_images(by_id(list(data)), codec)


@pytest.mark.slow  # three pipelines over a conversion; the pixels test below packs too
def test_images_with_box_lists_read_packed_after_convert(images, tmp_path):
    codec = "png" if "png" in str(Path(images).parent.name) else "jpeg"
    tfrecord.convert(images, tmp_path / "packed", examples_per_record=8, compression="gzip")
    for kwargs in ({}, {"shuffle": 24, "seed": 3}, {"in_memory": True}):
        check_images(
            by_id(list(tfrecord.dataset(tmp_path / "packed", BATCH, map_fn=decode, **kwargs))),
            codec,
        )


@pytest.mark.parametrize("pipeline", ["dataset", "memory", "queue", "packed"])
@pytest.mark.slow  # 4 graph-mode pipelines, each in a new graph; about 6 s of CPU
def test_images_with_box_lists_read_in_graph_mode(images, pipeline, tmp_path):
    codec = "png" if "png" in str(Path(images).parent.name) else "jpeg"
    kwargs: dict[str, Any] = {"pipeline": "queue" if pipeline == "queue" else "dataset"}
    if pipeline == "memory":
        kwargs["in_memory"] = True
    if pipeline == "queue":  # a queue parses whole batches: decode them per batch

        def decode_batch(batch: dict[str, Any]) -> dict[str, Any]:
            def one(encoded: Any) -> Any:
                image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
                image.set_shape([SIDE, SIDE, 3])
                return image

            return {
                "image": tf.map_fn(one, batch["image/encoded"], fn_output_signature=tf.uint8),
                "label": batch["image/class/label"],
                "boxes": batch["image/object/bbox/label"],
                "xmin": batch["image/object/bbox/xmin"],
                "id": batch["id"],
            }

        kwargs["batch_map_fn"] = decode_batch
    else:
        kwargs["map_fn"] = decode
    files = images
    if pipeline == "packed":
        files = str(tmp_path / "packed")
        tfrecord.convert(images, files, examples_per_record=8)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(files, BATCH, num_epochs=1, **kwargs)
        assert isinstance(batches.tensors["boxes"], tf.RaggedTensor)
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors, batches.initializers)
    check_images(by_id(results), codec)


# --- token sequences: padding and bucketing -------------------------------------------


def token_lengths(n: int = TEXTS) -> list[int]:
    rng = np.random.default_rng(0)
    return np.clip(rng.lognormal(2.5, 0.9, n).astype(int), 1, 120).tolist()


def tokens_of(i: int, length: int) -> list[int]:
    return [(i * 7 + k) % 97 + 1 for k in range(length)]  # never 0: 0 is the padding


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> str:
    records = [
        example(
            tokens=int64_feature(tokens_of(i, n)),
            label=int64_feature([i % 2]),
            id=int64_feature([i]),
        )
        for i, n in enumerate(token_lengths())
    ]
    return write_records(tmp_path_factory.mktemp("text") / "text.tfrecord", records)


def unpadded(row: list[int]) -> list[int]:
    return [t for t in row if t != 0]


def check_texts(found: dict[int, dict[str, Any]], cut: int | None = None) -> None:
    assert sorted(found) == list(range(TEXTS))
    for i, n in enumerate(token_lengths()):
        want = tokens_of(i, n)[:cut] if cut else tokens_of(i, n)
        assert unpadded(found[i]["tokens"]) == want, i


PIPELINES = {
    "stream": {"shuffle": 64, "seed": 1},
    "memory": {"in_memory": True, "shuffle": "global", "seed": 1},
    "packed": {"shuffle": 64, "seed": 1},
    "packed-memory": {"in_memory": True, "shuffle": "global", "seed": 1},
}


@pytest.fixture(scope="module")
def packed_texts(texts: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("packed") / "text"
    tfrecord.convert(texts, out, examples_per_record=32)
    return str(out)


def source(name: str, texts: str, packed_texts: str) -> str:
    return packed_texts if name.startswith("packed") else texts


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.slow  # every pipeline: about 5 s of CPU (graph-mode padding stays)
def test_ragged_longest_and_fixed_length_batches(texts, packed_texts, pipeline):
    files = source(pipeline, texts, packed_texts)
    ragged = list(tfrecord.dataset(files, BATCH, **PIPELINES[pipeline]))
    assert all(isinstance(b["tokens"], tf.RaggedTensor) for b in ragged)
    check_texts(by_id(ragged))

    longest = list(tfrecord.dataset(files, BATCH, pad_to="longest", **PIPELINES[pipeline]))
    for batch in longest:  # dense, padded to the batch's own longest row, no wider
        lengths = (batch["tokens"].numpy() != 0).sum(axis=1)
        assert batch["tokens"].shape[1] == lengths.max()
    check_texts(by_id(longest))

    fixed = list(tfrecord.dataset(files, BATCH, pad_to=20, **PIPELINES[pipeline]))
    assert all(b["tokens"].shape[1] == 20 for b in fixed)
    check_texts(by_id(fixed), cut=20)  # longer rows are cut to the fixed length


def bucket_index(length: int, boundaries: list[int]) -> int:
    return int(np.searchsorted(boundaries, length, side="right"))


BOUNDARIES = [8, 16, 32, 64]


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.slow  # every pipeline: about 5 s of CPU (other bucketing tests stay)
def test_bucketed_batches_hold_one_bucket_and_waste_less_padding(texts, packed_texts, pipeline):
    files = source(pipeline, texts, packed_texts)
    data = tfrecord.dataset(
        files, BATCH, pad_to="longest", bucket_boundaries=BOUNDARIES, **PIPELINES[pipeline]
    )
    if "memory" in pipeline:  # exact: each bucket's batches, the same every epoch
        counts = np.bincount([bucket_index(n, BOUNDARIES) for n in token_lengths()])
        assert data.cardinality() == sum(-(-int(c) // BATCH) for c in counts)
    padded = bucketed = 0
    for _ in range(2):
        batches = list(data)
        found = by_id(batches)
        check_texts(found)
        ranges = []
        for batch in batches:
            lengths = (batch["tokens"].numpy() != 0).sum(axis=1)
            if "memory" in pipeline:  # in memory every batch holds one bucket
                assert len({bucket_index(int(n), BOUNDARIES) for n in lengths}) == 1
            ranges.append((int(lengths.min()), int(lengths.max())))
            bucketed += int((batch["tokens"].numpy() == 0).sum())
        if "memory" not in pipeline:  # streamed: one sorted pool (all 300 here)
            ranges.sort()
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    for batch in tfrecord.dataset(files, BATCH, pad_to="longest", **PIPELINES[pipeline]):
        padded += 2 * int((batch["tokens"].numpy() == 0).sum())
    assert bucketed < padded / 3


def test_memory_bucketed_epochs_follow_a_fresh_order(texts):
    data = tfrecord.dataset(
        texts, BATCH, in_memory=True, shuffle="global", seed=4, bucket_boundaries=BOUNDARIES
    )
    first, second = ([rows(b["id"]) for b in data] for _ in range(2))
    assert first != second
    assert sorted(map(tuple, first)) != sorted(map(tuple, second))  # batches regrouped too


def test_bucketed_with_drop_remainder_keeps_only_full_batches(texts):
    for kwargs in ({"in_memory": True}, {}):
        batches = list(
            tfrecord.dataset(
                texts, BATCH, drop_remainder=True, bucket_boundaries=BOUNDARIES, **kwargs
            )
        )
        assert all(b["tokens"].shape[0] == BATCH for b in batches)


def test_padding_values_and_a_dict_per_feature(texts):
    batch = next(
        iter(
            tfrecord.dataset(
                texts,
                BATCH,
                pad_to={"tokens": 200},
                read_config=tfrecord.ReadConfig(padding_values={"tokens": -1}),
            )
        )
    )
    tokens = batch["tokens"].numpy()
    assert tokens.shape == (BATCH, 200)
    lengths = token_lengths()[:BATCH]
    for row, n in zip(tokens, lengths, strict=True):
        assert (row[n:] == -1).all() and (row[:n] > 0).all()


@pytest.mark.parametrize("pipeline", ["dataset", "memory", "queue"])
def test_graph_mode_pads_with_the_same_arguments(texts, pipeline):
    kwargs: dict[str, Any] = {"pipeline": "queue" if pipeline == "queue" else "dataset"}
    if pipeline == "memory":
        kwargs.update(in_memory=True, bucket_boundaries=BOUNDARIES)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(texts, BATCH, pad_to="longest", num_epochs=1, **kwargs)
        assert isinstance(batches.tensors["tokens"], tf.Tensor)
        with new_session() as session:
            results = run_graph_batches(session, batches.tensors, batches.initializers)
    check_texts(by_id(results))


def test_map_fn_returning_lists_is_held_in_memory_and_decoded_once(texts):
    calls = []

    def count(x: Any) -> Any:
        calls.append(1)
        return x

    def keep_first_half(ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        tokens = tf.numpy_function(count, [ex["tokens"]], tf.int64, stateful=True)
        tokens.set_shape([None])
        half = tokens[: (tf.shape(tokens)[0] + 1) // 2]
        return {"tokens": half, "id": ex["id"]}

    data = tfrecord.dataset(
        texts,
        BATCH,
        in_memory=True,
        map_fn=keep_first_half,
        bucket_boundaries=[4, 8],
        pad_to="longest",
    )
    for _ in range(3):
        found = by_id(list(data))
        for i, n in enumerate(token_lengths()):
            assert unpadded(found[i]["tokens"]) == tokens_of(i, n)[: (n + 1) // 2]
    assert len(calls) == TEXTS  # once per example, for three epochs
    streamed = by_id(list(tfrecord.dataset(texts, BATCH, map_fn=keep_first_half)))
    assert isinstance(streamed[0]["tokens"], list)
    n = token_lengths()[5]
    assert streamed[5]["tokens"] == tokens_of(5, n)[: (n + 1) // 2]


def test_write_keeps_varying_lists_in_packed_shards(tmp_path):
    rows_in = np.empty(50, dtype=object)
    for i in range(50):
        rows_in[i] = np.arange(i % 6, dtype=np.int32)
    tfrecord.write({"seq": rows_in, "i": np.arange(50)}, tmp_path / "w", examples_per_record=8)
    got = by_id_i(list(tfrecord.dataset(tmp_path / "w", 7)))
    assert got == {i: list(range(i % 6)) for i in range(50)}
    assert tfrecord.load_schema(tmp_path / "w")["seq"].dtype == "int32"


def by_id_i(batches: list[dict[str, Any]]) -> dict[int, list]:
    return {i: r for b in batches for i, r in zip(rows(b["i"]), rows(b["seq"]), strict=True)}


def test_bad_shaping_arguments_are_named(texts):
    with pytest.raises(ValueError, match=r"Expected `pad_to` to be None, 'longest' or a positive"):
        tfrecord.dataset(texts, BATCH, pad_to="max")
    with pytest.raises(ValueError, match=r"Expected `pad_to\['tokens'\]` to be"):
        tfrecord.dataset(texts, BATCH, pad_to={"tokens": 0})
    with pytest.raises(ValueError, match=r"Expected `bucket_boundaries` to be None or increasing"):
        tfrecord.dataset(texts, BATCH, bucket_boundaries=[8, 4])
    with pytest.raises(ValueError, match=r"Expected `bucket_by` to be None without"):
        tfrecord.dataset(texts, BATCH, bucket_by="tokens")
    with pytest.raises(ValueError, match=r"Expected `bucket_by` to be one of the features"):
        tfrecord.dataset(texts, BATCH, in_memory=True, bucket_boundaries=[4], bucket_by="text")
    with (
        tf.Graph().as_default(),
        pytest.raises(
            ValueError, match=r"Expected `bucket_boundaries` to be None with pipeline='queue'"
        ),
    ):
        tfrecord.read_batches(texts, BATCH, pipeline="queue", bucket_boundaries=[4])


def test_bucket_by_is_needed_when_several_features_vary(images):
    with pytest.raises(ValueError, match=r"several features vary in length: \['boxes', 'xmin'\]"):
        tfrecord.dataset(images, BATCH, map_fn=decode, in_memory=True, bucket_boundaries=[2])
    data = tfrecord.dataset(
        images,
        BATCH,
        map_fn=decode,
        in_memory=True,
        bucket_boundaries=[2],
        bucket_by="boxes",
        pad_to={"boxes": "longest"},
    )
    for batch in data:
        assert isinstance(batch["xmin"], tf.RaggedTensor)  # not named in pad_to: ragged
        lengths = [len(r) for r in rows(batch["xmin"])]
        assert len({n >= 2 for n in lengths}) == 1


def test_as_tuple_names_the_outputs_of_batch_map_fn(images):
    def decode_batch(batch: dict[str, Any]) -> dict[str, Any]:
        return {"n": tf.strings.length(batch["image/encoded"]), "y": batch["id"]}

    first = next(
        iter(tfrecord.dataset(images, BATCH, batch_map_fn=decode_batch, as_tuple=("y", "n")))
    )
    assert isinstance(first, tuple) and rows(first[0]) == list(range(BATCH))
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(
            images,
            BATCH,
            pipeline="queue",
            num_epochs=1,
            batch_map_fn=decode_batch,
            as_tuple=("y", "n"),
        )
        assert isinstance(batches.tensors, tuple) and len(batches.tensors) == 2


@pytest.mark.slow  # decodes and packs every image twice; about 6 s of CPU
def test_convert_with_map_fn_stores_decoded_pixels_in_packed_shards(images, tmp_path):
    codec = "png" if "png" in str(Path(images).parent.name) else "jpeg"
    result = tfrecord.convert(images, tmp_path / "pixels", map_fn=decode, examples_per_record=8)
    assert result.schema["image"].shape == (SIDE, SIDE, 3)
    assert result.schema["image"].dtype == "uint8" and result.schema["image"].encoding == "raw"
    assert result.schema["boxes"].shape == (None,)
    for kwargs in ({}, {"in_memory": True}):  # read back with no decoding at all
        check_images(by_id(list(tfrecord.dataset(tmp_path / "pixels", BATCH, **kwargs))), codec)
    with pytest.raises(ValueError, match=r"static shape.*'image'"):
        tfrecord.convert(
            images,
            tmp_path / "unknown",
            map_fn=lambda ex: {"image": tf.io.decode_jpeg(ex["image/encoded"])},
        )


def test_frames_of_one_shape_are_lists_padded_and_bucketed_on_their_count():
    from tfr_hooks.tfrecord.pipelines.pools import batch_pools
    from tfr_hooks.tfrecord.pipelines.ragged import Shaping, is_list, pad_batch

    assert is_list(tf.TensorSpec([None, 8])) and is_list(tf.TensorSpec([None]))
    assert is_list(tf.RaggedTensorSpec([None, 8], ragged_rank=0))
    assert not is_list(tf.TensorSpec([None, None, 3]))  # an image of unknown size
    assert not is_list(tf.TensorSpec([4, 8])) and not is_list(tf.TensorSpec([]))
    frames = tf.RaggedTensor.from_row_lengths(tf.ones([5, 8]), [2, 3])  # [2, (frames), 8]
    assert pad_batch({"f": frames}, Shaping(pad_to=4))["f"].shape.as_list() == [2, 4, 8]
    cut = pad_batch({"f": frames}, Shaping(pad_to=1))["f"]
    assert cut.shape.as_list() == [2, 1, 8]
    pool = tf.RaggedTensor.from_row_lengths(tf.ones([15, 8]), [3, 0, 5, 1, 4, 2])
    pools = tf.data.Dataset.from_tensors({"f": pool})
    bucketed = batch_pools(pools, key="f", batch_size=2, drop_remainder=False, seed=1, shuffle=True)
    lengths = [b["f"].row_lengths().numpy().tolist() for b in bucketed]
    assert sorted(lengths) == [[0, 1], [2, 3], [4, 5]]
