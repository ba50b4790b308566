"""Holding ``uint8`` where ``map_fn`` only casts and scales, and casting each batch.

Most image tutorials end their decoding function with ``tf.cast(image, tf.float32) /
255``. Held as ``map_fn`` returns it, that is four times the bytes of the decoded
``uint8`` image, and every pass gathers four times the bytes (the whole-pass gather of
small data no longer fits its budget either). :func:`narrowing` finds, while ``map_fn``
is traced, each output that is a ``uint8`` tensor cast to a float and then, at most,
multiplied or divided by a scalar constant; the in-memory pipeline holds the ``uint8``
tensor instead and :class:`Widen` applies the same cast and the same operation with the
same constant to every gathered batch. Element by element that is the computation
``map_fn`` did, so the values a user gets are the same, bit for bit (the tests compare
them exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["Widening", "Widen", "narrowing"]

#: The scaling ops recognised after the cast: the op type and its ``tf`` function.
_SCALE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "RealDiv": tf.math.truediv,
    "Mul": tf.math.multiply,
}


@dataclass(frozen=True)
class Widening:
    """How one held ``uint8`` feature becomes what ``map_fn`` returned.

    Attributes:
        dtype: The float dtype of the cast (``map_fn``'s output dtype).
        op: ``"RealDiv"``, ``"Mul"`` or ``None`` (the cast alone).
        constant: The scalar operand of ``op`` (in ``dtype``), or ``None``.
        constant_first: Whether the constant is the op's first operand (``255 * x``).
    """

    dtype: tf.DType
    op: str | None = None
    constant: np.ndarray | None = None
    constant_first: bool = False

    def __call__(self, held: Any) -> Any:
        """The held ``uint8`` tensor (any batch shape) cast and scaled as ``map_fn`` did."""
        value = tf.cast(held, self.dtype)
        if self.op is None:
            return value
        constant = tf.constant(self.constant, self.dtype)
        scale = _SCALE_OPS[self.op]
        return scale(constant, value) if self.constant_first else scale(value, constant)


@dataclass
class Widen:
    """The batch function that undoes :func:`narrowing`: feature name -> widening.

    Filled while ``map_fn`` is traced; empty when no output was narrowed.
    """

    features: dict[str, Widening] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.features)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """``batch`` with each narrowed feature widened (the others unchanged)."""
        out = dict(batch)
        for name, widening in self.features.items():
            out[name] = widening(out[name])
        return out


def _cast_from_uint8(tensor: Any) -> Any:
    """The ``uint8`` input of ``tensor`` if it is a ``Cast`` of one to a float, else ``None``."""
    op = tensor.op
    if op.type != "Cast" or not tensor.dtype.is_floating:
        return None
    source = op.inputs[0]
    return source if source.dtype == tf.uint8 else None


def _scalar_constant(tensor: Any) -> np.ndarray | None:
    """The value of ``tensor`` if it is a scalar constant of the graph, else ``None``."""
    if tensor.op.type != "Const" or tensor.shape.rank != 0:
        return None
    value = tf.get_static_value(tensor)
    return None if value is None else np.asarray(value)


def _narrowed(tensor: Any) -> tuple[Any, Widening] | None:
    """The ``uint8`` tensor ``tensor`` was computed from by a cast and a scale, if so."""
    if not isinstance(tensor, tf.Tensor) or not hasattr(tensor, "op"):
        return None  # eager tensors: nothing traced to look at
    source = _cast_from_uint8(tensor)
    if source is not None:
        return source, Widening(tensor.dtype)
    op = tensor.op
    if op.type not in _SCALE_OPS or len(op.inputs) != 2:
        return None
    for position in (0, 1):
        cast, constant = op.inputs[1 - position], op.inputs[position]
        value = _scalar_constant(constant)
        source = _cast_from_uint8(cast)
        if value is not None and source is not None:  # a scalar: the shape stays the cast's
            return source, Widening(tensor.dtype, op.type, value, constant_first=position == 0)
    return None


def narrowing(map_fn: Callable[[Any], Any]) -> tuple[Callable[[Any], Any], Widen]:
    """``map_fn`` returning held ``uint8`` tensors where it only casts and scales them.

    Args:
        map_fn: The user's function (one example -> a dict of tensors), as the in-memory
            pipeline calls it.

    Returns:
        The function to hold the outputs of, and the :class:`Widen` that turns a batch
        of its outputs into a batch of ``map_fn``'s (filled when the function is traced;
        it traces the same way each time).
    """
    widen = Widen()

    def narrowed(example: Any) -> Any:
        out = map_fn(example)
        if not isinstance(out, dict):
            return out
        held = dict(out)
        for name, tensor in out.items():
            found = _narrowed(tensor)
            if found is not None:
                held[name], widen.features[name] = found
        return held

    return narrowed, widen
