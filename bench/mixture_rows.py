"""Issue 54's rows: a mixture of 3 TFRecord sources against tf.data's and Grain's mixes.

Measured in the positions suite's process (bench/positions.py), or standalone. Writes 3
sources (sizes in the ratio 300 : 100 : 20, as the issue's trial, ``records`` in all:
an ``int64`` source, an ``int64`` id and 32 random bytes a record, 2 files a source) with
a plain ``tf.io.TFRecordWriter``, and reads them mixed at weights 0.5, 0.3 and 0.2,
batches of 256, seed 3, input alone:

- **the mixture**: the package's reader, ``tfrecord.source({"web": ..., "books": ...,
  "code": ...}, 256, weights=..., shuffle="global", seed=3)``, parsed (schema inferred);
- **the single-source global read**: ``tfrecord.source(every file, 256,
  shuffle="global", seed=3)``: the same records as one source, parsed;
- **tf.data's ``sample_from_datasets``** over the same files, each source
  ``TFRecordDataset(...).shuffle(10_000).repeat()``, batched and parsed by one
  ``tf.io.parse_example`` a batch;
- **Grain's ``mix``** over the same records written as ArrayRecord (``group_size:1``),
  each source ``MapDataset.source(...).shuffle(seed=3).repeat()``, mixed, batched, read
  through ``to_iter_dataset(ReadOptions(num_threads=2))``, raw records (no parse); and
  a user's faster spelling: the sources' shuffled indices mixed and batched, each batch
  read by one ``ArrayRecordDataSource.__getitems__`` a source. The best is kept.

The rows are read in rounds (every other round in reverse order; the mixture and the
single-source read side by side in each), each row for at most ``examples`` (the
mixture and the single-source read: a whole epoch of the mixture) or ``peer_examples``
(the slower peers), and at most :data:`SECONDS` (:data:`PEER_SECONDS`), after a first
batch left untimed (each reader's start). The ratio of the mixture to the single-source
read is the median of the rounds' ratios.

Then each one's checkpoint at ``peer_examples`` into the run (size, and the seconds from
a new reader to its first batch after the restore): tf.data's
``tf.train.Checkpoint(iterator=...)``, ours (the position and the mixture's state, through
``Source.position.seek``) and Grain's ``get_state()``; our resume at 10% and 90% of a
mixture's epoch (medians of ``repeats``); each one's largest share error over every
window of 10,000 consecutive examples of the first :data:`SHARE_POSITIONS` (ours from
the ``source`` feature of the batches read; tf.data's and Grain's from their choice of
source alone, drawn with the same seed and weights, which does not depend on the records).

Standalone: ``python bench/mixture_rows.py --records 200000`` (prints the report's section).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # standalone: its report module beside it
    sys.path.insert(0, str(HERE))
if (HERE.parent / "tfr_hooks").is_dir() and str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))  # a checkout: benchmark the working tree

__all__ = ["ROWS", "WEIGHTS", "mixture_rows", "write_sources"]

WEIGHTS = {"web": 0.5, "books": 0.3, "code": 0.2}
RATIO = {"web": 300, "books": 100, "code": 20}
BATCH = 256
SEED = 3
BUFFER = 10_000
WINDOW = 10_000
SHARE_POSITIONS = 100_000
SECONDS = 20.0  # the most the mixture and the single-source read read in a round
PEER_SECONDS = 10.0  # the most a slower peer reads in a round
#: the rows, in the order they are reported
ROWS = ("mixture", "single_global", "sample_from_datasets", "grain_mix")


def write_sources(directory: str | Path, records: int, seed: int = 0) -> dict[str, Any]:
    """Write (or reuse) the 3 sources, 2 files each, with a plain ``tf.io.TFRecordWriter``.

    Returns:
        ``{"files": {name: [paths]}, "records", "sizes": {name: records}, "bytes",
        "reused"}``.
    """
    import tensorflow as tf

    directory = Path(directory) / f"mixture-{records}"
    info_path = directory / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if all(Path(p).exists() for paths in info["files"].values() for p in paths):
            return {**info, "reused": True}
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    total = sum(RATIO.values())
    files: dict[str, list[str]] = {}
    sizes = {name: records * part // total for name, part in RATIO.items()}
    sizes["web"] += records - sum(sizes.values())  # the records in all, exactly
    example = tf.train.Example()
    feature = example.features.feature
    feature["source"].int64_list.value.append(0)
    feature["id"].int64_list.value.append(0)
    feature["x"].bytes_list.value.append(b"")
    source, ids, x = (feature[k] for k in ("source", "id", "x"))
    for s, (name, size) in enumerate(sizes.items()):
        source.int64_list.value[0] = s
        bounds = [0, size // 2, size]
        files[name] = []
        for f in range(2):
            path = directory / f"{name}-{f}.tfrecord"
            payload = rng.bytes(32 * (bounds[f + 1] - bounds[f]))
            with tf.io.TFRecordWriter(str(path)) as writer:
                for i, record in enumerate(range(bounds[f], bounds[f + 1])):
                    ids.int64_list.value[0] = record
                    x.bytes_list.value[0] = payload[32 * i : 32 * (i + 1)]
                    writer.write(example.SerializeToString())
            files[name].append(str(path))
    info = {
        "files": files,
        "records": records,
        "sizes": sizes,
        "bytes": sum(os.path.getsize(p) for paths in files.values() for p in paths),
    }
    info_path.write_text(json.dumps(info, indent=1))
    return {**info, "reused": False}


def to_array_record(files: dict[str, list[str]], directory: Path) -> dict[str, str]:
    """Each source's records, in order, as one ArrayRecord file (``group_size:1``; kept)."""
    import tensorflow as tf
    from array_record.python.array_record_module import ArrayRecordWriter

    out = {}
    for name, paths in files.items():
        target = directory / f"{name}.array_record"
        out[name] = str(target)
        if target.exists():
            continue
        writer = ArrayRecordWriter(str(target) + ".tmp", "group_size:1")
        for batch in tf.data.TFRecordDataset(paths).batch(4096).as_numpy_iterator():
            for record in batch:
                writer.write(record)
        writer.close()
        os.replace(str(target) + ".tmp", target)
    return out


