"""The rows of ``--suite real``: JPEG images and token sequences (see bench_real_data).

Every row runs ``steps = examples // batch_size`` batches an epoch on an endless
pipeline, one warm-up epoch then ``epochs`` timed ones, with the same clock as the
digits rows (``bench_workloads.Clock``). Models (Keras 3):

* images: uint8[64, 64, 3] -> Rescaling(1/255) -> Conv2D(16, 3, stride 2, relu) ->
  Conv2D(32, 3, stride 2, relu) -> Conv2D(64, 3, stride 2, relu) ->
  GlobalAveragePooling2D -> Dense(10) logits.
* text: int64[None] (0 = padding) -> Embedding(10,000, 32, mask_zero=True) ->
  GlobalAveragePooling1D (masked) -> Dense(2) logits.

Sparse cross-entropy on logits, accuracy, Adam(1e-3), as the digits rows.

Pipelines: ``hand`` is what the TensorFlow data performance guide writes
(``TFRecordDataset(num_parallel_reads=AUTOTUNE)``, ``shuffle``, ``map(parse + decode,
num_parallel_calls=AUTOTUNE)``, ``batch``/``padded_batch``/``bucket_by_sequence_length``,
``prefetch(AUTOTUNE)``); ``cached`` adds ``.cache()`` after the decode (filled by a full
pass before the warm-up epoch, so every timed epoch reads from the cache); ``stream`` is
the package's ``tfrecord.dataset(files, batch, shuffle=..., map_fn=decode)``;
``memory`` and ``packed`` are the package's in-memory and packed pipelines (see
:func:`package_pipeline`); ``*_bucketed`` text rows batch by length.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_workloads as w
import tensorflow as tf

from tfr_hooks import tfrecord

__all__ = ["FUNCTIONS", "padded_share"]

#: Shuffle buffer of every real row, in examples (as the digits rows: 4 batches of 128).
SHUFFLE = 512
#: Bucket boundaries of the bucketed text pipeline (token counts).
BUCKETS = [16, 32, 48, 64, 96, 128, 192, 256, 384]
#: Bytes of one decoded image (uint8, 64 x 64 x 3).
IMAGE_BYTES = 64 * 64 * 3
#: Distinct in-memory batches the model-alone rows cycle through.
HELD_BATCHES = 8
#: Seconds the pinned rows' tf.data service servers may take to start (they import TF).
SERVER_START = 300
IMAGE_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/object/bbox/label": tf.io.VarLenFeature(tf.int64),
}
TEXT_FEATURES = {
    "tokens": tf.io.VarLenFeature(tf.int64),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


# -- data ---------------------------------------------------------------------------


def _info(spec: w.Spec, kind: str) -> dict[str, Any]:
    from bench_real_data import image_dir, text_dir

    if spec.real is None:
        raise ValueError("Expected the real data sets' sizes in the spec. Received: None")
    make = image_dir if kind == "img" else text_dir
    directory = make(spec.data_dir, spec.real[kind], spec.seed)
    return dict(json.loads(Path(directory, "info.json").read_text()))


def _files(spec: w.Spec, kind: str) -> list[str]:
    return list(_info(spec, kind)["files"])


def _steps(spec: w.Spec, kind: str) -> int:
    return int(_info(spec, kind)["examples"]) // spec.batch_size


def decode_image(image: Any) -> Any:
    """JPEG bytes -> uint8 [64, 64, 3] (the shape set, as the model needs it static)."""
    from bench_real_data import IMAGE_SIDE

    decoded = tf.io.decode_jpeg(image, channels=3)
    return tf.ensure_shape(decoded, [IMAGE_SIDE, IMAGE_SIDE, 3])


def _parse_image(record: Any) -> Any:
    parsed = tf.io.parse_single_example(record, IMAGE_FEATURES)
    return decode_image(parsed["image/encoded"]), parsed["image/class/label"]


def _parse_text(record: Any) -> Any:
    parsed = tf.io.parse_single_example(record, TEXT_FEATURES)
    return tf.sparse.to_dense(parsed["tokens"]), parsed["label"]


def hand_pipeline(spec: w.Spec, kind: str, batching: str = "padded", cached: bool = False) -> Any:
    """The data performance guide's pipeline, endless; ``cached`` adds ``.cache()``."""
    autotune = tf.data.AUTOTUNE
    records = tf.data.TFRecordDataset(_files(spec, kind), num_parallel_reads=autotune)
    parse = _parse_image if kind == "img" else _parse_text
    if cached:  # decode once, then shuffle the cached examples each pass
        data = records.map(parse, num_parallel_calls=autotune).cache()
        data.reduce(0, lambda n, _: n + 1)  # fill the cache (one pass, not timed)
        data = data.shuffle(SHUFFLE, seed=spec.seed).repeat()
    else:
        data = records.shuffle(SHUFFLE, seed=spec.seed).repeat()
        data = data.map(parse, num_parallel_calls=autotune)
    if kind == "img":
        data = data.batch(spec.batch_size, drop_remainder=True)
    elif batching == "padded":
        data = data.padded_batch(spec.batch_size, drop_remainder=True)
    elif batching == "bucketed":
        data = data.bucket_by_sequence_length(
            lambda tokens, label: tf.shape(tokens)[0],
            bucket_boundaries=BUCKETS,
            bucket_batch_sizes=[spec.batch_size] * (len(BUCKETS) + 1),
            drop_remainder=True,
        )
    else:
        raise ValueError(f"Expected batching 'padded' or 'bucketed'. Received: {batching!r}")
    return data.prefetch(autotune)


