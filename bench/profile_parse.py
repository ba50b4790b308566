"""Where the packed text rows spend their time: parsing values, not records.

Reads the real suite's token data (``bench/run.py --suite real`` writes it, and its
packed copy) with the records already in memory, so only the parse is timed:

* the streamed pipeline's step: ``tf.io.parse_example`` of 128 one-example records;
* the packed pipeline's step: one 128-example record, parsed and unpacked;
* the packed record's ``tf.io.parse_example`` alone (values and row lengths).

Run:
    python bench/profile_parse.py [--data-dir /tmp/tfr_hooks_bench/real]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if (HERE.parent / "tfr_hooks").is_dir():
    sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", default="/tmp/tfr_hooks_bench/real", help="the real suite's data"
    )
    parser.add_argument("--texts", type=int, default=50000, help="sequences in the data set")
    parser.add_argument("--passes", type=int, default=3, help="timed passes of each step")
    args = parser.parse_args(argv)

    import tensorflow as tf

    from tfr_hooks.tfrecord.formats.packed import lengths_name, unpack
    from tfr_hooks.tfrecord.schema.sidecar import load_schema

    source = Path(args.data_dir) / f"text-{args.texts}-seed0-v1"
    packed = source.parent / (source.name + "-packed")
    if not (packed / "schema.json").exists():
        print(f"No packed data in {packed}: run bench/run.py --suite real first", file=sys.stderr)
        return 1
    schema = load_schema(packed)
    streamed = tf.data.TFRecordDataset(sorted(map(str, source.glob("*.tfrecord"))))
    blocks = tf.data.TFRecordDataset(sorted(map(str, packed.glob("*.tfrecord"))))
    streamed, blocks = streamed.batch(128).cache(), blocks.batch(1).cache()
    for data in (streamed, blocks):  # fill the caches: the reads are not timed
        for _ in data:
            pass
    spec = {f.name: tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64) for f in schema}
    spec[lengths_name("tokens")] = tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)
    options = tf.data.Options()
    options.autotune.enabled = False
    steps = (
        ("streamed: parse_example of 128 records", streamed, schema.parse_batch),
        ("packed: 1 record of 128, parsed and unpacked", blocks, lambda s: unpack(schema, s, 128)),
        ("packed: its parse_example alone", blocks, lambda s: tf.io.parse_example(s, spec)),
    )
    for name, records, step in steps:
        data = records.map(step).with_options(options)
        start = time.perf_counter()
        for _ in range(args.passes):
            for _ in data:
                pass
        rate = args.passes * args.texts / (time.perf_counter() - start)
        print(f"{name}: {rate:,.0f} examples/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
