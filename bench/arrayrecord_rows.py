"""Issue 55's rows: a global-shuffled read of ArrayRecord files, against Grain and the ceiling.

Measured in the positions suite's process (bench/positions.py), on the same records it
converts to ArrayRecord for Grain (``group_size:1``), batch 256, seed 3, examples/s over
the first ``examples`` of the epoch, in paired rounds (every other round in reverse):

- **ours, ArrayRecord**: the pipeline, ``tfrecord.dataset(ar_files, 256,
  shuffle="global", seed=3)``: the global order over ArrayRecord files through the
  record seam (``tfr_hooks.tfrecord.formats.arrayrecord.ArrayRecordFormat``: each block
  of 128 records read by index in one ``tf.numpy_function`` call, no index built),
  parsed a batch at a time;
- **the ceiling**: ``ArrayRecordDataSource.__getitems__`` of the same shuffled indices in
  the same batches, one call after the other, raw records (array_record's own random
  reads, what no reader built on it can beat in one thread);
- **ours, TFRecord**: ``tfrecord.dataset(files, 256, shuffle="global", seed=3)`` on the
  TFRecord files of the same records, parsed.

Grain's best read of the same files is the positions suite's (``grain_rows``). The
targets (bench/arrayrecord_report.py): ours on ArrayRecord at least 2x Grain's best and
at least 0.8x the ceiling.

Standalone, on small data: ``python bench/arrayrecord_rows.py --records 50000``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["ROWS", "arrayrecord_rows"]

BATCH = 256
SEED = 3
#: the rows, in the order they are reported
ROWS = ("ours_array_record", "ceiling", "ours_tfrecord")


def _rate(batches: Iterable[Any], limit: int) -> tuple[float, int]:
    """Examples/s over the first ``limit`` examples of ``batches`` (pipeline start included)."""
    start, count = time.perf_counter(), 0
    for batch in batches:
        count += len(batch)
        if count >= limit:
            break
    return count / (time.perf_counter() - start), count


def _readers(ar_files: list[str], tf_files: list[str]) -> dict[str, Callable[[], Iterable[Any]]]:
    """Each row's reader: a new one a call (files opened, pipeline built)."""
    import tensorflow as tf
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles

    total = len(ArrayRecordFiles(ar_files))
    seed = tf.constant([SEED, 0], tf.int64)
    order = tf.random.experimental.index_shuffle(
        tf.range(total, dtype=tf.int64), seed, total - 1
    ).numpy()

    def ours_array_record() -> Iterable[Any]:
        data = tfrecord.dataset(ar_files, BATCH, shuffle="global", seed=SEED)
        return (b["id"] for b in data)

    def ceiling() -> Iterable[Any]:
        source = ArrayRecordDataSource(ar_files)
        for start in range(0, total - BATCH + 1, BATCH):
            yield source.__getitems__(order[start : start + BATCH].tolist())

    def ours_tfrecord() -> Iterable[Any]:
        data = tfrecord.dataset(tf_files, BATCH, shuffle="global", seed=SEED)
        return (b["id"] for b in data)

    return {
        "ours_array_record": ours_array_record,
        "ceiling": ceiling,
        "ours_tfrecord": ours_tfrecord,
    }


def arrayrecord_rows(
    ar_files: list[str], tf_files: list[str], examples: int, rounds: int
) -> dict[str, Any]:
    """Examples/s of each row over the first ``examples``, medians of ``rounds`` rounds."""
    readers = _readers(ar_files, tf_files)
    runs: dict[str, list[float]] = {name: [] for name in ROWS}
    for round_ in range(rounds):
        for name in ROWS if round_ % 2 == 0 else tuple(reversed(ROWS)):
            rate, _ = _rate(readers[name](), examples)
            runs[name].append(rate)
    return {
        "batch_size": BATCH,
        "examples": examples,
        "examples_per_sec": {name: statistics.median(v) for name, v in runs.items()},
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    """Issue 55's rows standalone: positions_data's records, Grain's best, the targets."""
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    sys.path.insert(0, str(here.parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--examples", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default="/tmp/tfr_hooks_bench/arrayrecord_rows")
    args = parser.parse_args(argv)
    from arrayrecord_report import arrayrecord_targets
    from positions import grain_rows
    from positions_data import write_records

    from tfr_hooks.tfrecord.formats.index import index_files

    root = Path(args.dir)
    files = write_records(root, args.records)["files"]
    index_files(files)
    result: dict[str, Any] = {}
    result["grain"] = grain_rows(
        files, root / f"records-{args.records}-array_record", args.examples
    )
    ar_files = json.loads((root / f"records-{args.records}-array_record" / "info.json").read_text())
    result["arrayrecord"] = arrayrecord_rows(ar_files["files"], files, args.examples, args.rounds)
    grain = result["grain"]
    print(json.dumps({"rows": result["arrayrecord"], "grain_best": grain["best"]}, indent=1))
    for name, v in grain["variants"].items():
        print(f"grain {name}: {v['examples_per_sec']:,.0f} examples/s")
    for target in arrayrecord_targets(result):
        print(f"{target.target}: {target.value} (needed {target.needed}): {target.met}")


if __name__ == "__main__":
    main()