def _parse_fn() -> Callable[[Any], Any]:
    import tensorflow as tf

    features = {
        "source": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([], tf.string),
    }
    return lambda batch: tf.io.parse_example(batch, features)


def _rate(batches: Iterator[Any], examples: int, seconds: float) -> tuple[float, int]:
    """Examples/s over ``examples`` (or ``seconds``), after a first batch left untimed."""
    next(batches)
    start, count = time.perf_counter(), 0
    for batch in batches:
        count += len(batch["id"]) if isinstance(batch, dict) else len(batch)
        if count >= examples or time.perf_counter() - start > seconds:
            break
    return count / (time.perf_counter() - start), count


# -- the readers -----------------------------------------------------------------------


def mixture_source(files: dict[str, list[str]], num_epochs: int | None = 1) -> Any:
    """Our mixture: the package's reader over the named sources (a ``Source``)."""
    from tfr_hooks import tfrecord

    return tfrecord.source(
        files, BATCH, weights=WEIGHTS, shuffle="global", seed=SEED, num_epochs=num_epochs
    )


def _single_global(files: dict[str, list[str]]) -> Any:
    from tfr_hooks import tfrecord

    every = [p for paths in files.values() for p in paths]
    return tfrecord.source(every, BATCH, shuffle="global", seed=SEED).dataset


