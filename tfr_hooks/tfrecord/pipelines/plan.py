"""What a reader reads: the files, their compression and the schema, checked up front.

:func:`make_plan` asks the dispatcher (:func:`~tfr_hooks.tfrecord.sources.base.open_source`)
for the source of ``files`` once, and through it resolves the files, their compression
and the schema (given, stored in ``schema.json``, inferred, or declared by a TFDS
directory), and checks the first record of every file against it before any pipeline is
built; the :class:`Plan` it returns is what both readers
(:func:`~tfr_hooks.tfrecord.dataset` and :func:`~tfr_hooks.tfrecord.read_batches`) build
from. The source, the split and the damage map live on the plan.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tfr_hooks.tfrecord.formats.damage import DamageMap
from tfr_hooks.tfrecord.formats.framing import Files
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.schema.decoding import Decoding, parse_batch
from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.sources.base import RecordSource, SchemaLike, open_source

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.options import ReadOptions

__all__ = ["Plan", "make_plan", "plan_with"]

logger = logging.getLogger(__name__)


@dataclass
class Plan:
    """The files a reader reads, their compression, and the schema they are parsed with.

    A source whose records hold the features in another form (TFDS) gives its
    :class:`~tfr_hooks.tfrecord.schema.decoding.Decoding` too: every pipeline parses
    through :meth:`parse_batch`, which applies it.
    """

    files: list[str]
    compression: str
    schema: Schema  # the features parsed
    names: tuple[str, ...] | None  # as_tuple
    counts: list[int | None] = field(default_factory=list)  # examples per file, if known
    per_record: int = 1  # examples per record (packed shards)
    damage: DamageMap | None = None  # max_corrupt_records > 0: what the scan found
    source: RecordSource | None = None  # where the files come from
    decoding: Decoding | None = None  # how the records become the features (TFDS)
    parts: dict[str, Plan] = field(default_factory=dict)  # a mixture's named sources

    def parse_batch(self, serialized: Any) -> dict[str, Any]:
        """A batch of serialized records as the features read: the one parse of a reader."""
        return parse_batch(self.schema, serialized, self.decoding)

    @property
    def records(self) -> RecordFiles:
        """The reading of the files' records, where the damage map plugs in."""
        return RecordFiles(tuple(self.files), self.compression, self.damage)

    @property
    def examples(self) -> int | None:
        """Examples in one pass over the files, if every file's count is known."""
        if not self.counts or any(c is None for c in self.counts):
            return None
        return sum(c for c in self.counts if c is not None)


def _check_as_tuple(as_tuple: object) -> tuple[str, ...] | None:
    if as_tuple is None:
        return None
    if (
        isinstance(as_tuple, (str, bytes))
        or not isinstance(as_tuple, Sequence)
        or not as_tuple
        or not all(isinstance(name, str) for name in as_tuple)
    ):
        raise TypeError(
            "Expected `as_tuple` to be None or a sequence of feature names such as "
            f"('x', 'y'). Received: as_tuple={as_tuple!r}"
        )
    return tuple(as_tuple)


def make_plan(
    files: Files,
    schema: SchemaLike,
    compression: str | None,
    as_tuple: object,
    *,
    select: bool,
    decode: Mapping[str, Any] | None = None,
    max_corrupt_records: int = 0,
    split: str | None = None,
) -> Plan:
    """Resolve files, compression and schema, and check them before any graph is built.

    The source of ``files`` (:mod:`tfr_hooks.tfrecord.sources`) is picked once; ``split``
    goes only with a source that has splits (a TensorFlow Datasets directory).

    With ``max_corrupt_records`` above 0, every file is scanned for damaged records first
    (:mod:`tfr_hooks.tfrecord.formats.damage`): the schema is then inferred from whole records
    (:meth:`~tfr_hooks.tfrecord.formats.damage.DamageMap.inference`), the checks read each file's
    first whole record, and the counts are the whole records found.
    """
    source = open_source(files, split)
    names = _check_as_tuple(source.names(as_tuple))
    _check_decode(decode)
    codec = source.compression(compression, tolerant=bool(max_corrupt_records))
    if max_corrupt_records:
        source.scan(codec, max_corrupt_records)
    chosen = source.schema(schema, decode, codec)
    if select:  # with a map_fn, as_tuple names its outputs
        chosen = _selected(chosen, names)
    given = schema is not None or bool(decode)
    chosen, counts, per_record = source.check(chosen, codec, given=given)
    damage = source.damage
    decoding = source.decoding()
    return Plan(
        list(source.files), codec, chosen, names, counts, per_record, damage, source, decoding
    )


def _selected(schema: Schema, names: tuple[str, ...] | None) -> Schema:
    """``schema``'s features that ``as_tuple`` names (all of them without names)."""
    if names is None:
        return schema
    missing = [name for name in names if name not in schema]
    if missing:
        raise ValueError(
            f"Expected the names in `as_tuple` to be features of the schema "
            f"{schema.names}. Received: as_tuple={names!r}"
        )
    return schema.select(names)


def _check_decode(decode: object) -> None:
    if decode is None:
        return
    if not isinstance(decode, Mapping) or not all(isinstance(k, str) for k in decode):
        raise TypeError(
            "Expected `decode` to be None or a dict of feature name -> change, such as "
            "{'image_raw': ('uint8', (28, 28, 1))} (see Schema.replace). "
            f"Received: decode={decode!r}"
        )


def plan_with(files: Any, options: ReadOptions) -> Plan:
    """:func:`make_plan` for ``files`` with the reader's checked ``options``."""
    config = options.config
    return make_plan(
        files,
        options.schema,
        config.compression,
        options.as_tuple,
        select=not options.renamed,
        decode=config.decode,
        max_corrupt_records=options.max_corrupt_records,
        split=options.split,
    )