def _package_decode(kind: str) -> Any:
    """The ``map_fn`` the package's pipelines get: one parsed example -> (x, label)."""
    if kind == "img":
        return lambda ex: {
            "image": decode_image(ex["image/encoded"]),
            "label": ex["image/class/label"],
        }
    return lambda ex: {"tokens": ex["tokens"], "label": ex["label"]}


def _packed_files(spec: w.Spec, kind: str) -> str:
    """Packed shards (128 examples a record) of the producer's files, converted once.

    Images are decoded by the conversion (``convert(map_fn=decode)``): the shards hold raw
    pixels, so reading them never decodes a JPEG (at about 4x the JPEGs' disk space).
    """
    source = Path(_files(spec, kind)[0]).parent
    target = source.parent / (source.name + ("-packed-pixels" if kind == "img" else "-packed"))
    if not (target / "schema.json").exists():
        map_fn = _package_decode(kind) if kind == "img" else None
        tfrecord.convert(str(source), str(target), examples_per_record=128, map_fn=map_fn)
    return str(target)


def package_pipeline(spec: w.Spec, kind: str, source: str, service: str | None = None) -> Any:
    """One of the package's pipelines, endless (``num_epochs=None``), batches (x, label).

    ``stream``: ``tfrecord.dataset(files, map_fn=decode)`` (images decoded every epoch;
    text parsed per batch as ragged tokens). ``memory``: ``in_memory=True`` with the same
    ``map_fn``, decoded once (the token lists held as values and row offsets).
    ``packed``: the packed shards, streamed (images decoded by the conversion, so the
    shards hold pixels). With ``service`` (streamed or packed), a tf.data service's
    workers run the pipeline and this process receives the batches. Text batches are
    padded to each batch's longest row (``pad_to="longest"``); ``*_bucketed`` also batches by length
    (``bucket_boundaries=BUCKETS``), as the hand-written bucketed pipeline does.
    """
    base = source.removesuffix("_bucketed")
    files: Any = _packed_files(spec, kind) if base == "packed" else _files(spec, kind)
    kwargs: dict[str, Any] = {
        "seed": spec.seed,
        "num_epochs": None,
        "drop_remainder": True,
        "as_tuple": ("image", "label") if kind == "img" else ("tokens", "label"),
    }
    if (kind == "img" and base != "packed") or base == "memory":
        kwargs["map_fn"] = _package_decode(kind)  # packed images hold decoded pixels
    if kind == "txt":
        kwargs["pad_to"] = "longest"
        if source.endswith("_bucketed"):
            kwargs["bucket_boundaries"] = BUCKETS
    if base == "memory":
        kwargs.update(in_memory=True, shuffle="global")
        if kind == "img":  # the RSS check: images are where the data dominates
            info = _info(spec, kind)
            w._before_loading(spec, info["examples"] * (IMAGE_BYTES + 8) / 2**20)
    else:
        kwargs["shuffle"] = w.PACKED_WINDOW if base == "packed" else SHUFFLE
    return tfrecord.dataset(files, spec.batch_size, service=service, **kwargs)


