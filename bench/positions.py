"""``--suite positions``: resume by position, checkpoints, Grain, on one set of records.

Issue 45's benchmark rows, measured in one process on the records of
:mod:`positions_data` (at least 2M small records in 20 classes, class order, 4 files
written by a plain ``tf.io.TFRecordWriter``), batch 256, seed 3:

- **index**: the record index's build rate (``build_index``, one sequential pass a
  file, in memory), MB/s; then the files are indexed once for the reads below.
- **input alone**: examples/s of a whole epoch read with ``tfrecord.source(files, 256,
  shuffle="global")`` and with ``shuffle=10_000`` (the package's reader, schema
  inferred, parsed), in paired rounds; mixing (classes in each of the first 20 batches,
  the mean total-variation distance of a batch's class histogram from uniform).
- **resume**: the seconds to the first batch of a read started at 0%, 10% and 90% of the
  epoch, for ``shuffle="global"``, no shuffle and ``shuffle=10_000``; the extra
  time is the 10% or 90% figure minus the 0% one. A read by position seeks through
  ``Source.position.seek(epoch, records)`` when the reader has it (resume by
  position); without it, ``shuffle="global"`` starts its order at the position
  (``GlobalOrder.batches(start=...)``, what that seek reads) and the other two replay:
  ``dataset.skip(batches)`` on the reader's batches, the batches read and parsed again
  inside tf.data (a lower bound of the loops' skip, which bench/skip_cost.py measures).
- **resume, through the loop**: the seconds from ``FunctionLoop.run`` to the end of its
  first step, the run resumed at step 0, 10% or 90% of the epoch by a hook that sets
  ``loop.initial_step`` where ``PreemptionCheckpoint`` does after a restore: the real
  resume path (a seek where the reader carries a position, else the engine's skip of
  the trained batches). The resume targets are checked on these rows.
- **TensorFlow's checkpoint**: ``tf.train.Checkpoint(iterator=...)`` of a tf.data
  iterator over the same files behind ``shuffle(10_000)`` (and, for contrast, without),
  saved at 10% of the epoch: its size on disk and the seconds from a new iterator to
  its first batch after the restore.
- **Grain**: the records converted to ArrayRecord (``group_size:1``), read with
  ``grain.MapDataset.source(...).shuffle(seed=3).batch(256)`` through
  ``to_iter_dataset(ReadOptions(num_threads=k))``, k = 1 and 2, and with the shuffled
  indices batched and each batch read in one ``__getitems__`` call; the best kept:
  examples/s over the first ``grain_examples`` of the epoch (or :data:`GRAIN_SECONDS`),
  raw records (no parse); its iterator
  state (``get_state()`` as JSON) and the seconds from a new reader (the files opened,
  the pipeline built) through ``set_state`` to its first batch.
- **Mixtures** (issue 54, bench/mixture_rows.py): the same count of records written
  again as 3 named sources (300 : 100 : 20), read mixed at weights 0.5, 0.3, 0.2 by
  ``tfrecord.source({...}, 256, weights=..., shuffle="global")`` against the
  single-source global read of those records, tf.data's ``sample_from_datasets`` and
  Grain's ``mix``; the three mixes' checkpoints, our resume at 10% and 90%, and each
  mix's share error per window of 10,000.

Run through ``python bench/run.py --suite positions``; the report and targets are
:mod:`positions_report`'s.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from positions_data import CLASSES, to_array_record, write_records

__all__ = ["DEFAULTS", "QUICK", "measure", "mixture_result"]

DEFAULTS = {"records": 2_000_000, "repeats": 3, "rounds": 2, "grain_examples": 100_000}
QUICK = {"records": 20_000, "repeats": 1, "rounds": 1, "grain_examples": 5_000}
BATCH = 256
SEED = 3
BUFFER = 10_000
SHARES = (0.0, 0.1, 0.9)
GRAIN_SECONDS = 30.0  # the most a Grain variant reads for its examples/s


def _source(files: list[str], mode: str) -> Any:
    from tfr_hooks import tfrecord

    options: dict[str, Any] = {"seed": SEED}
    if mode == "global":
        options["shuffle"] = "global"
    elif mode == "buffer":
        options["shuffle"] = BUFFER
    return tfrecord.source(files, BATCH, **options)


def _first_batch_seconds(make: Callable[[], Iterable[Any]]) -> float:
    start = time.perf_counter()
    next(iter(make()))
    return time.perf_counter() - start


def _parse_fn() -> Callable[[Any], Any]:
    import tensorflow as tf

    features = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([], tf.string),
    }
    return lambda batch: tf.io.parse_example(batch, features)


def _resume_reader(files: list[str], mode: str) -> tuple[str, Callable[[int], Any]]:
    """How a read from record ``n`` is made in ``mode``, and its name in the report."""
    from tfr_hooks.tfrecord.formats.index import index_files
    from tfr_hooks.tfrecord.pipelines.orders.global_order import GlobalOrder

    probe = _source(files, mode)
    if mode != "buffer" and getattr(probe, "position", None) is not None:

        def seek(n: int) -> Any:
            src = _source(files, mode)
            moved = src.position.seek(epoch=0, records=n)
            return src if moved is None else moved

        return "seek (facts.position.seek)", seek
    if mode == "global":
        parse = _parse_fn()

        def start_at(n: int) -> Any:
            order = GlobalOrder(index_files(files), seed=SEED)
            return order.batches(BATCH, start=n).map(parse)

        return "global order from the position (GlobalOrder.batches start=)", start_at

    def replay(n: int) -> Any:
        return _source(files, mode).dataset.skip(n // BATCH)

    return "replay (dataset.skip on batches)", replay


def _resume_row(how: str, seconds: dict[str, list[float]]) -> dict[str, Any]:
    """A resume row: the median seconds at each share, and the extra at 10% and 90%."""
    median = {share: statistics.median(v) for share, v in seconds.items()}
    return {
        "how": how,
        "first_batch": median,
        "extra_10": median["0.1"] - median["0.0"],
        "extra_90": median["0.9"] - median["0.0"],
    }


def resume_rows(files: list[str], records: int, repeats: int) -> dict[str, Any]:
    """Seconds to the first batch at 0%, 10%, 90% of the epoch, per mode (medians)."""
    rows: dict[str, Any] = {}
    for mode in ("global", "none", "buffer"):
        how, make = _resume_reader(files, mode)
        make(0)  # build once (schema, index), untimed
        seconds: dict[str, list[float]] = {str(s): [] for s in SHARES}
        for _ in range(repeats):
            for share in SHARES:
                n = int(records * share) // BATCH * BATCH
                seconds[str(share)].append(_first_batch_seconds(lambda n=n, make=make: make(n)))
        rows[mode] = _resume_row(how, seconds)
    return rows


def _resumed_first_step_seconds(files: list[str], mode: str, step: int) -> float:
    """Seconds from ``FunctionLoop.run`` to its first step, resumed at ``(0, step)``.

    A hook sets ``loop.initial_step`` in ``after_create_session``, where
    ``PreemptionCheckpoint`` sets it after restoring: the engine then reaches the
    position as a resumed run does (a seek where the reader carries a position, else
    the skip of the trained batches), and the hook stops the run after one step.
    """
    import tensorflow as tf

    from tfr_hooks import FunctionLoop, Hook

    class ResumeAt(Hook):  # type: ignore[misc]
        def after_create_session(self, session: Any, coord: Any) -> None:
            self.loop.initial_step = step

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.first = time.perf_counter()
            self.loop.request_stop("one step is enough")

    hook = ResumeAt()
    loop = FunctionLoop(
        _source(files, mode),
        step_fn=lambda batch: {"n": tf.cast(tf.size(batch["label"]), tf.float32)},
        hooks=[hook],
        handle_signals=False,
    )
    start = time.perf_counter()
    loop.run(epochs=1)
    return float(hook.first - start)


def loop_resume_rows(files: list[str], records: int, repeats: int) -> dict[str, Any]:
    """The time to the first step of a resumed ``FunctionLoop`` at 0%, 10%, 90% (medians)."""
    rows: dict[str, Any] = {}
    for mode in ("global", "none", "buffer"):
        position = getattr(_source(files, mode).facts, "position", None)
        how = "a seek (the reader's position)" if position is not None else "the skip (replay)"
        _resumed_first_step_seconds(files, mode, 0)  # untimed: the first loop's costs
        seconds: dict[str, list[float]] = {str(s): [] for s in SHARES}
        for _ in range(repeats):
            for share in SHARES:
                steps = int(records * share) // BATCH
                seconds[str(share)].append(_resumed_first_step_seconds(files, mode, steps))
        rows[mode] = _resume_row(how, seconds)
    return rows


def _mixing(batches: Iterable[Any]) -> dict[str, float]:
    labels = [np.asarray(b["label"]) for b in batches]
    tv = [
        0.5 * np.abs(np.bincount(b, minlength=CLASSES) / len(b) - 1 / CLASSES).sum() for b in labels
    ]
    return {
        "fewest_classes": int(min(len(np.unique(b)) for b in labels)),
        "mean_tv": float(np.mean(tv)),
    }


def input_rows(files: list[str], rounds: int) -> dict[str, Any]:
    """Examples/s of a whole epoch, global and buffer, in paired rounds; mixing."""
    rates: dict[str, list[float]] = {"global": [], "buffer": []}
    ratios = []
    for round_ in range(rounds):
        got = {}
        for mode in ("global", "buffer") if round_ % 2 else ("buffer", "global"):
            src = _source(files, mode)
            start, count = time.perf_counter(), 0
            for batch in src:
                count += int(batch["label"].shape[0])
            got[mode] = count / (time.perf_counter() - start)
            rates[mode].append(got[mode])
        ratios.append(got["global"] / got["buffer"])
    mixing = {mode: _mixing(_source(files, mode).dataset.take(20)) for mode in rates}
    return {
        "examples_per_sec": {mode: statistics.median(v) for mode, v in rates.items()},
        "runs": rates,
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "mixing": mixing,
    }


def index_rows(files: list[str], repeats: int) -> dict[str, Any]:
    """The index build rate (MB/s, wall and CPU), then the files indexed for the reads."""
    from tfr_hooks.tfrecord.formats.index import build_index, index_files

    size = sum(os.path.getsize(f) for f in files) / 1e6
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for path in files:
            build_index(path)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    index_files(files)  # kept beside the files (or in the cache) for shuffle="global"
    return {
        "mb": size,
        "mb_per_sec": size / statistics.median(walls),
        "cpu_mb_per_sec": size / statistics.median(cpus),
    }


def tf_checkpoint_rows(files: list[str], records: int, workdir: Path) -> dict[str, Any]:
    """``tf.train.Checkpoint`` of a tf.data iterator at 10%: size on disk, restore seconds."""
    import tensorflow as tf

    parse = _parse_fn()
    rows = {}
    for name, buffer in (("shuffle", BUFFER), ("no_shuffle", 0)):

        def pipeline(buffer: int = buffer) -> Any:
            data = tf.data.TFRecordDataset(files)
            if buffer:
                data = data.shuffle(buffer, seed=SEED)
            return data.batch(BATCH).map(parse)

        iterator = iter(pipeline())
        for _ in range(max(1, records // 10 // BATCH)):
            next(iterator)
        prefix = workdir / f"tf_iterator_{name}"
        path = tf.train.Checkpoint(iterator=iterator).write(str(prefix))
        size = sum(p.stat().st_size for p in workdir.glob(f"{prefix.name}*"))
        start = time.perf_counter()
        fresh = iter(pipeline())
        tf.train.Checkpoint(iterator=fresh).read(path).assert_consumed()
        next(fresh)
        rows[name] = {"bytes": size, "restore_seconds": time.perf_counter() - start}
    return rows


def _grain_variants(grain: Any, paths: list[str]) -> dict[str, tuple[Callable[[], Any], int]]:
    """Grain pipelines to try, each a builder (a new reader: files opened) and its threads.

    ``MapDataset.source(...).shuffle(seed).batch(256)`` reads a record a call
    (``source[i]``); the batched variant shuffles the indices and reads each batch's
    records in one ``ArrayRecordDataSource.__getitems__`` call, a user's faster spelling.
    """

    def per_record() -> Any:
        opened = grain.sources.ArrayRecordDataSource(paths)
        return grain.MapDataset.source(opened).shuffle(seed=SEED).batch(BATCH)

    def batched() -> Any:
        opened = grain.sources.ArrayRecordDataSource(paths)
        indices = grain.MapDataset.range(len(opened)).shuffle(seed=SEED).batch(BATCH)
        return indices.map(lambda keys: opened.__getitems__([int(k) for k in keys]))

    return {
        "`MapDataset.source().shuffle().batch()`, 1 read thread": (per_record, 1),
        "`MapDataset.source().shuffle().batch()`, 2 read threads": (per_record, 2),
        "shuffled indices, a batch read by `__getitems__`, 1 read thread": (batched, 1),
        "shuffled indices, a batch read by `__getitems__`, 2 read threads": (batched, 2),
    }


def grain_rows(files: list[str], directory: Path, examples: int) -> dict[str, Any]:
    """Grain's global shuffle over ArrayRecord: examples/s, state size, restore seconds.

    Each variant reads ``examples`` (or for at most :data:`GRAIN_SECONDS`) from the
    epoch's start; its state there is restored in a new reader.
    """
    import grain
    import tensorflow as tf

    converted = to_array_record(files, directory)
    source = grain.sources.ArrayRecordDataSource(converted["files"])
    shuffled = grain.MapDataset.source(source).shuffle(seed=SEED)
    # the records one by one: a batch is a numpy bytes array, which drops trailing NULs
    first = [shuffled[i] for i in range(BATCH)]
    examples = max(BATCH, min(examples, len(source) // 2))  # restored mid-epoch
    runs = {}
    for name, (pipeline, threads) in _grain_variants(grain, converted["files"]).items():
        options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=500)
        iterator = iter(pipeline().to_iter_dataset(options))
        start, count = time.perf_counter(), 0
        for batch in iterator:
            count += len(batch)
            if count >= examples or time.perf_counter() - start > GRAIN_SECONDS:
                break
        rate = count / (time.perf_counter() - start)
        state = iterator.get_state()
        start = time.perf_counter()  # a new reader: the files opened again, the state set
        fresh = iter(pipeline().to_iter_dataset(options))
        fresh.set_state(state)
        next(fresh)
        runs[name] = {
            "examples_per_sec": rate,
            "examples": count,
            "state_bytes": len(json.dumps(state).encode()),
            "state": state,
            "restore_seconds": time.perf_counter() - start,
        }
    labels = tf.io.parse_example(first, {"label": tf.io.FixedLenFeature([], tf.int64)})
    return {
        "version": _version("grain"),
        "array_record": _version("array-record"),
        "converted": {k: v for k, v in converted.items() if k != "files"},
        "variants": runs,
        "best": max(runs, key=lambda k: runs[k]["examples_per_sec"]),
        "first_batch_classes": len(np.unique(labels["label"].numpy())),
    }


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Every row of the suite, on one set of records; a JSON-able dict.

    ``spec``: ``data_dir``, ``records``, ``repeats``, ``rounds``, ``grain_examples``,
    ``workdir``.
    """
    import tensorflow as tf

    root = Path(spec["data_dir"])
    data = write_records(root, spec["records"])
    files = data["files"]
    workdir = Path(spec["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "data": {k: v for k, v in data.items() if k != "files"},
        "batch_size": BATCH,
        "seed": SEED,
        "repeats": spec["repeats"],
        "rounds": spec["rounds"],
    }
    result["index"] = index_rows(files, spec["repeats"])
    result["input"] = input_rows(files, spec["rounds"])
    result["resume"] = resume_rows(files, spec["records"], spec["repeats"])
    result["loop_resume"] = loop_resume_rows(files, spec["records"], spec["repeats"])
    result["tf_checkpoint"] = tf_checkpoint_rows(files, spec["records"], workdir)
    array_dir = root / f"records-{spec['records']}-array_record"
    try:
        result["grain"] = grain_rows(files, array_dir, spec["grain_examples"])
    except ImportError as exc:  # the bench extra not installed
        result["grain"] = {"error": f"{type(exc).__name__}: {exc}"}
    try:  # issue 55: ours on the same ArrayRecord files, the ceiling, ours on TFRecord
        from arrayrecord_rows import arrayrecord_rows

        converted = to_array_record(files, array_dir)["files"]  # Grain's, when it ran
        best = result["grain"].get("best")  # read again, paired with ours
        rows = arrayrecord_rows(converted, files, spec["grain_examples"], spec["rounds"], best)
        result["arrayrecord"] = rows
    except ImportError as exc:  # the arrayrecord extra not installed
        result["arrayrecord"] = {"error": f"{type(exc).__name__}: {exc}"}
    try:  # issue 54: a mixture of 3 sources against tf.data's and Grain's mixes
        result["mixture"] = mixture_result(spec)
    except Exception as exc:  # the other rows are kept; the report names the error
        result["mixture"] = {"error": f"{type(exc).__name__}: {exc}"}
    return result


def mixture_result(spec: dict[str, Any]) -> dict[str, Any]:
    """Issue 54's rows (bench/mixture_rows.py): ``records`` in 3 sources of their own."""
    from mixture_rows import mixture_rows

    return mixture_rows(
        Path(spec["data_dir"]),
        spec["records"],
        peer_examples=spec["grain_examples"],
        rounds=spec["repeats"],
        repeats=spec["repeats"],
        workdir=Path(spec["workdir"]),
    )
