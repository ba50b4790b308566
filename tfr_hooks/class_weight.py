"""Class weights as ``model.fit(class_weight=...)`` means them, for both loops.

A ``class_weight`` dict maps a class index to a weight. Each example of a training batch
is weighted by its label's class: the label itself for sparse labels (rounded, as Keras
rounds them), the argmax for one-hot (or probability) labels, and the single value of a
``(batch, 1)`` label. The weight multiplies any sample weight the batch already has.

Unlike ``model.fit``, which weighs a class missing from the dict 1.0, a label whose
class has no weight stops the step with an ``InvalidArgumentError`` naming the class: a
class left out of the dict (or a label out of range) is then a mistake seen, not a
silently unweighted class.

Used by :class:`~tfr_hooks.FunctionLoop` (on each training batch, in the compiled step)
and by :func:`~tfr_hooks.keras_training_graph` (on the label tensor, in the graph).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfr_hooks.checks import expected

__all__ = ["check_class_weight", "class_weights", "combined_weights", "weigh_batch"]

_WHAT = "a dict from class index (an integer >= 0) to weight (a finite number >= 0)"


def check_class_weight(class_weight: object) -> dict[int, float] | None:
    """Return ``class_weight`` as ``{int: float}``, or ``None``; raise for a wrong one.

    Args:
        class_weight: ``None``, or a mapping from class index to weight, e.g.
            ``{0: 1.0, 1: 3.0, 2: 6.0}`` (NumPy integer and float scalars are fine).

    Returns:
        The mapping with Python ``int`` keys and ``float`` values, or ``None``.

    Raises:
        TypeError: ``class_weight`` is not a mapping.
        ValueError: It is empty, or a key or value is not of the kind above.
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, Mapping):
        raise TypeError(expected("class_weight", f"None or {_WHAT}", class_weight))
    if not class_weight:
        raise ValueError(expected("class_weight", f"None or {_WHAT}, not empty", class_weight))
    result: dict[int, float] = {}
    for key, value in class_weight.items():
        if not _is_index(key):
            raise ValueError(
                expected(
                    "class_weight", f"{_WHAT}; the key {key!r} is not a class index", class_weight
                )
            )
        if not _is_weight(value):
            raise ValueError(
                expected(
                    "class_weight",
                    f"{_WHAT}; the weight of class {key!r} is {value!r}",
                    class_weight,
                )
            )
        result[int(key)] = float(value)
    return result


def _is_index(key: object) -> bool:
    return isinstance(key, numbers.Integral) and not isinstance(key, bool) and int(key) >= 0


def _is_weight(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(float(value)) and float(value) >= 0


def class_weights(labels: Any, class_weight: Mapping[int, float]) -> Any:
    """The weight of each example of a batch, looked up from its label's class.

    Args:
        labels: The batch's labels: class indices of shape ``(batch,)`` or
            ``(batch, 1)``, or one-hot (or probability) rows of shape ``(batch, classes)``
            (the class is the argmax), as ``model.fit`` reads them.
        class_weight: A mapping checked by :func:`check_class_weight`.

    Returns:
        A ``float32`` tensor of shape ``(batch,)``. Evaluating it fails with an
        ``InvalidArgumentError`` naming the classes that have no weight in the dict.

    Raises:
        ValueError: ``labels`` has rank 0 or an unknown rank.
    """
    labels = tf.convert_to_tensor(labels)
    rank = labels.shape.rank
    if rank is None or rank == 0:
        raise ValueError(
            expected(
                "labels",
                "a batch of labels, of shape (batch,), (batch, 1) or (batch, classes), "
                "for class_weight",
                labels,
            )
        )
    if rank == 1:
        classes = _rounded(labels)
    elif labels.shape[-1] == 1:
        classes = _rounded(tf.squeeze(labels, axis=-1))
    elif labels.shape[-1] is not None:  # one-hot (or probabilities): the argmax, as fit
        classes = tf.argmax(labels, axis=-1, output_type=tf.int64)
    else:  # the width is known only when the step runs
        classes = tf.cond(
            tf.shape(labels)[-1] > 1,
            lambda: tf.argmax(labels, axis=-1, output_type=tf.int64),
            lambda: _rounded(labels[..., 0]),
        )
    size = max(class_weight) + 1
    table = tf.constant([class_weight.get(c, 0.0) for c in range(size)], tf.float32)
    known = tf.constant([c in class_weight for c in range(size)])
    index = tf.clip_by_value(classes, 0, size - 1)
    valid = (classes >= 0) & (classes < size) & tf.gather(known, index)
    missing, _ = tf.unique(tf.reshape(tf.boolean_mask(classes, ~valid), [-1]))
    check = tf.debugging.Assert(
        tf.reduce_all(valid),
        [
            "Expected `class_weight` to have a weight for the class of every training "
            "label; these classes of a training batch have none (give each class a "
            f"weight). Received: class_weight={dict(class_weight)!r}; classes without "
            "a weight:",
            missing,
        ],
        summarize=20,
        name="class_weight_check",
    )
    with tf.control_dependencies([check]):
        return tf.gather(table, index)


def _rounded(labels: Any) -> Any:
    """Class indices from sparse labels, rounded as Keras rounds float ones."""
    if labels.dtype.is_floating:
        labels = tf.round(labels)
    return tf.cast(labels, tf.int64)


def combined_weights(sample_weight: Any, weights: Any) -> Any:
    """``sample_weight`` (``None`` or a tensor) times per-example ``weights``.

    A ``(batch, ...)`` sample weight keeps its shape: the per-example weight multiplies
    each of its rows.
    """
    if sample_weight is None:
        return weights
    sample_weight = tf.convert_to_tensor(sample_weight)
    rank = sample_weight.shape.rank
    if rank is not None and rank > 1:
        weights = tf.reshape(weights, [-1] + [1] * (rank - 1))
    return tf.cast(sample_weight, weights.dtype) * weights


def weigh_batch(batch: Any, class_weight: Mapping[int, float]) -> Any:
    """A Keras training batch with its class weights: ``(x, y, sample_weight)``.

    Args:
        batch: ``(x, y)`` or ``(x, y, sample_weight)``, as ``model.fit`` takes it, with
            ``y`` a single tensor (one model output).
        class_weight: A mapping checked by :func:`check_class_weight`.

    Returns:
        ``(x, y, w)``: ``w`` is the class weight of each example, times the batch's
        sample weight when it has one.

    Raises:
        ValueError: The batch is not such a tuple, or ``y`` is nested (several outputs).
    """
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        raise ValueError(
            expected(
                "data",
                "batches of (x, y) or (x, y, sample_weight) tuples for class_weight "
                "(the class of each example is read from y)",
                batch,
            )
        )
    x, y = batch[0], batch[1]
    sample_weight = batch[2] if len(batch) == 3 else None
    if tf.nest.is_nested(y):
        raise ValueError(
            expected(
                "class_weight",
                "None for a model with several outputs (class_weight weighs the "
                "examples of a single output by its label; give the weights as a "
                "sample_weight column instead)",
                class_weight,
            )
        )
    weights = combined_weights(sample_weight, class_weights(y, class_weight))
    # x and y wait for the weights (and so for the check of the classes): a batch with a
    # class without weight updates no metric or variable the step computes from them
    with tf.control_dependencies([weights]):
        x, y = tf.nest.map_structure(tf.identity, (x, y))
    return x, y, weights
