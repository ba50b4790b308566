"""What ``max_corrupt_records`` costs: the damage scan, and reading a damaged file.

Writes one file of ``--mb`` MB of ``tf.train.Example`` records (``--record-bytes`` of
random bytes each) with a plain ``tf.io.TFRecordWriter``, and a copy damaged near its
start (a flipped data byte in record 0 and a flipped length byte in record 4), so that
almost all of it is read after the damage. Then, for ``--rounds`` interleaved rounds, the
median MB/s of:

* ``scan, undamaged``: :func:`~tfr_hooks.tfrecord.formats.damage.scan_file` on the clean file
  (TensorFlow's C++ record iterator, plus one protobuf parse a record);
* ``scan, damaged``: the same on the damaged copy (read by offset after the damage);
* ``scan, GZIP``: the clean records GZIP-compressed (MB of the uncompressed records);
* ``read, TFRecordDataset``: every record of the clean file, batched by 1,024;
* ``read, whole records of the damaged file``: the same through
  :class:`~tfr_hooks.tfrecord.formats.damage.DamagedReads` (``FixedLengthRecordDataset`` over
  the runs of whole records, split by ``tf.strings.substr``).

Usage::

    PYTHONPATH=. python bench/damage_scan.py --mb 100 --rounds 3 \
        --out bench/results/damage_scan.md
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.damage import DamagedReads, scan_damage, scan_file


def write(path: Path, mb: int, record_bytes: int, compression: str = "") -> int:
    """Write ``mb`` MB of records; return how many."""
    rng = np.random.default_rng(0)
    count = mb * 1_000_000 // (record_bytes + 30)
    with tf.io.TFRecordWriter(str(path), compression or None) as writer:
        for i in range(count):
            features = {
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "b": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[rng.bytes(record_bytes)])
                ),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
            )
    return count


def damage(clean: Path, damaged: Path) -> None:
    data = bytearray(clean.read_bytes())
    at, starts = 0, []
    while len(starts) < 5:
        starts.append(at)
        at += 16 + struct.unpack("<Q", data[at : at + 8])[0]
    data[starts[0] + 20] ^= 0xFF  # record 0's data
    data[starts[4] + 1] ^= 0x01  # record 4's length
    damaged.write_bytes(bytes(data))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def count(data: tf.data.Dataset) -> int:
    return int(data.batch(1024).reduce(np.int64(0), lambda n, b: n + tf.size(b, tf.int64)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logging.getLogger("tfr_hooks.tfrecord.formats.damage").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        clean, damaged, gz = root / "clean.tfrecord", root / "damaged.tfrecord", root / "c.gz"
        records = write(clean, args.mb, args.record_bytes)
        write(gz, args.mb, args.record_bytes, "GZIP")
        damage(clean, damaged)
        mb = os.path.getsize(clean) / 1e6
        found = scan_damage([str(damaged)], "", 2)
        reads = DamagedReads(found)
        rows: dict[str, Callable[[], object]] = {
            "scan, undamaged": lambda: scan_file(str(clean), ""),
            "scan, damaged": lambda: scan_file(str(damaged), ""),
            "scan, GZIP": lambda: scan_file(str(gz), "GZIP"),
            "read, TFRecordDataset": lambda: count(tf.data.TFRecordDataset(str(clean))),
            "read, whole records of the damaged file": lambda: count(
                reads.all_records([str(damaged)])
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        for round_ in range(args.rounds):
            names = list(rows) if round_ % 2 == 0 else list(reversed(rows))
            for name in names:
                times[name].append(timed(rows[name]))
    lines = [
        "# The damage scan and the reads of whole records (`max_corrupt_records`)",
        "",
        f"`PYTHONPATH=. python bench/damage_scan.py --mb {args.mb} --record-bytes "
        f"{args.record_bytes} --rounds {args.rounds}`: one file of {mb:.0f} MB, "
        f"{records:,} records, in the page cache; medians of {args.rounds} interleaved "
        "rounds, one core of a shared 2-core machine, TensorFlow 2.21.",
        "",
        "| what | s | MB/s |",
        "|---|---:|---:|",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.2f} | {mb / median:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
