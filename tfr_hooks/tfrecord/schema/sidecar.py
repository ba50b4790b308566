"""The ``schema.json`` sidecar: what :func:`~tfr_hooks.tfrecord.write` records beside its shards.

Everything about the sidecar lives here: its name and format, reading and writing it,
finding the one that lists a file, the shard list of a directory, and checking a shard
against the size it had when written. It knows the :class:`~tfr_hooks.tfrecord.Schema`
it stores, and nothing of how files are found or read (:mod:`tfr_hooks.tfrecord.formats.framing`
asks it for a directory's shard list, not the other way round).

The layout of the records follows from what it stores: ``examples_per_record`` above 1
means packed shards (:mod:`tfr_hooks.tfrecord.formats.packed`), whose companion features (a
varying feature's ``<name>/row_lengths``, a feature list's ``<name>/frame_counts``) are
not listed in the schema; a feature stored with ``"sequence": true`` is a feature list,
written as a SequenceExample's ``feature_lists`` in shards of one example a record, and
as the block's frames beside their frame counts in packed shards.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.errors import CorruptRecordError
from tfr_hooks.tfrecord.schema.schema import Schema

__all__ = [
    "SCHEMA_FILENAME",
    "SIDECAR_FORMAT",
    "Sidecar",
    "load_sidecar",
    "save_sidecar",
    "load_schema",
    "find_sidecar",
    "listed_shards",
    "check_written_size",
]

logger = logging.getLogger(__name__)

#: Name of the JSON sidecar, in the directory of the shards, that stores the schema.
SCHEMA_FILENAME = "schema.json"

#: Version tag written into the sidecar.
SIDECAR_FORMAT = "tfr_hooks.tfrecord/1"


@dataclass(frozen=True)
class Sidecar:
    """The contents of ``schema.json``: the schema plus how and where records were written.

    Attributes:
        schema: The features.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        shards: ``(file name, record count)`` for each shard, relative to the sidecar.
        sizes: The size in bytes of each shard when written (empty if unknown).
        examples_per_record: Examples packed into each record (1: one example a record;
            see :mod:`tfr_hooks.tfrecord.formats.packed`).
        examples: For packed shards, the examples in each shard (empty when each
            record is one example).
        record_format: How the shards frame records: ``"tfrecord"``, or
            ``"array_record"`` (ArrayRecord files; stored as ``"record_format"``, which
            a sidecar of TFRecord shards leaves out).
    """

    schema: Schema
    compression: str = ""
    shards: tuple[tuple[str, int], ...] = ()
    sizes: tuple[int, ...] = ()
    examples_per_record: int = 1
    examples: tuple[int, ...] = ()
    record_format: str = "tfrecord"

    def size_of(self, name: str) -> int | None:
        """The size of shard ``name`` when written, if recorded."""
        for (shard, _), size in zip(self.shards, self.sizes, strict=False):
            if shard == name:
                return size
        return None

    @property
    def num_records(self) -> int:
        """Records in all shards."""
        return sum(count for _, count in self.shards)

    def examples_of(self, name: str) -> int | None:
        """The examples in shard ``name`` (its records, unless packed), if it is listed."""
        for index, (shard, count) in enumerate(self.shards):
            if shard == name:
                if self.examples_per_record == 1:
                    return count
                return self.examples[index] if index < len(self.examples) else None
        return None

    @property
    def num_examples(self) -> int:
        """Examples in all shards."""
        if self.examples_per_record == 1:
            return self.num_records
        return sum(self.examples)

    def _sizes_or_none(self) -> list[int | None]:
        if len(self.sizes) == len(self.shards):
            return list(self.sizes)
        return [None] * len(self.shards)

    def to_json(self) -> str:
        """The sidecar as JSON text."""
        data: dict[str, Any] = {
            "format": SIDECAR_FORMAT,
            "compression": self.compression,
            "num_records": self.num_records,
            "features": self.schema.to_list(),
            "shards": [
                {"file": name, "num_records": n, **({"bytes": size} if size is not None else {})}
                for (name, n), size in zip(self.shards, self._sizes_or_none(), strict=True)
            ],
        }
        if self.record_format != "tfrecord":
            data["record_format"] = self.record_format
        if self.examples_per_record != 1:  # packed shards (tfr_hooks.tfrecord.formats.packed)
            data["examples_per_record"] = self.examples_per_record
            data["num_examples"] = self.num_examples
            for item, count in zip(data["shards"], self.examples, strict=True):
                item["num_examples"] = count
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> Sidecar:
        """Read a sidecar from JSON text.

        Raises:
            ValueError: If the text is not a sidecar written by this package.
        """
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("features"), list):
                raise ValueError("no list of features")
            schema = Schema.from_list(data["features"])
            items = data.get("shards", [])
            shards = tuple((str(s["file"]), int(s["num_records"])) for s in items)
            sizes = tuple(int(s["bytes"]) for s in items if "bytes" in s)
            if len(sizes) != len(shards):
                sizes = ()
            packing = int(data.get("examples_per_record", 1))
            if packing < 1:
                raise ValueError(f"examples_per_record is {packing}")
            examples = tuple(int(s["num_examples"]) for s in items) if packing > 1 else ()
            compression = str(data.get("compression", ""))
            record_format = str(data.get("record_format", "tfrecord"))
            if record_format not in ("tfrecord", "array_record"):
                raise ValueError(f"record_format is {record_format!r}")
            return cls(schema, compression, shards, sizes, packing, examples, record_format)
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"Expected {source} to be a schema written by tfr_hooks.tfrecord.write "
                f"({SIDECAR_FORMAT}). Could not read it: {error}"
            ) from error


def save_sidecar(path: str | os.PathLike[str], sidecar: Sidecar) -> None:
    """Write ``sidecar`` to ``path`` as JSON."""
    with tf.io.gfile.GFile(os.fspath(path), "w") as handle:
        handle.write(sidecar.to_json())


def load_sidecar(path: str | os.PathLike[str]) -> Sidecar:
    """Read a sidecar (``schema.json``) from ``path``."""
    name = os.fspath(path)
    with tf.io.gfile.GFile(name, "r") as handle:
        return Sidecar.from_json(handle.read(), source=repr(name))


def load_schema(path: str | os.PathLike[str]) -> Schema:
    """Read the schema stored by :func:`~tfr_hooks.tfrecord.write`.

    Args:
        path: The ``schema.json`` file, or the directory holding it.

    Returns:
        The schema.

    Examples:
        >>> schema = load_schema("data/mnist")  # doctest: +SKIP
        >>> schema.names  # doctest: +SKIP
        ['image', 'label']
    """
    name = os.fspath(path)
    if tf.io.gfile.isdir(name):
        name = os.path.join(name, SCHEMA_FILENAME)
    return load_sidecar(name).schema


def find_sidecar(path: str, cache: dict[str, Sidecar | None] | None = None) -> Sidecar | None:
    """The ``schema.json`` sidecar in the directory of ``path`` that lists it, if any.

    Args:
        path: A record file.
        cache: Sidecars already loaded, by directory; filled in as they are loaded.

    Returns:
        The sidecar, or ``None`` if there is none or it does not list ``path``.
    """
    directory = os.path.dirname(path)
    if cache is not None and directory in cache:
        sidecar = cache[directory]
    else:
        sidecar = _load_sidecar_in(directory)
        if cache is not None:
            cache[directory] = sidecar
    if sidecar is None:
        return None
    names = {name for name, _ in sidecar.shards}
    if names and os.path.basename(path) not in names:
        return None
    return sidecar


def _load_sidecar_in(directory: str) -> Sidecar | None:
    sidecar_path = os.path.join(directory, SCHEMA_FILENAME)
    if not tf.io.gfile.exists(sidecar_path):
        return None
    try:
        return load_sidecar(sidecar_path)
    except ValueError as error:
        logger.warning("Ignoring %s: %s", sidecar_path, error)
        return None


def listed_shards(directory: str) -> list[str] | None:
    """The shard files the sidecar of ``directory`` lists, in order; ``None`` without one.

    Raises:
        ValueError: If the directory's ``schema.json`` is not a sidecar of this package.
    """
    path = os.path.join(directory, SCHEMA_FILENAME)
    if not tf.io.gfile.exists(path):
        return None
    shards = load_sidecar(path).shards
    return [os.path.join(directory, name) for name, _ in shards] or None


def check_written_size(path: str, sidecar: Sidecar) -> None:
    """A shard whose size changed since it was written is truncated or overwritten."""
    written = sidecar.size_of(os.path.basename(path))
    size = tf.io.gfile.stat(path).length
    if written is not None and size != written:
        raise CorruptRecordError(
            f"TFRecord file {path!r} has changed since it was written: expected {written} "
            f"bytes (recorded in {SCHEMA_FILENAME}); found {size} bytes. It is probably "
            "truncated (an interrupted copy or write); write or copy it again.",
            file=path,
        )
