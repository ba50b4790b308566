"""Epoch means of fetched values, kept in the graph.

Each step adds ``value * weight`` and ``weight`` to two variables and fetches only the
running means (one float per name), so the per-batch values never travel through Python
to be averaged. The weight is the batch size when the loop knows it, so a final partial
batch counts for what it holds, as Keras weights its loss and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

__all__ = ["RunningMeans"]


class RunningMeans:
    """Weighted running means of scalar tensors, as graph-mode (v1) ops.

    Args:
        values: Name to scalar tensor (a non-scalar tensor is averaged first).
        weight: The weight of one step, typically the batch size as a tensor or an int;
            ``None`` weighs every step equally.
        name: Name scope for the variables.

    Attributes:
        update: A dict name to running-mean tensor; fetching it adds the current step.
        reset: An op that zeroes the totals (run at each epoch start).
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        weight: Any = None,
        name: str = "running_means",
    ) -> None:
        self.names = list(values)
        with tf.compat.v1.name_scope(name):
            w = tf.constant(1.0) if weight is None else tf.cast(weight, tf.float64)
            w = tf.cast(w, tf.float64)
            self._count = _local_variable("count")
            self._totals = {k: _local_variable(f"total_{i}") for i, k in enumerate(values)}
            count = tf.compat.v1.assign_add(self._count, w)
            updates = {}
            for key, tensor in values.items():
                value = tf.cast(tf.reduce_mean(tensor), tf.float64)
                total = tf.compat.v1.assign_add(self._totals[key], value * w)
                updates[key] = tf.cast(total / tf.maximum(count, 1e-12), tf.float32)
            self.update: dict[str, tf.Tensor] = updates
            variables = [self._count, *self._totals.values()]
            self.reset = tf.compat.v1.variables_initializer(variables, name="reset")
            self.initializer = self.reset
            self.count = self._count


def _local_variable(name: str) -> Any:
    return tf.compat.v1.Variable(
        tf.constant(0.0, tf.float64),
        trainable=False,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
        name=name,
        use_resource=True,
    )
