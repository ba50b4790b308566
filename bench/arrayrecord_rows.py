"""Issue 55's rows: a global-shuffled read of ArrayRecord files, against Grain and the ceiling.

Measured in the positions suite's process (bench/positions.py), on the same records it
converts to ArrayRecord for Grain (``group_size:1``), batch 256, seed 3: examples/s over
the same first ``examples`` of the epoch for every row, each a new reader (files opened
and pipeline built before the clock starts; its first batch's reads, the global order's
first window included, timed), in paired rounds (every other round in reverse):

- **ours, ArrayRecord**: the pipeline, ``tfrecord.dataset(ar_files, 256,
  shuffle="global", seed=3)``: the global order over ArrayRecord files through the
  record seam, each window's records read in the window's order by record number, 2,048
  a call in one ``tf.numpy_function`` with calls in flight
  (``tfr_hooks/tfrecord/pipelines/orders/index_reads.py``), parsed a batch at a time;
- **Grain's best**: the variant of Grain's read that was fastest in the positions
  suite's Grain rows (``grain_rows``), read again here, paired with ours, over the same
  examples (raw records, no parse);
- **the ceiling**: ``ArrayRecordDataSource.__getitems__`` of the same shuffled indices in
  the same batches, one call after the other, raw records (array_record's own random
  reads, what no reader built on it can beat in one thread);
- **the ceiling at our read size** (not a target): the same, ``READ_PIECE`` (2,048)
  indices a call, the size of our reads;
- **ours, TFRecord**: ``tfrecord.dataset(files, 256, shuffle="global", seed=3)`` on the
  TFRecord files of the same records, parsed.

The targets (bench/arrayrecord_report.py): ours on ArrayRecord at least 2x Grain's best
and at least 0.8x the ceiling.

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
#: the rows, in the order they are reported (``grain_best`` when Grain is installed)
ROWS = ("ours_array_record", "grain_best", "ceiling", "ceiling_piece", "ours_tfrecord")


def _rate(batches: Iterable[Any], limit: int) -> tuple[float, int]:
    """Examples/s over the first ``limit`` examples of ``batches`` (pipeline start included)."""
    start, count = time.perf_counter(), 0
    for batch in batches:
        count += len(batch)
        if count >= limit:
            break
    return count / (time.perf_counter() - start), count


def _grain_reader(ar_files: list[str], variant: str) -> Callable[[], Iterable[Any]]:
    """Grain's read ``variant`` (a name of the positions suite's Grain variants)."""
    import grain
    from positions import _grain_variants

    pipeline, threads = _grain_variants(grain, ar_files)[variant]
    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=500)
    return lambda: iter(pipeline().to_iter_dataset(options))


def _readers(
    ar_files: list[str], tf_files: list[str], grain_variant: str | None
) -> dict[str, Callable[[], Iterable[Any]]]:
    """Each row's reader: a new one a call (files opened, pipeline built)."""
    import tensorflow as tf
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles
    from tfr_hooks.tfrecord.pipelines.orders.global_order import READ_PIECE

    total = len(ArrayRecordFiles(ar_files))
    seed = tf.constant([SEED, 0], tf.int64)
    order = tf.random.experimental.index_shuffle(
        tf.range(total, dtype=tf.int64), seed, total - 1
    ).numpy()

    def ours_array_record() -> Iterable[Any]:  # a new reader: its start included
        data = tfrecord.dataset(ar_files, BATCH, shuffle="global", seed=SEED)
        return (b["id"] for b in data)

    def ceiling(size: int = BATCH) -> Iterable[Any]:
        source = ArrayRecordDataSource(ar_files)  # opened before the clock, as the others
        return (
            source.__getitems__(order[start : start + size].tolist())
            for start in range(0, total - size + 1, size)
        )

    def ours_tfrecord() -> Iterable[Any]:
        data = tfrecord.dataset(tf_files, BATCH, shuffle="global", seed=SEED)
        return (b["id"] for b in data)

    readers = {
        "ours_array_record": ours_array_record,
        "ceiling": ceiling,
        "ceiling_piece": lambda: ceiling(READ_PIECE),
        "ours_tfrecord": ours_tfrecord,
    }
    if grain_variant is not None:
        readers["grain_best"] = _grain_reader(ar_files, grain_variant)
    return readers


def arrayrecord_rows(
    ar_files: list[str],
    tf_files: list[str],
    examples: int,
    rounds: int,
    grain_variant: str | None = None,
) -> dict[str, Any]:
    """Examples/s of each row over the first ``examples``, medians of ``rounds`` rounds.

    ``grain_variant``: the name of Grain's best read in the positions suite's Grain rows,
    read again here (``None``: Grain not installed, the row left out).
    """
    readers = _readers(ar_files, tf_files, grain_variant)
    names = [name for name in ROWS if name in readers]
    runs: dict[str, list[float]] = {name: [] for name in names}
    counts: dict[str, list[int]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            rate, count = _rate(readers[name](), examples)
            runs[name].append(rate)
            counts[name].append(count)
    result = {
        "batch_size": BATCH,
        "examples": examples,
        "examples_read": {name: min(v) for name, v in counts.items()},
        "examples_per_sec": {name: statistics.median(v) for name, v in runs.items()},
        "runs": runs,
    }
    if grain_variant is not None:
        result["grain_variant"] = grain_variant
    return result


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
    grain = result["grain"]
    result["arrayrecord"] = arrayrecord_rows(
        ar_files["files"], files, args.examples, args.rounds, grain["best"]
    )
    print(json.dumps({"rows": result["arrayrecord"], "grain_best": grain["best"]}, indent=1))
    for name, v in grain["variants"].items():
        print(f"grain {name}: {v['examples_per_sec']:,.0f} examples/s")
    for target in arrayrecord_targets(result):
        print(f"{target.target}: {target.value} (needed {target.needed}): {target.met}")


if __name__ == "__main__":
    main()
