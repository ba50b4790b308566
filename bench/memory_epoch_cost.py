"""Where an in-memory pass's fixed cost goes: the in-memory pipeline against ``.cache()``.

Each pass is a new iterator of one dataset (as ``FunctionLoop`` epochs are), consumed in a
``tf.function`` ``Dataset.reduce``. For every size of data set (examples per pass) and
every pipeline it measures, in one process, interleaved rounds (the order of the
pipelines alternates every round):

* ``pass``: the examples a second of a whole pass;
* ``first``: the milliseconds to the first batch of a new iterator (from Python);
* the ratio of every pipeline to the hand-written ``.cache()`` one, the median of the
  per-round ratios.

The pipelines: ``memory`` (``memory_dataset``, as ``in_memory=True`` builds it), ``cached``
(``.unbatch().cache().shuffle(n).batch(128).prefetch(AUTOTUNE)``, filled once), and
``per_pass``, the in-memory pipeline as it was before passes of small data were gathered
whole: each pass a ``flat_map`` of the pass's index slices through a parallel gather
map (what ``memory_dataset`` still builds above ``WHOLE_PASS_BYTES``). With ``--stages``,
variants of ``per_pass`` that each leave one stage out, to find which stage costs the
fixed time: ``ordered`` (no permutation), ``sequential`` (a sequential gather map),
``no_prefetch``; and pipelines of one stage: ``handover`` (the ``numpy_function``
handing the arrays over, nothing else), ``no_map`` (``Dataset.range`` of a pass's
batches) and ``one_map`` (the same through one trivial ``map``: what one function costs
a new iterator).

What it found (2 shared cores, TensorFlow 2.21): the fixed cost of a pass is the start of
a new iterator, about 4 ms for every function in the pipeline (``one_map`` against
``no_map``) and more for the ``flat_map`` of a pass's own dataset (its gather map, rebatch
and prefetch started anew each pass): ``per_pass`` took about 35 ms to its first batch at
3,072 examples. The permutation (``ordered``), the parallel map (``sequential``) and the
prefetch change it little at that size, and the ``numpy_function`` hand-over costs
nothing per byte when the buffers are 64-byte aligned, as ``load`` allocates them (an
unaligned one, such as a joined ragged feature's values, is copied at every pass, about
0.1 ms a MB: ``memory_dataset`` now aligns it once). Small data is now gathered a whole
pass at a time by one function (``WHOLE_PASS_BYTES``). Two more per-iterator costs of
that pipeline, found next (3,072 examples): the ``numpy_function`` hand-over (about 5 ms
a new iterator, a Python call) and tf.data's default graph rewrite, run at each new
iterator (about 4 ms; with the arrays captured as eager tensors it also serializes them
into the rewritten graph, so that capturing them alone gained nothing). In TF2 the small
data is now eager tensors made once and its pipeline turns the default rewrites off:
both costs gone. The last one: Grappler's meta optimizer optimizing the gather function
(a multi-device function) at each new iterator, about 5 ms (``--no-meta-optimizer``
shows it; ``--graph`` the same in graph mode); the gather is now a single-device function
(``serve.single_device_map``), and a pass over 3,072 examples takes 1.3x-1.7x less time
than ``.cache()`` (``--files``: both built on TFRecords, as users build them).

Usage::

    PYTHONPATH=. python bench/memory_epoch_cost.py --stages --out /tmp/cost.md
    PYTHONPATH=. python bench/memory_epoch_cost.py --files --sizes 3072
    PYTHONPATH=. python bench/memory_epoch_cost.py --graph --sizes 3072 [--no-meta-optimizer]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.pipelines.memory import serve
from tfr_hooks.tfrecord.pipelines.memory.loading import aligned_empty

__all__ = ["arrays_of", "cached_pipeline", "file_pipeline", "memory_pipeline", "main"]

BATCH = 128


def arrays_of(examples: int, kind: str, seed: int = 0) -> dict[str, np.ndarray]:
    """``examples`` random examples: 40x40x3 uint8 images, or 784-byte digit rows."""
    rng = np.random.default_rng(seed)
    shape = (40, 40, 3) if kind == "img" else (784,)
    out = {
        "x": aligned_empty((examples, *shape), np.uint8),
        "label": aligned_empty((examples,), np.int64),
    }
    out["x"][:] = rng.integers(0, 256, out["x"].shape, dtype=np.uint8)  # aligned, as load's
    out["label"][:] = rng.integers(0, 10, examples)
    return out


def cached_pipeline(arrays: dict[str, np.ndarray]) -> tf.data.Dataset:
    """The hand-written pipeline: batches, unbatched, cached (filled now), shuffled."""
    count = len(arrays["label"])
    source = tf.data.Dataset.from_tensor_slices(arrays).batch(BATCH)
    data = source.unbatch().cache()
    data.reduce(0, lambda n, _: n + 1)  # fill the cache (one pass, not timed)
    return data.shuffle(count, seed=1).batch(BATCH).prefetch(tf.data.AUTOTUNE)


def file_pipeline(arrays: dict[str, np.ndarray], variant: str, directory: str) -> tf.data.Dataset:
    """The pipelines as users build them on TFRecord files (``tfrecord.write`` of ``arrays``).

    ``memory_files``: ``tfrecord.dataset(in_memory=True, shuffle="global", num_epochs=1)``,
    as the bench's small rows read it; ``cached_files``: ``tfrecord.dataset(...)
    .unbatch().cache()`` (filled now), then ``.shuffle(n).batch(128).prefetch(AUTOTUNE)``.
    """
    if not Path(directory, "schema.json").exists():
        tfrecord.write(arrays, directory, shards=4, overwrite=True)
    if variant == "memory_files":
        return tfrecord.dataset(
            directory, BATCH, in_memory=True, shuffle="global", num_epochs=1, seed=1
        )
    data = tfrecord.dataset(directory, BATCH, num_epochs=1, shuffle=None).unbatch().cache()
    data.reduce(0, lambda n, _: n + 1)  # fill the cache (one pass, not timed)
    count = len(arrays["label"])
    return data.shuffle(count, seed=1).batch(BATCH).prefetch(tf.data.AUTOTUNE)


def memory_pipeline(arrays: dict[str, np.ndarray], variant: str = "memory") -> tf.data.Dataset:
    """The in-memory pipeline of one pass an iterator, or a variant without one stage."""
    if variant in ("no_map", "one_map"):
        passes = -(-len(arrays["label"]) // BATCH)
        batches = tf.data.Dataset.from_tensor_slices({"label": tf.range(passes, dtype=tf.int64)})
        return batches.map(lambda b: {"label": b["label"] + 1}) if variant == "one_map" else batches
    if variant == "handover":
        gather = serve._Gather(arrays, BATCH, "global", False, None)
        return tf.data.Dataset.from_tensors(0).map(
            lambda _: {
                "label": tf.numpy_function(gather.source, [], gather.dtypes, stateful=True)[-1][:1]
            }
        )
    calls, whole = serve.PARALLEL_CALLS, serve.WHOLE_PASS_BYTES  # where the gather reads them
    if variant != "memory":  # the variants are of the pass a flat_map of slices
        serve.WHOLE_PASS_BYTES = -1
    if variant == "sequential":
        serve.PARALLEL_CALLS = None  # type: ignore[assignment]
    try:
        return serve.memory_dataset(
            arrays,
            BATCH,
            shuffle=None if variant == "ordered" else "global",
            seed=1,
            drop_remainder=False,
            num_epochs=1,
            prefetch=None if variant == "no_prefetch" else 2,
        )
    finally:
        serve.PARALLEL_CALLS, serve.WHOLE_PASS_BYTES = calls, whole


def _timers(data: tf.data.Dataset) -> tuple[Callable[[], float], Callable[[], float]]:
    """Seconds of a whole pass (in a ``tf.function``), and to a new iterator's first batch."""

    @tf.function
    def reduce() -> Any:
        return data.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.size(b["label"], tf.int64))

    def whole() -> float:
        start = time.perf_counter()
        reduce().numpy()
        return time.perf_counter() - start

    def first() -> float:
        start = time.perf_counter()
        next(iter(data))
        return time.perf_counter() - start

    whole()  # trace
    return whole, first


