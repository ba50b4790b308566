"""One ``session.run`` of the caller's fetches merged with what the hooks asked for.

``before_run`` may return ``SessionRunArgs`` (fetches, feeds, options); they all go into
the same ``session.run`` as the train op, as in ``MonitoredSession``. When no hook asks
for anything and nothing is fed, a callable prepared once with ``session.make_callable``
runs the step instead: it skips ``session.run``'s parsing of the fetch structure, the
loop's main cost per step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tfr_hooks.runners import StepResult

__all__ = ["merged_run", "prepared_run"]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


def prepared_run(session: Any, fetches: Any, options: Any = None) -> Callable[[], Any]:
    """A no-argument callable that runs ``fetches`` (with ``options``) in ``session``."""
    prepared = session.make_callable(fetches, accept_options=options is not None)
    if options is None:
        return prepared
    return lambda: prepared(options=options)


def merged_run(
    session: Any,
    hooks: Sequence[Any],
    hook_args: Sequence[Any],
    fetches: Any,
    feed_dict: Mapping[Any, Any] | None = None,
    options: Any = None,
    run_metadata: Any = None,
    fast_run: Callable[[], Any] | None = None,
) -> StepResult:
    """Run ``fetches`` and every hook's ``SessionRunArgs`` in one ``session.run``.

    Args:
        session: The session.
        hooks: The hooks, for error messages.
        hook_args: What each hook returned from ``before_run`` (``None`` or args).
        fetches: The caller's fetches.
        feed_dict: The caller's feeds.
        options: The caller's ``RunOptions``.
        run_metadata: The caller's ``RunMetadata``.
        fast_run: A :func:`prepared_run` for ``fetches`` with ``options``, used when no
            hook asks for anything and nothing is fed.

    Returns:
        One step: ``results`` for the caller's fetches, each hook's results, the merged
        options and the run metadata.

    Raises:
        ValueError: If two hooks, or a hook and the caller, feed the same tensor.
    """
    if fast_run is not None and not feed_dict and all(a is None for a in hook_args):
        return StepResult(steps=1, results=fast_run(), options=options, run_metadata=run_metadata)
    merged_fetches: dict[str, Any] = {"__caller": fetches}
    feeds = dict(feed_dict or {})
    merged_options = _v1.RunOptions()
    if options is not None:
        merged_options.MergeFrom(options)
    any_options = options is not None
    for i, args in enumerate(hook_args):
        if args is None:
            continue
        if args.fetches is not None:
            merged_fetches[f"hook_{i}"] = args.fetches
        for key, value in (args.feed_dict or {}).items():
            if key in feeds:
                raise ValueError(
                    f"Expected each tensor to be fed once. Received: a second feed of {key!r} "
                    f"from hook {type(hooks[i]).__name__}"
                )
            feeds[key] = value
        if args.options is not None:
            any_options = True
            _merge_run_options(merged_options, args.options)
    if any_options and run_metadata is None:
        run_metadata = _v1.RunMetadata()
    results = session.run(
        merged_fetches,
        feed_dict=feeds or None,
        options=merged_options if any_options else None,
        run_metadata=run_metadata if any_options else None,
    )
    return StepResult(
        steps=1,
        results=results["__caller"],
        hook_results=[results.get(f"hook_{i}") for i in range(len(hook_args))],
        options=merged_options,
        run_metadata=run_metadata,
    )


def _merge_run_options(target: Any, other: Any) -> None:
    """Merge ``other`` into ``target`` the way ``MonitoredSession`` does."""
    target.trace_level = max(target.trace_level, other.trace_level)
    target.timeout_in_ms = max(target.timeout_in_ms, other.timeout_in_ms)
    target.inter_op_thread_pool = max(target.inter_op_thread_pool, other.inter_op_thread_pool)
    target.output_partition_graphs = target.output_partition_graphs or other.output_partition_graphs
    target.debug_options.debug_tensor_watch_opts.extend(other.debug_options.debug_tensor_watch_opts)
    target.report_tensor_allocations_upon_oom = (
        target.report_tensor_allocations_upon_oom or other.report_tensor_allocations_upon_oom
    )
