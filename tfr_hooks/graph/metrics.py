"""Epoch means of fetched values, kept in the graph.

Each step adds ``value * weight`` and ``weight`` to two variables and fetches only the
running means (one float per name), so the per-batch values never travel through Python
to be averaged. The weight is the batch size when the loop knows it, so a final partial
batch counts for what it holds, as Keras weights its loss and metrics. A fetch that is a
weighted mean (a ``weighted_metrics`` entry) brings its own weight, the sum of its
batch's example weights, so that the epoch value is the sum of weight x value over the
epoch's examples over the sum of their weights, as Keras 3's ``fit`` computes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected

__all__ = ["RunningMeans"]


class RunningMeans:
    """Weighted running means of scalar tensors, as graph-mode (v1) ops.

    Args:
        values: Name to scalar tensor (a non-scalar tensor is averaged first).
        weight: The weight of one step, typically the batch size as a tensor or an int;
            ``None`` weighs every step equally.
        name: Name scope for the variables.
        weights: Name to the weight of that value's step, where it is not ``weight``:
            for a weighted mean, the sum of the batch's example weights it divides by.

    Attributes:
        update: A dict name to running-mean tensor; fetching it adds the current step.
        reset: An op that zeroes the totals (run at each epoch start).
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        weight: Any = None,
        name: str = "running_means",
        *,
        weights: Mapping[str, Any] | None = None,
    ) -> None:
        self.names = list(values)
        weights = dict(weights or {})
        unknown = sorted(set(weights) - set(values))
        if unknown:
            raise ValueError(
                expected("weights", f"a dict keyed by names of values ({sorted(values)})", weights)
            )
        with tf.compat.v1.name_scope(name):
            w = _as_weight(weight)
            self._count = _local_variable("count")
            self._totals = {k: _local_variable(f"total_{i}") for i, k in enumerate(values)}
            # a weighted mean's own count: the sum of its examples' weights so far
            self._counts = {
                k: _local_variable(f"count_{i}") for i, k in enumerate(values) if k in weights
            }
            count = tf.compat.v1.assign_add(self._count, w)
            updates = {}
            for key, tensor in values.items():
                step_weight, step_count = w, count
                if key in weights:
                    step_weight = _as_weight(weights[key])
                    step_count = tf.compat.v1.assign_add(self._counts[key], step_weight)
                value = tf.cast(tf.reduce_mean(tensor), tf.float64)
                total = tf.compat.v1.assign_add(self._totals[key], value * step_weight)
                updates[key] = tf.cast(total / tf.maximum(step_count, 1e-12), tf.float32)
            self.update: dict[str, tf.Tensor] = updates
            variables = [self._count, *self._totals.values(), *self._counts.values()]
            self.reset = tf.compat.v1.variables_initializer(variables, name="reset")
            self.initializer = self.reset
            self.count = self._count


def _as_weight(weight: Any) -> Any:
    """A step's weight as a float64 scalar tensor (``None``: 1)."""
    if weight is None:
        return tf.constant(1.0, tf.float64)
    return tf.cast(weight, tf.float64)


def _local_variable(name: str) -> Any:
    return tf.compat.v1.Variable(
        tf.constant(0.0, tf.float64),
        trainable=False,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
        name=name,
        use_resource=True,
    )
