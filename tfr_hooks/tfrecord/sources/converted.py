"""Directories written by ``tfr-hooks convert`` (or ``tfrecord.write``) as a source.

Their shards sit beside a ``schema.json`` sidecar (:mod:`~tfr_hooks.tfrecord.schema.sidecar`)
that lists them, declares the schema with each feature's stored encoding, the examples
of every shard and the examples per record (packed shards). A directory stands for the
shards its sidecar lists; any file with a sidecar beside it (a glob into such a
directory, a list of its shards) is read as converted, its counts known before the
first pass and its size checked against what was written.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.schema.sidecar import (
    Sidecar,
    check_written_size,
    find_sidecar,
    listed_shards,
)
from tfr_hooks.tfrecord.sources.base import RecordSource
from tfr_hooks.tfrecord.sources.files import FileSource

__all__ = ["ConvertedSource"]


class ConvertedSource(FileSource):
    """Files some or all of which have a ``schema.json`` beside them.

    A file without one (in a list mixing both) is read as a plain file.
    """

    def __init__(self, paths: list[str], sidecars: dict[str, Sidecar | None]) -> None:
        super().__init__(paths)
        self.sidecars = sidecars  # directory -> its sidecar, or None

    @classmethod
    def open(
        cls, files: Any, split: str | None, paths: Callable[[], list[str]]
    ) -> RecordSource | None:
        """The files, if any of them has a sidecar beside it."""
        del files, split
        found = paths()
        sidecars: dict[str, Sidecar | None] = {}
        if not any(find_sidecar(path, sidecars) is not None for path in found):
            return None
        return cls(found, sidecars)

    @classmethod
    def list_directory(cls, directory: str) -> list[str] | None:
        """The shards the directory's ``schema.json`` lists, if it has one."""
        return listed_shards(directory) or None

    def sidecar(self, path: str) -> Sidecar | None:
        """The ``schema.json`` beside ``path``, or ``None`` (a plain file in the list)."""
        return find_sidecar(path, self.sidecars)

    def counts(self) -> list[int | None]:
        """The examples of each file the sidecars give (``None`` for the others)."""
        found = [self.sidecar(path) for path in self.files]
        return [
            None if car is None else car.examples_of(os.path.basename(path))
            for path, car in zip(self.files, found, strict=True)
        ]

    def file_facts(
        self,
        path: str,
        schema: Schema,
        compression: str,
        *,
        given: bool,
    ) -> tuple[Schema, int | None, int]:
        """The sidecar's examples and packing; a given schema takes its stored encodings."""
        sidecar = self.sidecar(path)
        if sidecar is None:
            return super().file_facts(path, schema, compression, given=given)
        if self.damage is None:
            check_written_size(path, sidecar)
        if given:
            schema = schema.with_stored_encodings(sidecar.schema)
            schema.check_compatible(sidecar.schema, source=f"the schema stored for {path!r}")
        count = sidecar.examples_of(os.path.basename(path))
        return schema, count, sidecar.examples_per_record
