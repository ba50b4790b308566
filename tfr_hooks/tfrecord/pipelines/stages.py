"""The stages every pipeline kind shares after its order: map, structure, finish.

Streamed, packed and in memory, a reader's batches go through the same last stages:
``map_fn`` named by ``as_tuple`` (:func:`as_dict`), ``batch_map_fn``
(:func:`map_batches`), the tuple ``as_tuple`` names (:func:`structure`), and prefetch
and options (:func:`finish`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.pipelines.memory.serve import PARALLEL_CALLS, fresh_randomness

__all__ = ["as_dict", "finish", "map_batches", "structure"]


def finish(
    data: tf.data.Dataset, names: tuple[str, ...] | None, *, prefetch: int | None, autotune: bool
) -> tf.data.Dataset:
    """The last stages every TF2 pipeline shares: structure, prefetch, options."""
    if names is not None:
        data = data.map(lambda d: structure(d, names))
    if prefetch:
        data = data.prefetch(prefetch)
    if not autotune:
        options = tf.data.Options()
        options.autotune.enabled = False
        data = data.with_options(options)
    return data


def as_dict(map_fn: Callable[..., Any], names: tuple[str, ...] | None) -> Callable[..., Any]:
    """``map_fn``, returning a dict: a tuple it returns is named by ``as_tuple``."""

    def named(example: Any) -> Any:
        out = map_fn(example)
        if names is not None and isinstance(out, (tuple, list)) and len(out) == len(names):
            return dict(zip(names, out, strict=True))
        return out

    return named


def map_batches(data: tf.data.Dataset, batch_map_fn: Callable[..., Any]) -> tf.data.Dataset:
    """``batch_map_fn`` on every batch, its random ops drawing anew every epoch."""
    return data.map(
        fresh_randomness(batch_map_fn), num_parallel_calls=PARALLEL_CALLS, deterministic=True
    )


def structure(tensors: Any, names: tuple[str, ...] | None) -> Any:
    """``tensors`` (a dict) as the tuple ``as_tuple`` names, when it names one."""
    if names is None:
        return tensors
    if not isinstance(tensors, dict) or any(name not in tensors for name in names):
        found = sorted(tensors) if isinstance(tensors, dict) else type(tensors).__name__
        raise ValueError(
            "Expected `map_fn` (or `batch_map_fn`) to return a dict with the keys of "
            f"`as_tuple` {list(names)}. "
            f"Received: keys={found}"
        )
    return tuple(tensors[name] for name in names)
