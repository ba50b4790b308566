"""A record source only the tests know: a folder whose ``manifest.txt`` lists its shards.

It proves the seam of :mod:`tfr_hooks.tfrecord.sources`: the package knows nothing of
this layout, and reads it through :func:`~tfr_hooks.tfrecord.sources.base.register_source`
alone. The folder holds shards written by a plain ``tf.io.TFRecordWriter`` and a
``manifest.txt`` of lines (``#`` starts a comment)::

    feature index int64          # a scalar feature: name and dtype
    feature code string
    examples_per_record 4        # optional: packed shards (tfr_hooks.tfrecord.formats.packed)
    part-a.tfrecord 16           # a shard and the examples it holds
    part-b.tfrecord 21

The source declares the schema and the counts from it: before a record is read, the
reader knows the examples of a pass, which for plain files it does not.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.framing import first_record
from tfr_hooks.tfrecord.formats.packed import check_block
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.sources.base import Checked, RecordSource, SchemaLike
from tfr_hooks.tfrecord.sources.files import one_compression

__all__ = ["MANIFEST", "Manifest", "ManifestSource", "write_manifest_folder"]

MANIFEST = "manifest.txt"


class Manifest:
    """A parsed ``manifest.txt``: the features, the packing and the shards' counts."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.features: list[Feature] = []
        self.per_record = 1
        self.counts: dict[str, int] = {}
        path = os.path.join(directory, MANIFEST)
        with tf.io.gfile.GFile(path) as handle:
            for number, line in enumerate(handle, start=1):
                words = line.split("#", 1)[0].split()
                if not words:
                    continue
                if words[0] == "feature" and len(words) == 3:
                    self.features.append(Feature(words[1], words[2]))
                elif words[0] == "examples_per_record" and len(words) == 2:
                    self.per_record = int(words[1])
                elif len(words) == 2:
                    self.counts[words[0]] = int(words[1])
                else:
                    raise ValueError(
                        f"Expected the lines of {path!r} to be 'feature NAME DTYPE', "
                        "'examples_per_record N' or 'SHARD EXAMPLES'. "
                        f"Received: line {number}={line.strip()!r}"
                    )

    @classmethod
    def of(cls, directory: str) -> Manifest | None:
        """The manifest of ``directory``, or ``None`` when it has none."""
        if not tf.io.gfile.exists(os.path.join(directory, MANIFEST)):
            return None
        return cls(directory)

    @property
    def shards(self) -> list[str]:
        """The shards' paths, in the manifest's order."""
        return [os.path.join(self.directory, name) for name in self.counts]


class ManifestSource(RecordSource):
    """The shards a ``manifest.txt`` lists: its schema, packing and counts."""

    def __init__(self, paths: list[str], manifests: dict[str, Manifest]) -> None:
        self.files = list(paths)
        self.manifests = manifests  # directory -> its manifest

    @classmethod
    def open(
        cls, files: Any, split: str | None, paths: Callable[[], list[str]]
    ) -> RecordSource | None:
        """The files, if every one of them is a shard a manifest beside it lists."""
        del files, split
        found = paths()
        manifests: dict[str, Manifest] = {}
        for path in found:
            directory = os.path.dirname(path)
            if directory not in manifests:
                manifest = Manifest.of(directory)
                if manifest is None:
                    return None
                manifests[directory] = manifest
            if os.path.basename(path) not in manifests[directory].counts:
                return None
        return cls(found, manifests)

    @classmethod
    def list_directory(cls, directory: str) -> list[str] | None:
        """The shards of ``directory``'s manifest, if it has one."""
        manifest = Manifest.of(directory)
        return None if manifest is None else manifest.shards

    def _manifest(self, path: str) -> Manifest:
        return self.manifests[os.path.dirname(path)]

    def counts(self) -> list[int | None]:
        """The examples of each shard, as its manifest gives them."""
        return [self._manifest(p).counts[os.path.basename(p)] for p in self.files]

    def compression(self, given: str | None, *, tolerant: bool) -> str:
        """``given``, or the shards' one compression, detected."""
        del tolerant
        return one_compression(self.files, given)

    def schema(
        self, given: SchemaLike, decode: Mapping[str, Any] | None, compression: str
    ) -> Schema:
        """``given`` if a Schema, else the features the (first) manifest declares."""
        del compression
        chosen = given if isinstance(given, Schema) else None
        if chosen is None:
            chosen = Schema(self._manifest(self.files[0]).features)
        return chosen.replace(**decode) if decode else chosen

    def check(self, schema: Schema, compression: str, *, given: bool) -> Checked:
        """Check each shard's first record; the counts and packing are the manifest's."""
        del given
        per_record = {self._manifest(p).per_record for p in self.files}
        if len(per_record) > 1:
            raise ValueError(
                "Expected the manifests to agree on examples_per_record. "
                f"Received: examples_per_record={sorted(per_record)}"
            )
        packing = per_record.pop()
        for path in self.files:
            record = first_record(path, compression)
            if packing > 1:
                check_block(schema, tf.train.Example.FromString(record), packing, file=path)
            else:
                schema.check_example(record, file=path, record=0, warn=False)
        return schema, self.counts(), packing

    def describe(self) -> str:
        """One line: the shards and examples the manifests list."""
        examples = sum(c or 0 for c in self.counts())
        return f"manifest source: {len(self.files)} shards, {examples} examples"


def _record(indices: np.ndarray, code: bytes) -> bytes:
    """One ``tf.train.Example`` of the examples ``indices`` (several: a packed record)."""
    features = {
        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=indices.tolist())),
        "code": tf.train.Feature(bytes_list=tf.train.BytesList(value=[code] * len(indices))),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_manifest_folder(
    directory: Path, n: int, *, shards: int = 2, per_record: int = 1
) -> list[str]:
    """Write ``n`` examples (``index`` 0..n-1, a 4-byte ``code``) and their manifest.

    The shards hold unequal parts (the first about a third), so a count taken from the
    wrong shard shows. Records hold ``per_record`` examples each (the last of a shard
    fewer), in the layout of :mod:`tfr_hooks.tfrecord.formats.packed`.

    Returns:
        The shards' paths, in the manifest's order.
    """
    directory.mkdir(parents=True, exist_ok=True)
    cuts = [0, *(n * (i + 1) // (shards + 1) for i in range(shards - 1)), n]
    lines = ["feature index int64", "feature code string"]
    if per_record > 1:
        lines.append(f"examples_per_record {per_record}")
    paths = []
    for shard, (start, stop) in enumerate(itertools.pairwise(cuts)):
        name = f"part-{shard}.rec"
        indices = np.arange(start, stop, dtype=np.int64)
        with tf.io.TFRecordWriter(str(directory / name)) as writer:
            for first in range(0, len(indices), per_record):
                writer.write(_record(indices[first : first + per_record], b"\x01\x02\x03\x04"))
        lines.append(f"{name} {stop - start}")
        paths.append(str(directory / name))
    (directory / MANIFEST).write_text("\n".join(lines) + "\n")
    return paths
