"""Inferring a :class:`~.schema.Schema` from arrays: the dtype, shape and encoding of each.

What :meth:`Feature.for_array <tfr_hooks.tfrecord.schema.schema.Feature.for_array>` (and so
:meth:`Schema.from_arrays <tfr_hooks.tfrecord.schema.schema.Schema.from_arrays>`) chooses, for
:func:`~tfr_hooks.tfrecord.write`: numeric and string arrays, and object arrays of 1-D
lists (a feature of varying length). (A schema inferred from records is
:func:`~tfr_hooks.tfrecord.infer_schema`'s, in ``inspection.py``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NUMERIC_DTYPES", "STRING_DTYPES", "auto_encoding", "for_array"]

#: The numeric dtypes a feature may have (each stored in its encoding).
NUMERIC_DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
)
#: The dtypes of a feature of strings (the ``"bytes"`` encoding).
STRING_DTYPES = ("string", "bytes")
#: The encoding that :func:`auto_encoding` chooses (``schema.AUTO``).
AUTO = "auto"


def for_array(name: str, array: np.ndarray) -> tuple[str, tuple[int | None, ...], str]:
    """Choose the dtype, shape and encoding to store ``array[i]`` for each example ``i``.

    Args:
        name: The feature name.
        array: All examples' values, stacked along the first axis.

    Returns:
        The feature's ``(dtype, shape, encoding)``, its encoding ``"auto"`` when
        :func:`auto_encoding` chooses it.

    Raises:
        TypeError: If the dtype cannot be stored.
    """
    shape = tuple(int(d) for d in array.shape[1:])
    if array.dtype.kind == "O" and array.ndim == 1 and _holds_lists(array):
        return _list_dtype(name, array), (None,), AUTO
    if array.dtype.kind in "USO":
        dtype = "string" if array.dtype.kind in "UO" else "bytes"
        return dtype, shape, "bytes"
    dtype = array.dtype.name
    if dtype not in NUMERIC_DTYPES:
        raise TypeError(
            f"Expected array {name!r} to have a bool, integer, float or string dtype. "
            f"Received: dtype={array.dtype}"
        )
    return dtype, shape, AUTO


def _holds_lists(array: np.ndarray) -> bool:
    """Whether an object array holds one list (or 1-D array) of values per example."""
    return any(isinstance(item, (np.ndarray, list, tuple)) for item in array.tolist()[:64])


def _list_dtype(name: str, array: np.ndarray) -> str:
    """The dtype of the values of an object array of 1-D lists (varying length)."""
    dtypes = set()
    for index, item in enumerate(array.tolist()):
        row = np.asarray(item)
        if row.ndim != 1:
            raise ValueError(
                f"Expected each item of array {name!r} to be a 1-D list of values (a "
                f"feature of varying length). Received: item {index} of shape {row.shape}"
            )
        if len(row):
            dtypes.add("string" if row.dtype.kind in "USO" else row.dtype.name)
    if not dtypes:
        return "float32"
    if len(dtypes) > 1:
        if all(d in NUMERIC_DTYPES for d in dtypes):
            return np.result_type(*dtypes).name
        raise TypeError(
            f"Expected the lists of array {name!r} to hold values of one kind. "
            f"Received: dtypes {sorted(dtypes)}"
        )
    dtype = dtypes.pop()
    if dtype != "string" and dtype not in NUMERIC_DTYPES:
        raise TypeError(
            f"Expected the lists of array {name!r} to hold bool, integer, float or string "
            f"values. Received: dtype={dtype}"
        )
    return dtype


def auto_encoding(dtype: str, shape: Any, listed: bool = False) -> str:
    """The encoding ``write`` gives a value of ``dtype`` and ``shape``.

    With a default, or per frame of a feature list (``listed``), a ``float16``/``float32``
    value of any shape is a ``float_list``: optional values and feature lists come from
    other tools (TFX, ``tf.io.FixedLenFeature`` users, SequenceExample writers), which
    store them as lists, not as raw bytes.
    """
    if dtype in STRING_DTYPES:
        return "bytes"
    if listed and dtype in ("float16", "float32"):
        return "float"
    scalar_or_varying = tuple(shape) in ((), (None,))
    if scalar_or_varying and np.dtype(dtype).kind in "biu" and dtype != "uint64":
        return "int64"
    if scalar_or_varying and dtype in ("float16", "float32"):
        return "float"
    if tuple(shape) == (None,):  # no raw bytes for a varying length: the nearest list
        return "float" if np.dtype(dtype).kind == "f" else "int64"
    return "raw"
