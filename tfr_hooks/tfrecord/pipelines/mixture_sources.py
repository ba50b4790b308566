"""A mixture's named sources resolved: one plan a source, checked against the others.

``files`` a mapping of names to sources (``{"web": "data/web", "books": "data/books"}``)
with ``weights=`` over the same names: :func:`mixture_plan` resolves each source as a
reader resolves its files (:func:`~tfr_hooks.tfrecord.pipelines.plan.make_plan`: files, a
directory with a ``schema.json``, a TensorFlow Datasets directory with ``split=``),
indexes its records (a source's size is its records), and checks that the sources parse
to one structure: the same features, or a ``map_fn`` a source (a mapping by name) that
maps each to it. The plan it returns holds every source's plan in
:attr:`~tfr_hooks.tfrecord.pipelines.plan.Plan.parts`; the mixture's order
(:mod:`~tfr_hooks.tfrecord.pipelines.orders.mixture`) reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfr_hooks.checks import expected
from tfr_hooks.tfrecord.pipelines.mixture import MixtureState
from tfr_hooks.tfrecord.pipelines.plan import Plan, plan_with
from tfr_hooks.tfrecord.pipelines.splits import file_indexes

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import ReadOptions

__all__ = ["initial_state", "mixture_plan", "source_map_fns"]


def source_map_fns(options: ReadOptions) -> Mapping[str, Any] | None:
    """The ``map_fn`` of each source when ``map_fn`` is a mapping by name, else ``None``."""
    map_fn = options.map_fn
    return map_fn if isinstance(map_fn, Mapping) else None


def initial_state(plan: Plan, options: ReadOptions) -> MixtureState | None:
    """The state of a new mixture read by ``plan`` at ``options.weights`` (``None``: no mixture).

    One stretch from position 0; each source's size is its records.
    """
    if not plan.parts or options.weights is None:
        return None
    sizes = {name: sum(c or 0 for c in part.counts) for name, part in plan.parts.items()}
    weights = {name: float(options.weights[name]) for name in plan.parts}
    return MixtureState.initial(weights, sizes)


def _check_names(files: Any, options: ReadOptions) -> Mapping[str, Any]:
    """``files`` as a mapping of names to sources; ``weights`` and ``map_fn`` on its names."""
    weights = options.weights
    if not isinstance(files, Mapping):
        raise ValueError(
            expected("files", "a mapping of source names to sources with weights=", files)
        )
    if weights is None:
        raise ValueError(
            "Expected weights= with `files` a mapping of named sources (each source's "
            f"share, by name). Received: files={dict(files)!r}, weights=None"
        )
    if not files or not all(isinstance(name, str) and name for name in files):
        raise ValueError(expected("files", "a non-empty mapping of source names", dict(files)))
    if set(weights) != set(files):
        missing = sorted(set(files) - set(weights))
        extra = sorted(set(weights) - set(files))
        raise ValueError(
            f"Expected `weights` to name the sources of `files` {list(files)} (missing "
            f"{missing}, unknown {extra}). Received: weights={dict(weights)!r}"
        )
    map_fns = source_map_fns(options)
    if map_fns is not None and set(map_fns) != set(files):
        raise ValueError(
            f"Expected `map_fn` as a mapping to name every source of `files` "
            f"{list(files)}. Received: map_fn={dict(map_fns)!r}"
        )
    if map_fns is not None and not all(callable(fn) for fn in map_fns.values()):
        raise TypeError(expected("map_fn", "a mapping of source names to callables", map_fns))
    return files


def _differences(plans: Mapping[str, Plan]) -> list[str]:
    """The features not declared alike by every source (missing in some, or other)."""
    schemas = {name: {f.name: f for f in plan.schema} for name, plan in plans.items()}
    every = [n for features in schemas.values() for n in features]
    names = list(dict.fromkeys(every))
    differ = []
    for feature in names:
        declared = [features.get(feature) for features in schemas.values()]
        if any(d is None or d != declared[0] for d in declared):
            differ.append(feature)
    return differ


def mixture_plan(files: Any, options: ReadOptions) -> Plan:
    """The plan of a mixture: each named source's plan, checked, and their files together.

    Args:
        files: A mapping of source names to what a reader reads.
        options: The reader's options (``weights`` over the same names).

    Returns:
        A plan whose ``parts`` are the sources' plans (their counts from their record
        indexes), whose ``files`` and ``counts`` are all of theirs, and whose schema is
        the first source's.

    Raises:
        ValueError: ``files`` is not a mapping, ``weights`` names other sources, a
            source is compressed, or the sources hold other features and no ``map_fn``
            a source maps them (the message names the features).
    """
    sources = _check_names(files, options)
    map_fns = source_map_fns(options)
    parts: dict[str, Plan] = {}
    for name, given in sources.items():
        part = plan_with(given, options)
        if part.compression or part.per_record > 1:
            raise ValueError(
                f"Expected uncompressed files of one example a record in a mixture (each "
                f"source is read in its global order). Received: source {name!r} with "
                f"compression={part.compression!r}, examples a record={part.per_record}"
            )
        part.counts = [index.count for index in file_indexes(part.records)]
        parts[name] = part
    if map_fns is None:
        differ = _differences(parts)
        if differ:
            raise ValueError(
                "Expected the sources of a mixture to hold the same features, or a "
                "map_fn a source (map_fn={name: fn, ...}) mapping each to one structure; "
                f"these features differ between them: {differ}. Received: "
                f"files={dict(sources)!r}"
            )
    first = next(iter(parts.values()))
    return Plan(
        [f for part in parts.values() for f in part.files],
        first.compression,
        first.schema,
        first.names,
        [c for part in parts.values() for c in part.counts],
        decoding=first.decoding,
        parts=parts,
    )
