"""A side probe for issue 55: reading ArrayRecord by batches of indices, against its ceiling.

Not part of the run of record. It writes the positions suite's class-ordered records
(``bench/positions_data.py``) as TFRecord and as ArrayRecord (``group_size:1``), then reads,
in one process, examples/s over the first ``--examples`` of a global shuffle:

- ours: ``Dataset.range(batches)`` -> the batch's shuffled indices
  (``tf.random.experimental.index_shuffle``) -> one ``read_records`` call a batch
  (``tfr_hooks.tfrecord.formats.arrayrecord``) -> ``tf.io.parse_example``, parallel calls;
- the library's own ceiling: ``ArrayRecordDataSource.__getitems__`` on the same batches of
  a shuffled permutation, one call after the other;
- our TFRecord global order (``tfrecord.dataset(..., shuffle="global")``).

Usage: ``python bench/arrayrecord_probe.py --records 200000 --dir /tmp/arprobe``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BATCH = 256


def _write(directory: Path, records: int) -> tuple[list[str], list[str]]:
    from positions_data import write_records

    from tfr_hooks.tfrecord.formats.arrayrecord import write_array_record
    from tfr_hooks.tfrecord.formats.framing import iter_records

    info = write_records(directory, records)
    ar_dir = directory / f"array_record-{records}"
    ar_dir.mkdir(parents=True, exist_ok=True)
    ar_files = []
    for path in info["files"]:
        target = ar_dir / (os.path.basename(path) + ".array_record")
        if not target.exists():
            write_array_record(target, iter_records(path))
        ar_files.append(str(target))
    return list(info["files"]), ar_files


def _rate(batches: Any, limit: int) -> float:
    start, count = time.perf_counter(), 0
    for batch in batches:
        count += len(batch)
        if count >= limit:
            break
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--examples", type=int, default=60_000)
    parser.add_argument("--dir", default="/tmp/arprobe")
    args = parser.parse_args()
    import numpy as np
    import tensorflow as tf
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles, read_records

    tf_files, ar_files = _write(Path(args.dir), args.records)
    features = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "id": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([], tf.string),
    }
    files = ArrayRecordFiles(ar_files)
    total = len(files)

    def indices(batch: Any) -> Any:
        positions = tf.range(batch * BATCH, (batch + 1) * BATCH, dtype=tf.int64)
        return tf.random.experimental.index_shuffle(
            positions, tf.constant([3, 0], tf.int64), total - 1
        )

    def ours() -> Any:
        data = tf.data.Dataset.range(total // BATCH).map(indices)
        data = data.map(lambda keys: read_records(files, keys), num_parallel_calls=tf.data.AUTOTUNE)
        parsed = data.map(lambda r: tf.io.parse_example(r, features), tf.data.AUTOTUNE)
        return (b["id"] for b in parsed.prefetch(4))

    source = ArrayRecordDataSource(ar_files)
    order = np.random.default_rng(3).permutation(total)

    def ceiling() -> Any:
        for start in range(0, total - BATCH + 1, BATCH):
            yield source.__getitems__(order[start : start + BATCH].tolist())

    def tfrecord_global() -> Any:
        data = tfrecord.dataset(tf_files, BATCH, shuffle="global", seed=3)
        return (b["id"] for b in data)

    rows = {}
    for name, make in [("ours", ours), ("ceiling", ceiling), ("tfrecord_global", tfrecord_global)]:
        rows[name] = [round(_rate(make(), args.examples)) for _ in range(2)]
    print(json.dumps({"records": total, "batch": BATCH, "examples_per_s": rows}, indent=1))


if __name__ == "__main__":
    main()
