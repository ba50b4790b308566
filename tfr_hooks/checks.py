"""Argument checks shared by the whole package, with one wording for every message.

Every check raises ``TypeError`` or ``ValueError`` with the message
"Expected `name` to be <what>. Received: name=<value>", so a user sees which argument
was wrong and what it held.

Examples:
    >>> check_positive_int(8, "batch_size")
    8
    >>> check_positive_int(0, "batch_size")
    Traceback (most recent call last):
    ...
    ValueError: Expected `batch_size` to be a positive integer. Received: batch_size=0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "expected",
    "check_bool",
    "check_positive_int",
    "check_non_negative_int",
    "check_optional_positive_int",
    "check_positive_number",
    "check_fetches",
]


def expected(name: str, what: str, value: object) -> str:
    """The one wording of an argument error: what ``name`` should be, and what it was.

    Args:
        name: The argument (or ``argument[index]``) at fault.
        what: What it should be, as a noun phrase ("a positive integer").
        value: What it was.

    Returns:
        "Expected `name` to be what. Received: name=value".
    """
    shown = repr(value)
    if len(shown) > _MAX_REPR:  # a huge array or list: its start says enough
        shown = shown[: _MAX_REPR - 3] + "..."
    return f"Expected `{name}` to be {what}. Received: {name}={shown}"


_MAX_REPR = 200


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool; raise ``TypeError`` otherwise."""
    if not isinstance(value, bool):
        raise TypeError(expected(name, "a bool", value))
    return value


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is a positive integer (not a bool); raise ``ValueError``."""
    if not _is_int(value) or value <= 0:  # type: ignore[operator]
        raise ValueError(expected(name, "a positive integer", value))
    return value  # type: ignore[return-value]


def check_non_negative_int(value: object, name: str) -> int:
    """Return ``value`` if it is an integer >= 0 (not a bool); raise ``ValueError``."""
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise ValueError(expected(name, "a non-negative integer", value))
    return value  # type: ignore[return-value]


def check_optional_positive_int(value: object, name: str) -> int | None:
    """Return ``value`` if it is ``None`` or a positive integer; raise ``ValueError``."""
    if value is not None and (not _is_int(value) or value <= 0):  # type: ignore[operator]
        raise ValueError(expected(name, "a positive integer or None", value))
    return value  # type: ignore[return-value]


def check_positive_number(value: object, name: str, *, optional: bool = False) -> float | None:
    """Return ``value`` as a float if it is a positive number (or ``None`` if ``optional``).

    Raises:
        ValueError: If ``value`` is not a positive int or float (bools refused).
    """
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        what = "a positive number or None" if optional else "a positive number"
        raise ValueError(expected(name, what, value))
    return float(value)


def check_fetches(fetches: object, name: str) -> dict[str, Any]:
    """Return ``fetches`` as a dict if it maps non-empty names to graph tensors.

    Raises:
        TypeError: If ``fetches`` is not a mapping, a key is not a non-empty string, or
            a value is not a tensor.
    """
    import tensorflow as tf  # the graph-mode loops' check only

    if not isinstance(fetches, Mapping):
        raise TypeError(expected(name, "a dict from names to scalar tensors", fetches))
    for key, value in fetches.items():
        if not isinstance(key, str) or not key:
            raise TypeError(expected(f"{name} keys", "non-empty strings", key))
        if not isinstance(value, (tf.Tensor, tf.Variable)) and not hasattr(value, "graph"):
            raise TypeError(expected(f"{name}[{key!r}]", "a tensor", value))
    return dict(fetches)
