"""A training process whose read stalls, for the SIGTERM tests (issue 36, item 2).

``stalled_read.py {function,session} ADDRESS DATA``: trains on the TFRecord files in DATA
read through the tf.data service at ADDRESS (with a user's ``.map`` after the reader in
TF2), with a ``service_timeout`` of 10 minutes. It prints ``READY`` after its fifth step
(the test then kills a worker: the epoch's end never comes, and the read stalls) and
``END`` from a hook's ``end``; the test sends SIGTERM while the read is stalled.
"""

from __future__ import annotations

import sys
import threading

import tensorflow as tf

import tfr_hooks
from tfr_hooks import tfrecord


class Ready(tfr_hooks.Hook):
    """Prints READY after the fifth step, and END (with the threads left) in ``end``."""

    def __init__(self) -> None:
        self.steps = 0

    def after_run(self, run_context, run_values) -> None:
        self.steps += 1
        if self.steps == 5:
            print("READY", flush=True)

    def end(self, session) -> None:
        names = sorted(t.name for t in threading.enumerate() if t.name != "MainThread")
        print("END", self.steps, names, flush=True)


def main() -> None:
    mode, address, data = sys.argv[1:4]
    hook = Ready()
    if mode == "function":
        source = tfrecord.dataset(data, 8, as_tuple=("x",), service=address)
        mapped = source.map(lambda x: tf.cast(x, tf.float32) * 2.0)  # the user's .map
        loop = tfr_hooks.FunctionLoop(
            mapped,
            step_fn=lambda x: {"mean": tf.reduce_mean(x)},
            hooks=[hook],
            service_timeout=600,
        )
        loop.run(epochs=3)
    else:
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(data, 8, service=address)
            mean = tf.reduce_mean(tf.cast(batches.tensors["x"], tf.float32))
            loop = tfr_hooks.SessionLoop(
                mean, {"mean": mean}, data=batches, hooks=[hook], service_timeout=600
            )
            loop.run(epochs=3)
    print("FINISHED", flush=True)  # not reached: the epoch never ends


if __name__ == "__main__":
    main()