def _sample_from(files: dict[str, list[str]]) -> Any:
    import tensorflow as tf

    sources = [
        tf.data.TFRecordDataset(paths).shuffle(BUFFER, seed=SEED).repeat()
        for paths in files.values()
    ]
    mixed = tf.data.Dataset.sample_from_datasets(sources, list(WEIGHTS.values()), seed=SEED)
    mixed = mixed.batch(BATCH).map(
        _parse_fn(), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return mixed.prefetch(tf.data.AUTOTUNE)


def _grain_variants(grain: Any, paths: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """Grain's mix a record a call, and its indices mixed with a batch read a source."""

    def per_record() -> Any:
        sources = [
            grain.MapDataset.source(grain.sources.ArrayRecordDataSource([path]))
            .shuffle(seed=SEED)
            .repeat()
            for path in paths.values()
        ]
        return grain.MapDataset.mix(sources, list(WEIGHTS.values())).batch(BATCH)

    def batched() -> Any:
        opened = [grain.sources.ArrayRecordDataSource([path]) for path in paths.values()]
        keys = [
            grain.MapDataset.range(len(source))
            .shuffle(seed=SEED)
            .repeat()
            .map(lambda k, s=s: (s, int(k)))
            for s, source in enumerate(opened)
        ]
        mixed = grain.MapDataset.mix(keys, list(WEIGHTS.values())).batch(BATCH)

        def read(batch: Any) -> list[bytes]:
            which, index = np.asarray(batch[0]), np.asarray(batch[1])
            out: list[bytes] = [b""] * len(which)
            for s, source in enumerate(opened):
                at = np.flatnonzero(which == s)
                for i, record in zip(at, source.__getitems__(index[at].tolist()), strict=True):
                    out[i] = record
            return out

        return mixed.map(read)

    return {
        "`MapDataset.mix` of `source().shuffle().repeat()`, batched": per_record,
        "indices mixed and batched, a batch read by `__getitems__` a source": batched,
    }


def _readers(
    files: dict[str, list[str]], arrays: dict[str, str] | None
) -> dict[str, Callable[[], Iterator[Any]]]:
    """Each row's reader: a new one a call (files opened, pipeline built)."""
    readers: dict[str, Callable[[], Iterator[Any]]] = {
        "mixture": lambda: iter(mixture_source(files).dataset),
        "single_global": lambda: iter(_single_global(files)),
        "sample_from_datasets": lambda: iter(_sample_from(files)),
    }
    if arrays is not None:
        import grain

        options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=500)
        for name, make in _grain_variants(grain, arrays).items():
            readers[f"grain_mix: {name}"] = lambda make=make: iter(make().to_iter_dataset(options))
    return readers


# -- share errors ----------------------------------------------------------------------


def share_error(sources: np.ndarray) -> float:
    """The largest |share - weight| of any source over every window of :data:`WINDOW`."""
    worst = 0.0
    for i, weight in enumerate(WEIGHTS.values()):
        counts = np.concatenate(([0], np.cumsum(sources == i)))
        shares = (counts[WINDOW:] - counts[:-WINDOW]) / WINDOW
        worst = max(worst, float(np.abs(shares - weight).max()))
    return worst


def share_errors(files: dict[str, list[str]], with_grain: bool) -> dict[str, float]:
    """Each mix's share error: ours from the batches read, the peers' from their choices."""
    import tensorflow as tf

    endless = mixture_source(files, num_epochs=None).dataset
    read = [b["source"].numpy() for b in endless.take(-(-SHARE_POSITIONS // BATCH))]
    errors = {"mixture": share_error(np.concatenate(read)[:SHARE_POSITIONS])}
    constants = [tf.data.Dataset.from_tensors(np.int64(i)).repeat() for i in range(3)]
    picks = tf.data.Dataset.sample_from_datasets(constants, list(WEIGHTS.values()), seed=SEED)
    sampled = np.concatenate(list(picks.take(SHARE_POSITIONS).batch(10_000).as_numpy_iterator()))
    errors["sample_from_datasets"] = share_error(sampled)
    if with_grain:
        import grain

        labels = [grain.MapDataset.range(10**12).map(lambda _, i=i: i) for i in range(3)]
        mixed = grain.MapDataset.mix(labels, list(WEIGHTS.values()))
        errors["grain_mix"] = share_error(np.array([mixed[k] for k in range(SHARE_POSITIONS)]))
    return errors


# -- checkpoints -----------------------------------------------------------------------


def _tf_checkpoint(files: dict[str, list[str]], batches: int, workdir: Path) -> dict[str, Any]:
    """tf.data's iterator checkpoint of ``sample_from_datasets`` after ``batches``."""
    import tensorflow as tf

    iterator = iter(_sample_from(files))
    for _ in range(batches):
        next(iterator)
    prefix = workdir / "mixture_tfdata"
    path = tf.train.Checkpoint(iterator=iterator).write(str(prefix))
    size = sum(p.stat().st_size for p in workdir.glob(f"{prefix.name}*"))
    start = time.perf_counter()
    fresh = iter(_sample_from(files))
    tf.train.Checkpoint(iterator=fresh).read(path).assert_consumed()
    next(fresh)
    return {"bytes": size, "restore_seconds": time.perf_counter() - start}


def _seeked_first_batch(files: dict[str, list[str]], records: int) -> float:
    """Seconds from a new mixture reader, seeked to ``records``, to its first batch."""
    start = time.perf_counter()
    source = mixture_source(files)
    source.position.seek(epoch=0, records=records)
    next(iter(source.dataset))
    return time.perf_counter() - start


def _our_checkpoint(files: dict[str, list[str]], batches: int) -> dict[str, Any]:
    """Our input state after ``batches`` (the position and the mixture's state) and its restore."""
    source = mixture_source(files)
    source.position.seek(epoch=0, records=batches * BATCH)  # where a run of `batches` is
    state = json.dumps(source.position.state()).encode()
    mixture = source.facts.mixture or b""
    return {
        "bytes": len(state) + len(mixture),
        "position_bytes": len(state),
        "mixture_bytes": len(mixture),
        "restore_seconds": _seeked_first_batch(files, batches * BATCH),
    }


def _grain_checkpoint(make: Callable[[], Iterator[Any]], batches: int) -> dict[str, Any]:
    """Grain's ``get_state()`` (as JSON) after ``batches``, restored in a new reader."""
    iterator = make()
    for _ in range(batches):
        next(iterator)
    state = iterator.get_state()  # type: ignore[attr-defined]
    start = time.perf_counter()
    fresh = make()
    fresh.set_state(state)  # type: ignore[attr-defined]
    next(fresh)
    return {
        "bytes": len(json.dumps(state).encode()),
        "restore_seconds": time.perf_counter() - start,
    }


def resume_seconds(files: dict[str, list[str]], records: int, repeats: int) -> dict[str, float]:
    """Seconds from a new mixture reader to its first batch at 10% and 90% of its epoch."""
    seconds: dict[str, list[float]] = {"0.1": [], "0.9": []}
    for _ in range(repeats):
        for share in seconds:
            at = int(records * float(share)) // BATCH * BATCH
            seconds[share].append(_seeked_first_batch(files, at))
    return {share: statistics.median(values) for share, values in seconds.items()}


# -- the run ---------------------------------------------------------------------------


def _rates(
    readers: dict[str, Callable[[], Iterator[Any]]], examples: int, peer_examples: int, rounds: int
) -> dict[str, Any]:
    """Every reader's examples/s in rounds; the mixture / single-source ratio of each round."""
    fast = ("mixture", "single_global")
    runs: dict[str, list[float]] = {name: [] for name in readers}
    read: dict[str, int] = {}
    ratios = []
    for round_ in range(rounds):
        for name in readers if round_ % 2 == 0 else reversed(list(readers)):
            limit, seconds = (examples, SECONDS) if name in fast else (peer_examples, PEER_SECONDS)
            rate, read[name] = _rate(readers[name](), limit, seconds)
            runs[name].append(rate)
        ratios.append(runs["mixture"][-1] / runs["single_global"][-1])
    rates = {name: statistics.median(values) for name, values in runs.items()}
    grains = [name for name in readers if name.startswith("grain_mix: ")]
    out: dict[str, Any] = {"runs": runs, "examples_read": read, "ratios": ratios}
    out["ratio_single_global"] = statistics.median(ratios)
    if grains:
        out["grain_best"] = max(grains, key=lambda name: rates[name])
        rates["grain_mix"] = rates[out["grain_best"]]
    out["examples_per_sec"] = rates
    return out


def mixture_rows(
    directory: str | Path,
    records: int,
    *,
    peer_examples: int,
    rounds: int,
    repeats: int,
    workdir: str | Path,
) -> dict[str, Any]:
    """Every row of issue 54, in one run on the same records; a JSON-able dict."""
    from tfr_hooks.tfrecord.formats.index import index_files

    data = write_sources(directory, records)
    files: dict[str, list[str]] = data["files"]
    for paths in files.values():
        index_files(paths)  # kept beside the files, for the global orders
    try:
        import grain

        arrays: dict[str, str] | None = to_array_record(files, Path(files["web"][0]).parent)
        versions = {"grain": grain.__version__} if hasattr(grain, "__version__") else {}
        grain_error = None
    except ImportError as exc:  # the bench extra not installed
        arrays, versions, grain_error = None, {}, f"{type(exc).__name__}: {exc}"
    readers = _readers(files, arrays)
    peer_examples = max(BATCH, min(peer_examples, records))
    result: dict[str, Any] = {
        "data": {k: v for k, v in data.items() if k != "files"},
        "weights": WEIGHTS,
        "batch_size": BATCH,
        "examples": records,
        "peer_examples": peer_examples,
        "rounds": rounds,
        "grain_error": grain_error,
        **versions,
    }
    result.update(_rates(readers, records, peer_examples, rounds))
    at = max(1, min(records // 10, peer_examples) // BATCH)  # the checkpoints' batches
    Path(workdir).mkdir(parents=True, exist_ok=True)
    checkpoints = {
        "sample_from_datasets": _tf_checkpoint(files, at, Path(workdir)),
        "mixture": _our_checkpoint(files, at),
    }
    if "grain_best" in result:
        checkpoints["grain_mix"] = _grain_checkpoint(readers[result["grain_best"]], at)
    result["checkpoint"] = {"examples": at * BATCH, **checkpoints}
    result["resume_seconds"] = resume_seconds(files, records, repeats)
    result["share_error"] = share_errors(files, arrays is not None)
    return result


def main(argv: list[str] | None = None) -> int:
    """The rows standalone: the positions report's section, and the JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records in all")
    parser.add_argument("--peer-examples", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the rate rows")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the resumes")
    parser.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "tfr_hooks_bench", "mixture"),
        help="where the sources are written (kept for the next run)",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    from mixture_report import mixture_lines

    rows = mixture_rows(
        args.data_dir,
        args.records,
        peer_examples=args.peer_examples,
        rounds=args.rounds,
        repeats=args.repeats,
        workdir=Path(args.data_dir) / "work",
    )
    print("\n".join(mixture_lines({"mixture": rows})))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
