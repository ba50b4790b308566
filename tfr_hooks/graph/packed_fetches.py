"""A step's scalar fetches packed into one tensor: one fetched value a ``session.run``.

``session.run`` (and a callable of ``session.make_callable``) maps a structure of fetches
back onto their values in Python on every call: for a dict of a few scalars (a step's
running means, its batch size, its input wait) that mapping costs tens of microseconds
a step, as much as the measured difference between ``SessionLoop`` and a hand-written
loop on a small model. :class:`PackedFetches` builds, once, a float64 vector of those
scalars that runs after the train op (a control dependency), so a step fetches one
tensor and the loop reads the values back by position.

float64 holds every value exactly: float32 running means (float32 to float64 is exact),
float64 input waits and integer batch sizes below 2**53.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["PackedFetches"]


class PackedFetches:
    """Scalar fetches (a dict, one level of dicts allowed) as one float64 vector.

    Build it in the fetches' graph. ``tensor`` runs ``targets`` first; fetch it (alone, or
    with a hook's fetches in one ``session.run``) and :meth:`unpack` its value into the
    fetches' structure, each value a Python ``float``.

    Args:
        scalars: Name to a scalar tensor, or to a dict of name to scalar tensor. ``None``
            entries are left out.
        targets: Ops or tensors that must run in the same step (the train op).

    Attributes:
        tensor: The packed float64 vector, or ``None`` when there is nothing to pack or a
            value's shape is not known to be a scalar's (fetch the structure itself then).
    """

    def __init__(self, scalars: Mapping[str, Any], targets: Sequence[Any]) -> None:
        self._layout: list[tuple[str, str | None]] = []
        values = []
        for key, item in scalars.items():
            if item is None:
                continue
            if isinstance(item, Mapping):
                for name, tensor in item.items():
                    self._layout.append((key, name))
                    values.append(tensor)
            else:
                self._layout.append((key, None))
                values.append(item)
        self._groups = [key for key, item in scalars.items() if isinstance(item, Mapping)]
        self.tensor: Any = None
        if not values or any(v.shape.rank != 0 for v in values):
            return  # nothing to pack, or a value not known to be a scalar: fetched as given
        with tf.name_scope("tfr_hooks_packed_fetches"):
            cast = [tf.cast(v, tf.float64) for v in values]
            with tf.control_dependencies([t for t in targets if t is not None]):
                self.tensor = tf.stack(cast)

    def unpack(self, packed: Any) -> dict[str, Any]:
        """The fetches' structure with the values of ``packed`` (the fetched vector)."""
        result: dict[str, Any] = {key: {} for key in self._groups}
        for (key, name), value in zip(self._layout, packed.tolist(), strict=True):
            if name is None:
                result[key] = value
            else:
                result[key][name] = value
        return result
