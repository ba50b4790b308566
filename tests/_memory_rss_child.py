"""The script a memory test runs in a fresh process: how much anonymous memory holding costs.

``python tests/_memory_rss_child.py DIR EXAMPLES`` writes ``EXAMPLES`` digits-sized
examples (784 ``uint8`` pixels and an ``int64`` label) in 8 shards in ``DIR/held``, and
1,000 more in ``DIR/warm``. It reads the warm shards once in memory, so that the
runtime's own memory (thread pools, tf.data's first functions) is in the baseline, then
holds the large shards with ``tfrecord.dataset(in_memory=True)``, hands the C
allocator's free memory back to the system, reads three passes, and prints one JSON
line: the bytes held; the process's anonymous RSS (``RssAnon``) over the baseline after
the load, and after the passes (bytes); and the bytes the hand-back after the load
released.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import tensorflow as tf

from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.pipelines.memory.allocator import release_free_memory


def anon_rss() -> int:
    """The process's anonymous resident memory (``RssAnon`` of ``/proc/self/status``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def write(directory: str, examples: int, shards: int) -> int:
    """Digits-sized examples in ``shards`` shards; the bytes they take decoded."""
    rng = np.random.default_rng(0)
    arrays = {
        "image": rng.integers(0, 256, (examples, 784), dtype=np.uint8),
        "label": np.arange(examples, dtype=np.int64) % 10,
    }
    tfrecord.write(arrays, directory, shards=shards)
    return sum(value.nbytes for value in arrays.values())


def main(directory: str, examples: int) -> None:
    shards, warm = os.path.join(directory, "held"), os.path.join(directory, "warm")
    held = write(shards, examples, shards=8)
    write(warm, 1000, shards=2)
    for _ in tfrecord.dataset(warm, 128, in_memory=True, shuffle="global", num_epochs=1):
        pass
    base = anon_rss()
    data = tfrecord.dataset(
        shards, 128, in_memory=True, shuffle="global", num_epochs=3, drop_remainder=True
    )
    loaded = anon_rss() - base
    release_free_memory()
    released = loaded - (anon_rss() - base)
    batches = sum(1 for _ in data)
    passes = anon_rss() - base
    print(
        json.dumps(
            {
                "held": held,
                "loaded": loaded,
                "released": released,
                "passes": passes,
                "batches": batches,
            }
        )
    )


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    main(sys.argv[1], int(sys.argv[2]))