def pipeline(spec: w.Spec, kind: str, source: str, service: str | None = None) -> Any:
    """The pipeline called ``source`` (``hand``, ``bucketed``, ``cached``, ``stream``...).

    ``service``: the address of a tf.data service to run a package pipeline on.
    """
    if service is not None:
        return package_pipeline(spec, kind, source, service)
    if source.startswith("tfds_"):  # the image set as a TensorFlow Datasets directory
        import bench_tfds

        return bench_tfds.pipeline(spec, source, _files(spec, kind), SHUFFLE)
    if source in ("hand", "padded"):
        return hand_pipeline(spec, kind, "padded")
    if source == "bucketed":
        return hand_pipeline(spec, kind, "bucketed")
    if source == "cached":
        return hand_pipeline(spec, kind, "padded", cached=True)
    if source.removesuffix("_bucketed") in ("stream", "memory", "packed"):
        return package_pipeline(spec, kind, source)
    raise ValueError(f"Unknown pipeline {source!r}")


def padded_share(data: Any, steps: int) -> float:
    """The share of padded (0) token positions in ``steps`` batches of ``data``."""

    @tf.function(autograph=False)
    def count(n: Any) -> Any:
        iterator = iter(data)

        def body(i: Any, pad: Any, total: Any) -> Any:
            x, _ = next(iterator)
            pad += tf.reduce_sum(tf.cast(tf.equal(x, 0), tf.int64))
            return i + 1, pad, total + tf.size(x, out_type=tf.int64)

        zero = tf.constant(0, tf.int64)
        return tf.while_loop(lambda i, *_: i < n, body, [tf.constant(0), zero, zero])[1:]

    pad, total = count(tf.constant(steps))
    return float(pad) / max(1, int(total))


# -- models ---------------------------------------------------------------------------