def measure(
    examples: int, kind: str, variants: list[str], rounds: int
) -> dict[str, dict[str, float]]:
    """Per pipeline: median examples/s a pass, ms to first batch, ratio to ``cached``."""
    arrays = arrays_of(examples, kind)
    names = ["cached", *variants]
    files = tempfile.mkdtemp(prefix=f"memory_epoch_cost-{kind}-{examples}-")

    def pipeline(name: str) -> tf.data.Dataset:
        if name == "cached":
            return cached_pipeline(arrays)
        if name.endswith("_files"):
            return file_pipeline(arrays, name, files)
        return memory_pipeline(arrays, name)

    timers = {name: _timers(pipeline(name)) for name in names}
    passes: dict[str, list[float]] = {n: [] for n in names}
    firsts: dict[str, list[float]] = {n: [] for n in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            whole, first = timers[name]
            passes[name].append(whole())
            firsts[name].append(first())
    out = {}
    for name in names:
        ratios = [c / s for c, s in zip(passes["cached"], passes[name], strict=True)]
        out[name] = {
            "rate": examples / statistics.median(passes[name]),
            "first_ms": 1000 * statistics.median(firsts[name]),
            "pass_ms": 1000 * statistics.median(passes[name]),
            "ratio": statistics.median(ratios),
        }
    return out


def graph_passes(examples: int, kind: str, rounds: int, meta: bool = True) -> str:
    """Graph mode: an in-memory ``read_batches`` pass a new initialization, as in SessionLoop.

    Against a hand-written ``.cache()`` pipeline re-initialized in the same session: the
    median milliseconds of an initialization and its first batch, and of a whole pass.
    ``meta=False`` sets ``disable_meta_optimizer`` in the session's config.
    """
    v1 = tf.compat.v1
    arrays = arrays_of(examples, kind)
    files = tempfile.mkdtemp(prefix=f"memory_epoch_cost-graph-{kind}-")
    tfrecord.write(arrays, files, shards=4, overwrite=True)

    def memory_batches() -> tuple[Any, Any]:
        batches = tfrecord.read_batches(files, BATCH, in_memory=True, shuffle="global", seed=1)
        return batches.initializers, batches.tensors["label"]

    def cached_batches() -> tuple[Any, Any]:
        data = tf.data.Dataset.from_tensor_slices(arrays).batch(BATCH).unbatch().cache()
        data = data.shuffle(examples, seed=1).batch(BATCH).prefetch(2)
        iterator = v1.data.make_initializable_iterator(data)
        return iterator.initializer, iterator.get_next()["label"]

    lines = []
    for name, make in (("memory", memory_batches), ("cached", cached_batches)):
        with tf.Graph().as_default():
            init, label = make()
            fetch = tf.reduce_sum(label)  # tf.size of a static shape would not read
            config = v1.ConfigProto()
            config.graph_options.rewrite_options.disable_meta_optimizer = not meta
            firsts, passes = [], []
            with v1.Session(config=config) as session:
                for index in range(rounds + 3):
                    start = time.perf_counter()
                    session.run(init)
                    session.run(fetch)
                    first = time.perf_counter()
                    try:
                        while True:
                            session.run(fetch)
                    except tf.errors.OutOfRangeError:
                        pass
                    if index >= 3:  # the first initializations warm up
                        firsts.append(first - start)
                        passes.append(time.perf_counter() - start)
        lines.append(
            f"| {kind} | {examples:,} | {name} | {'on' if meta else 'off'} | "
            f"{1000 * statistics.median(firsts):.1f} | {1000 * statistics.median(passes):.1f} |"
        )
    return "\n".join(lines) + "\n"


def table(results: dict[tuple[str, int], dict[str, dict[str, float]]]) -> str:
    """The markdown table of :func:`measure`'s results."""
    lines = [
        "| data | examples per pass | pipeline | pass (ms) | ex/s | first batch (ms) | "
        "x `.cache()` |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for (kind, examples), rows in results.items():
        for name, row in rows.items():
            lines.append(
                f"| {kind} | {examples:,} | {name} | {row['pass_ms']:.1f} | {row['rate']:,.0f} | "
                f"{row['first_ms']:.1f} | {row['ratio']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3072,21600,86400", help="examples per pass")
    parser.add_argument("--kinds", default="img,digits", help="img (40x40x3), digits (784)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--stages", action="store_true", help="also time variants by stage")
    parser.add_argument("--files", action="store_true", help="also time both from TFRecords")
    parser.add_argument("--graph", action="store_true", help="graph mode: read_batches passes")
    parser.add_argument(
        "--no-meta-optimizer",
        action="store_true",
        help="turn Grappler's meta optimizer off (it optimizes each function of a new iterator)",
    )
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args()
    if args.no_meta_optimizer:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    variants = ["memory", "per_pass"]
    if args.files:
        variants += ["memory_files", "cached_files"]
    if args.stages:
        variants += ["ordered", "sequential", "no_prefetch", "handover", "one_map", "no_map"]
    if args.graph:
        header = (
            "| data | examples per pass | pipeline | meta optimizer | init + first batch (ms) "
            "| pass (ms) |\n|---|---:|---|---|---:|---:|\n"
        )
        rows = "".join(
            graph_passes(int(size), kind, args.rounds, meta=not args.no_meta_optimizer)
            for kind in args.kinds.split(",")
            for size in args.sizes.split(",")
        )
        print(header + rows)
        if args.out is not None:
            args.out.write_text(header + rows)
        return
    results = {}
    for kind in args.kinds.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            results[(kind, size)] = measure(size, kind, variants, args.rounds)
            print(table({(kind, size): results[(kind, size)]}), flush=True)
    text = table(results)
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
