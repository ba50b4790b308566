"""Small graph-mode models and hooks shared by the fault tests (issue 7)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import tensorflow as tf

import tfr_hooks

v1 = tf.compat.v1

JOIN_TIMEOUT_S = 30  # every wait in these tests is bounded


class LinearModel:
    """``y ~ x @ w + b`` trained by Adam (so there are optimizer slots) with a global step.

    Build inside a graph; ``x`` is a float batch of shape ``[None, 4]``, ``y`` any numeric
    batch of shape ``[None]``.
    """

    def __init__(self, x: Any, y: Any, *, lr: float = 0.05) -> None:
        self.w = tf.Variable(tf.zeros([4, 1]), name="w")
        self.b = tf.Variable(0.0, name="b")
        pred = tf.squeeze(tf.matmul(x, self.w), 1) + self.b
        self.loss = tf.reduce_mean(tf.square(pred - tf.cast(y, tf.float32)))
        self.global_step = v1.train.get_or_create_global_step()
        self.optimizer = v1.train.AdamOptimizer(lr)
        self.train_op = self.optimizer.minimize(self.loss, global_step=self.global_step)
        self.batch_size = tf.shape(x)[0]

    def state(self, session: Any) -> dict[str, np.ndarray]:
        """Every global variable's value by name (weights, Adam slots, step, betas)."""
        variables = v1.global_variables()
        values = session.run(variables)
        return {v.op.name: np.asarray(value) for v, value in zip(variables, values, strict=True)}


class Pace(tfr_hooks.Hook):
    """Sleeps after every step, so that a subprocess is still mid-epoch when signalled."""

    def __init__(self, secs: float) -> None:
        self.secs = secs

    def after_run(self, run_context: Any, run_values: Any) -> None:
        time.sleep(self.secs)


def wait_for_threads(count: int, timeout: float = JOIN_TIMEOUT_S) -> int:
    """Wait (bounded) until ``threading.active_count()`` drops to ``count``; return it."""
    deadline = time.monotonic() + timeout
    while threading.active_count() > count and time.monotonic() < deadline:
        time.sleep(0.05)
    return threading.active_count()