def real_model(kind: str, steps_per_execution: int = 1) -> Any:
    """The compiled Keras 3 model of ``kind`` (``img`` or ``txt``)."""
    import keras as k3
    from bench_real_data import IMAGE_CLASSES, IMAGE_SIDE, TEXT_CLASSES, VOCAB

    layers = k3.layers
    if kind == "img":
        inputs = k3.Input(shape=(IMAGE_SIDE, IMAGE_SIDE, 3), dtype="uint8")
        h = layers.Rescaling(1.0 / 255)(inputs)
        for filters in (16, 32, 64):
            h = layers.Conv2D(filters, 3, strides=2, activation="relu")(h)
        h = layers.GlobalAveragePooling2D()(h)
        outputs = layers.Dense(IMAGE_CLASSES)(h)
    else:
        inputs = k3.Input(shape=(None,), dtype="int64")
        h = layers.Embedding(VOCAB, 32, mask_zero=True)(inputs)
        h = layers.GlobalAveragePooling1D()(h)
        outputs = layers.Dense(TEXT_CLASSES)(h)
    net = k3.Model(inputs, outputs)
    net.compile(
        optimizer=k3.optimizers.Adam(w.LEARNING_RATE),
        loss=k3.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return net


# -- rows -----------------------------------------------------------------------------


def _with_share(spec: w.Spec, kind: str, source: str, result: dict[str, Any]) -> dict[str, Any]:
    """Text rows: add the padded share of (a fresh copy of) the row's pipeline."""
    if kind == "txt":
        result["padded_share"] = padded_share(pipeline(spec, kind, source), _steps(spec, kind))
    return result


def input_alone(spec: w.Spec, kind: str, source: str, service: str | None = None) -> dict[str, Any]:
    """The pipeline alone, consumed inside a ``tf.function`` loop (no Python a batch)."""
    clock = w.Clock(spec)
    steps = _steps(spec, kind)
    data = pipeline(spec, kind, source, service)
    iterator = iter(data)

    def consume(n: Any) -> Any:
        def body(i: Any, seen: Any, pad: Any, total: Any) -> Any:
            x, y = next(iterator)
            touch = tf.cast(tf.reduce_sum(tf.cast(x, tf.int64)) * 0, tf.int64)
            seen += tf.shape(y, out_type=tf.int64)[0] + touch + tf.reduce_sum(y) * 0
            pad += tf.reduce_sum(tf.cast(tf.equal(x, 0), tf.int64))
            return i + 1, seen, pad, total + tf.size(x, out_type=tf.int64)

        zero = tf.constant(0, tf.int64)
        return tf.while_loop(lambda i, *_: i < n, body, [tf.constant(0), zero, zero, zero])

    run = tf.function(consume, autograph=False)
    pad = total = 0
    for _ in range(spec.epochs + 1):
        _, seen, padded, size = run(tf.constant(steps))
        clock.mark(int(seen))
        pad, total = pad + int(padded), total + int(size)
    result = clock.result()
    if kind == "txt":
        result["padded_share"] = pad / max(1, total)
    return result


def fit(spec: w.Spec, kind: str, source: str) -> dict[str, Any]:
    """Keras 3 ``fit``, ``steps_per_execution=32`` + the 3 callbacks."""
    import keras as k3

    clock = w.Clock(spec)
    steps = _steps(spec, kind)
    net = real_model(kind, 32)
    cbs = w.bracket_callbacks(k3, clock, w.callbacks(k3, spec.workdir))
    cbs.append(w.clock_callback(k3, clock, steps * spec.batch_size))
    net.fit(
        pipeline(spec, kind, source),
        epochs=spec.epochs + 1,
        steps_per_epoch=steps,
        verbose=0,
        callbacks=cbs,
        shuffle=False,
    )
    return _with_share(spec, kind, source, clock.result())


def function_loop(
    spec: w.Spec,
    kind: str,
    source: str,
    service: str | None = None,
    steps_per_execution: int | str = 32,
) -> dict[str, Any]:
    """``FunctionLoop(steps_per_execution=32)`` (or another) + the 3 callbacks."""
    import keras as k3

    import tfr_hooks
    from tfr_hooks.tf2.function_loop import FunctionLoop

    clock = w.Clock(spec)
    net = real_model(kind)
    hooks = w.bracket_hooks(clock, [tfr_hooks.KerasCallbacks(w.callbacks(k3, spec.workdir), net)])
    hooks.append(w.clock_hook(clock))
    loop = FunctionLoop(
        pipeline(spec, kind, source, service),
        model=net,
        hooks=hooks,
        steps_per_execution=steps_per_execution,
        steps_per_epoch=_steps(spec, kind),
    )
    history = loop.run(epochs=spec.epochs + 1)
    result = w.ran_at(history, w.reported_share(history, clock.result()), steps_per_execution)
    return _with_share(spec, kind, source, result)


def _graph_layers(kind: str, inputs: Any) -> Any:
    """:func:`real_model`'s layers in tf_keras, on a graph-mode batch tensor."""
    import tf_keras
    from bench_real_data import IMAGE_CLASSES, TEXT_CLASSES, VOCAB

    layers = tf_keras.layers
    if kind == "img":
        h = layers.Rescaling(1.0 / 255)(inputs)
        for filters in (16, 32, 64):
            h = layers.Conv2D(filters, 3, strides=2, activation="relu")(h)
        h = layers.GlobalAveragePooling2D()(h)
        return layers.Dense(IMAGE_CLASSES)(h)
    h = layers.Embedding(VOCAB, 32, mask_zero=True)(inputs)
    h = layers.GlobalAveragePooling1D()(h)
    return layers.Dense(TEXT_CLASSES)(h)


def session_loop(spec: w.Spec, kind: str, source: str) -> dict[str, Any]:
    """``SessionLoop`` + the 3 callbacks (``KerasCallbacks``) on the package's ``source``.

    Graph mode, as the digits session rows: ``tfrecord.read_batches`` with the same
    arguments as :func:`package_pipeline`, a tf_keras model on the batch tensor.
    """
    import tf_keras

    import tfr_hooks

    clock = w.Clock(spec)
    base = source.removesuffix("_bucketed")
    kwargs: dict[str, Any] = {
        "seed": spec.seed,
        "num_epochs": None,
        "drop_remainder": True,
        "as_tuple": ("image", "label") if kind == "img" else ("tokens", "label"),
        "map_fn": _package_decode(kind) if kind == "img" or base == "memory" else None,
        "in_memory": base == "memory",
        "shuffle": "global" if base == "memory" else SHUFFLE,
    }
    if kind == "txt":
        kwargs["pad_to"] = "longest"
        if source.endswith("_bucketed"):
            kwargs["bucket_boundaries"] = BUCKETS
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(spec.seed)
        batches = tfrecord.read_batches(_files(spec, kind), spec.batch_size, **kwargs)
        x, y = batches.tensors
        inputs = tf_keras.Input(tensor=x)
        net = tf_keras.Model(inputs, _graph_layers(kind, inputs))
        training = tfr_hooks.keras_training_graph(
            net,
            y,
            loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=tf_keras.optimizers.legacy.Adam(w.LEARNING_RATE),
            metrics=["accuracy"],
        )
        hook = tfr_hooks.KerasCallbacks(w.callbacks(tf_keras, spec.workdir), net)
        hooks = w.bracket_hooks(clock, [hook])
        hooks.append(w.clock_hook(clock))
        loop = tfr_hooks.SessionLoop(
            training, hooks=hooks, steps_per_epoch=_steps(spec, kind), data=batches
        )
        history = loop.run(epochs=spec.epochs + 1)
    return _with_share(spec, kind, source, w.reported_share(history, clock.result()))


def model_alone(spec: w.Spec, kind: str) -> dict[str, Any]:
    """The model alone: ``train_step`` on batches held in memory, 32 steps per call.

    An epoch is ``steps`` rounded up to a multiple of 32. The batches are
    :data:`HELD_BATCHES` batches of the hand-written pipeline (text: padded to each
    batch's longest), taken before the clock runs and cycled.
    """
    clock = w.Clock(spec)
    steps = _steps(spec, kind)
    held = [
        tuple(tf.constant(t) for t in b) for b in pipeline(spec, kind, "hand").take(HELD_BATCHES)
    ]
    net = real_model(kind)

    def rounds(n: Any) -> Any:
        def body(i: Any) -> Any:
            for batch in held:  # unrolled: text batches differ in length
                logs = net.train_step(batch)
                with tf.control_dependencies(tf.nest.flatten(logs)):
                    i = tf.identity(i)
            return i + 1

        return tf.while_loop(lambda i: i < n, body, [tf.constant(0)])

    run = tf.function(rounds, autograph=False)
    per_call = 32 // HELD_BATCHES  # rounds of the held batches: 32 steps per call
    calls = -(-steps // 32)
    for _ in range(spec.epochs + 1):
        for _ in range(calls):
            run(tf.constant(per_call))
        clock.mark(calls * 32 * spec.batch_size)
    result = clock.result()
    if kind == "txt":
        xs = [b[0] for b in held]
        pad = sum(int(tf.reduce_sum(tf.cast(tf.equal(x, 0), tf.int64))) for x in xs)
        result["padded_share"] = pad / sum(int(tf.size(x)) for x in xs)
    return result


# -- small data sets: a pass a new iterator ------------------------------------------

#: Examples of the small data sets (a pass), and the passes of one timed epoch.
SMALL_EXAMPLES = 3072
SMALL_PASSES = 20
#: The small data sets' example shapes (uint8): 40x40x3 images, 784-byte digit rows.
SMALL_SHAPES = {"small": (40, 40, 3), "small_digits": (784,)}


def _small_dir(spec: w.Spec, shape: tuple[int, ...], count: int = SMALL_EXAMPLES) -> str:
    """The small data set's shards (written once by the package's writer)."""
    import numpy as np

    name = "x".join(map(str, shape))
    directory = Path(spec.data_dir, f"small-{name}-{count}-seed{spec.seed}")
    if not (directory / "schema.json").exists():
        rng = np.random.default_rng(spec.seed)
        images = rng.integers(0, 256, (count, *shape), dtype=np.uint8)
        labels = rng.integers(0, 10, count, dtype=np.int64)
        tfrecord.write({"image": images, "label": labels}, directory, shards=4, overwrite=True)
    return str(directory)


def to_float(example: dict[str, Any]) -> dict[str, Any]:
    """The ``map_fn`` of the ``_f32`` rows: the image as float32 in [0, 1], as tutorials do."""
    return {"image": tf.cast(example["image"], tf.float32) / 255, "label": example["label"]}


def small_pipeline(
    spec: w.Spec,
    shape: tuple[int, ...],
    source: str,
    count: int = SMALL_EXAMPLES,
    map_fn: Any = None,
) -> Any:
    """One pass a new iterator: ``in_memory=True``, or ``.unbatch().cache().shuffle(n)``."""
    files, pair = _small_dir(spec, shape, count), ("image", "label")
    if source == "memory":
        return tfrecord.dataset(
            files,
            spec.batch_size,
            in_memory=True,
            shuffle="global",  # a new permutation each pass, as the reference's shuffle(n)
            num_epochs=1,
            seed=spec.seed,
            as_tuple=pair,
            map_fn=map_fn,
        )
    streamed = tfrecord.dataset(
        files, spec.batch_size, num_epochs=1, shuffle=None, as_tuple=pair, map_fn=map_fn
    )
    # the tuples are made before the cache, as a user writes it: no function runs a pass
    cached = streamed.unbatch().cache()
    cached.reduce(0, lambda n, _: n + 1)  # fill the cache (one pass, not timed)
    shuffled = cached.shuffle(count, seed=spec.seed).batch(spec.batch_size)
    return shuffled.prefetch(tf.data.AUTOTUNE)


def small_input(
    spec: w.Spec, kind: str, source: str, count: int = SMALL_EXAMPLES, map_fn: Any = None
) -> dict[str, Any]:
    """The small data set's pipeline alone: every pass a new iterator, in a ``reduce``.

    A timed epoch is ``SMALL_PASSES`` passes of ``SMALL_EXAMPLES`` (fewer passes of a
    larger ``count``, as many examples).
    """
    clock = w.Clock(spec)
    data = small_pipeline(spec, SMALL_SHAPES[kind], source, count, map_fn)
    passes = max(2, SMALL_PASSES * SMALL_EXAMPLES // count)

    @tf.function(autograph=False)
    def one_pass() -> Any:
        def add(seen: Any, batch: Any) -> Any:
            x, y = batch
            touch = tf.reduce_sum(tf.cast(x[:, :1], tf.int64)) * 0
            return seen + tf.shape(y, out_type=tf.int64)[0] + touch

        return data.reduce(tf.constant(0, tf.int64), add)

    for _ in range(spec.epochs + 1):
        clock.mark(sum(int(one_pass()) for _ in range(passes)))
    return clock.result()


@contextlib.contextmanager
def pinned_trainer(served: bool) -> Iterator[str | None]:
    """Pin this process to one core; with ``served``, a tf.data service on another.

    Simulates a trainer whose host has too few cores for its input, and a CPU host added
    to it: the service's dispatcher and one worker (processes started while this process
    is pinned to the second core, so they inherit it) run the pipeline there. This must
    run before TensorFlow's runtime starts in the process: its threads inherit the core
    of the thread that creates them.

    Yields:
        The service's address, or ``None`` (not ``served``: the trainer alone).
    """
    from tensorflow.python.eager import context

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise RuntimeError(f"The pinned-core rows need 2 cores; this process has {cores}")
    if context.context()._context_handle is not None:
        raise RuntimeError("The pinned-core rows must pin the process before TF's runtime starts")
    trainer, helper = cores[0], cores[1]
    if not served:
        os.sched_setaffinity(0, {trainer})
        yield None
        return
    from tfr_hooks.service.local import LocalService

    os.sched_setaffinity(0, {helper})
    with LocalService(workers=1, timeout=SERVER_START) as service:
        os.sched_setaffinity(0, {trainer})
        yield service.address


def _pinned_row(what: str, served: bool) -> Any:
    """A row of the streamed JPEG pipeline on one pinned core, served or not."""
    run = input_alone if what == "input" else function_loop

    def row(spec: w.Spec) -> dict[str, Any]:
        with pinned_trainer(served) as service:
            return run(spec, "img", "stream", service)

    return row


def real_entry(root: str, images: int, texts: int, seed: int, conn: Any) -> None:
    """Process target: write (or reuse) both data sets, send their info back."""
    try:
        from bench_real_data import write_real

        conn.send({"ok": True, **write_real(root, images, texts, seed)})
    except BaseException as exc:
        conn.send(w._failure(exc))
    finally:
        conn.close()


def _row(kind: str, what: str, source: str) -> Any:
    if what == "input":
        return lambda s: input_alone(s, kind, source)
    if what == "fit":
        return lambda s: fit(s, kind, source)
    if what == "loop":
        return lambda s: function_loop(s, kind, source)
    if what == "session":
        return lambda s: session_loop(s, kind, source)
    if what == "small":
        return lambda s: small_input(s, kind, source)
    raise ValueError(what)


#: Configuration name -> function of the spec (descriptions in bench_configs.REAL_ROWS).
FUNCTIONS: dict[str, Any] = {
    "img_input_hand": _row("img", "input", "hand"),
    "img_input_hand_cached": _row("img", "input", "cached"),
    "img_input_stream": _row("img", "input", "stream"),
    "img_input_memory": _row("img", "input", "memory"),
    "img_input_packed": _row("img", "input", "packed"),
    "img_input_tfds": _row("img", "input", "tfds_hand"),
    "img_input_tfds_cached": _row("img", "input", "tfds_cached"),
    "img_input_tfds_stream": _row("img", "input", "tfds_stream"),
    "img_input_tfds_memory": _row("img", "input", "tfds_memory"),
    "img_loop_tfds_cached": _row("img", "loop", "tfds_cached"),
    "img_loop_tfds_memory": _row("img", "loop", "tfds_memory"),
    "img_input_small_cached": _row("small", "small", "cached"),
    "img_input_small_memory": _row("small", "small", "memory"),
    **{
        f"img_input_small_{source}_f32{size}": (
            lambda s, source=source, count=count: small_input(
                s, "small", source, count, map_fn=to_float
            )
        )
        for source in ("cached", "memory")
        for size, count in (("", SMALL_EXAMPLES), ("_30k", 10 * SMALL_EXAMPLES))
    },
    "img_input_small_digits_cached": _row("small_digits", "small", "cached"),
    "img_input_small_digits_memory": _row("small_digits", "small", "memory"),
    "img_fit_hand": _row("img", "fit", "hand"),
    "img_loop_stream": _row("img", "loop", "stream"),
    "img_loop_memory": _row("img", "loop", "memory"),
    "img_loop_packed": _row("img", "loop", "packed"),
    "img_loop_memory_1": lambda s: function_loop(s, "img", "memory", steps_per_execution=1),
    "img_loop_memory_auto": lambda s: function_loop(s, "img", "memory", steps_per_execution="auto"),
    "img_session_memory": _row("img", "session", "memory"),
    "img_model_only": lambda s: model_alone(s, "img"),
    "img_input_1core": _pinned_row("input", served=False),
    "img_input_1core_service": _pinned_row("input", served=True),
    "img_loop_1core": _pinned_row("loop", served=False),
    "img_loop_1core_service": _pinned_row("loop", served=True),
    "txt_input_padded": _row("txt", "input", "padded"),
    "txt_input_bucketed": _row("txt", "input", "bucketed"),
    "txt_input_padded_cached": _row("txt", "input", "cached"),
    "txt_input_stream": _row("txt", "input", "stream"),
    "txt_input_memory": _row("txt", "input", "memory"),
    "txt_input_packed": _row("txt", "input", "packed"),
    "txt_input_stream_bucketed": _row("txt", "input", "stream_bucketed"),
    "txt_input_memory_bucketed": _row("txt", "input", "memory_bucketed"),
    "txt_fit_padded": _row("txt", "fit", "padded"),
    "txt_fit_bucketed": _row("txt", "fit", "bucketed"),
    "txt_loop_stream": _row("txt", "loop", "stream"),
    "txt_loop_stream_bucketed": _row("txt", "loop", "stream_bucketed"),
    "txt_loop_memory": _row("txt", "loop", "memory"),
    "txt_loop_packed": _row("txt", "loop", "packed"),
    "txt_loop_memory_1": lambda s: function_loop(s, "txt", "memory", steps_per_execution=1),
    "txt_loop_memory_auto": lambda s: function_loop(s, "txt", "memory", steps_per_execution="auto"),
    "txt_loop_memory_bucketed": _row("txt", "loop", "memory_bucketed"),
    "txt_session_memory_bucketed": _row("txt", "session", "memory_bucketed"),
    "txt_model_only": lambda s: model_alone(s, "txt"),
}
