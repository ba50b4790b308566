"""shuffle="global" against a streamed buffer shuffle, and the record index's build rate.

On the issue's layout: 20 classes of 6,000 records in 4 files written in class order by
a plain ``tf.io.TFRecordWriter`` (a label, an id and 16 floats a record), batch 256, one
process. Rows:

- the index build rate (MB/s, wall and CPU), a fresh build of the 4 files each round;
- input alone (read, batch, ``tf.io.parse_example``), examples per second: the global
  order (``GlobalOrder.windows_of``: each window parsed at once, then cut into batches
  of 256, as the readers do) and the same files streamed through
  ``shuffle(10_000)``, in paired rounds (one of each, alternating which goes first); the
  ratio is the median of the rounds' ratios; then the same pair through the readers
  (``tfrecord.dataset(files, 256, shuffle="global")`` against ``shuffle=10_000``:
  what a user gets, the global read parsing a window at once);
- mixing: classes in each of the first 20 batches and the mean total-variation distance
  of a batch's class histogram from uniform, for both;
- the time to the first batch of a read started at 10% and at 90% of the epoch.

    python bench/global_order.py [--rounds 7] [--out bench/results/global_order.md]

A quick side check on the issue's small layout (120,000 records); the run of record of
these rows, on 2M records beside the replay, TensorFlow's iterator checkpoint and Grain,
is ``python bench/run.py --suite positions`` (bench/positions.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np


def write_classes(
    directory: str, classes: int = 20, per_class: int = 6000, files: int = 4
) -> list[str]:
    """The class-ordered files (see the module)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    paths, per_file, record = [], classes // files, 0
    for f in range(files):
        path = os.path.join(directory, f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for label in range(f * per_file, (f + 1) * per_file):
                for _ in range(per_class):
                    feature = {
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[record])),
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(16))),
                    }
                    example = tf.train.Example(features=tf.train.Features(feature=feature))
                    writer.write(example.SerializeToString())
                    record += 1
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import tensorflow as tf

    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.formats.index import build_index
    from tfr_hooks.tfrecord.pipelines.order import GlobalOrder

    features = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([16], tf.float32),
    }
    parse = lambda batch: tf.io.parse_example(batch, features)  # noqa: E731
    with tempfile.TemporaryDirectory() as directory:
        files = write_classes(directory)
        size = sum(os.path.getsize(path) for path in files) / 1e6
        builds = []
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            indexes = [build_index(path) for path in files]
            builds.append((time.perf_counter() - wall, time.process_time() - cpu))
        order = GlobalOrder(indexes, seed=3)
        pipelines = {
            "global": lambda: order.windows_of(0).map(parse).rebatch(256),
            "streamed": lambda: (
                tf.data.TFRecordDataset(files).shuffle(10_000, seed=3).batch(256).map(parse)
            ),
            # what a user gets: the readers, parse and all
            "reader global": lambda: tfrecord.dataset(files, 256, shuffle="global", seed=3),
            "reader streamed": lambda: tfrecord.dataset(files, 256, shuffle=10_000, seed=3),
        }

        def rate(name: str) -> tuple[float, float]:
            wall, cpu, count = time.perf_counter(), time.process_time(), 0
            for batch in pipelines[name]():
                count += int(batch["label"].shape[0])
            return count / (time.perf_counter() - wall), count / (time.process_time() - cpu)

        rates: dict[str, list[tuple[float, float]]] = {name: [] for name in pipelines}
        ratios: dict[str, list[tuple[float, float]]] = {"": [], "reader ": []}
        for round_ in range(args.rounds):
            for kind, pair in ratios.items():
                names = [kind + "global", kind + "streamed"]
                got = {name: rate(name) for name in (names if round_ % 2 else names[::-1])}
                for name in names:
                    rates[name].append(got[name])
                pair.append(tuple(got[names[0]][i] / got[names[1]][i] for i in (0, 1)))
        mixing = {}
        for name in ("global", "streamed"):
            labels = [b["label"].numpy() for b in pipelines[name]().take(20)]
            tv = [0.5 * np.abs(np.bincount(b, minlength=20) / len(b) - 0.05).sum() for b in labels]
            mixing[name] = (min(len(np.unique(b)) for b in labels), float(np.mean(tv)))
        firsts = {}
        for share in (0.1, 0.9):
            position = int(order.total * share)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                next(iter(order.batches(256, start=position)))
                times.append(time.perf_counter() - start)
            firsts[share] = statistics.median(times)
    median = statistics.median
    lines = [
        "# shuffle='global' vs a streamed shuffle=10_000 (bench/global_order.py)",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()}, {os.cpu_count()} cores (shared), TensorFlow {tf.__version__}; "
        f"20 classes x 6,000 records in 4 class-ordered files ({size:.1f} MB), batch 256, "
        f"{args.rounds} paired rounds; 1-minute load average {os.getloadavg()[0]:.1f} at the "
        "end (other processes share the cores: compare the ratios of one run, each a "
        "median of rounds that ran back to back).",
        "",
        "| row | figure | target |",
        "| --- | --- | --- |",
        f"| index build rate | {size / median(b[0] for b in builds):.1f} MB/s wall, "
        f"{size / median(b[1] for b in builds):.1f} MB/s CPU "
        f"({120_000 / median(b[1] for b in builds) / 1e3:.0f}k records/s CPU) | - |",
        *[
            f"| input alone{' (' + kind.strip() + ')' if kind else ''}, {name} | "
            f"{median(r[0] for r in rates[kind + key]):,.0f} examples/s wall, "
            f"{median(r[1] for r in rates[kind + key]):,.0f} /CPU-s | - |"
            for kind in ratios
            for key, name in (("global", "global"), ("streamed", "shuffle=10_000"))
        ],
        *[
            f"| global / streamed{' (' + kind.strip() + ')' if kind else ''}, median of paired "
            f"rounds | {median(r[0] for r in pair):.2f}x wall (rounds "
            f"{min(r[0] for r in pair):.2f}-{max(r[0] for r in pair):.2f}), "
            f"{median(r[1] for r in pair):.2f}x CPU | >= 0.9x |"
            for kind, pair in ratios.items()
        ],
        f"| mixing, global: fewest classes in the first 20 batches, mean TV | "
        f"{mixing['global'][0]} of 20, {mixing['global'][1]:.3f} | >= 15, <= 0.25 |",
        f"| mixing, streamed: fewest classes, mean TV | {mixing['streamed'][0]} of 20, "
        f"{mixing['streamed'][1]:.3f} | - |",
        f"| first batch of a read from 10% / 90% of the epoch | {firsts[0.1]:.3f} s / "
        f"{firsts[0.9]:.3f} s | 90% <= 1.5x 10% + 1 s |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)


if __name__ == "__main__":
    sys.exit(main())
