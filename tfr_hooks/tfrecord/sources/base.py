"""The record-source protocol, and the dispatcher that picks a source once.

What a reader reads comes from a *source*: plain TFRecord files (:mod:`.files`), a
directory written by ``tfr-hooks convert`` or :func:`~tfr_hooks.tfrecord.write` (shards
plus a ``schema.json`` sidecar, :mod:`.converted`), or a directory TensorFlow Datasets
prepared (:mod:`.tfds`). As Keras 3's data adapters (one ``get_data_adapter`` picks the
adapter from what the user passed), :func:`open_source` looks at ``files`` once and
returns the one :class:`RecordSource` that reads it; planning
(:func:`~tfr_hooks.tfrecord.pipelines.plan.make_plan`), conversion, measuring, inspection,
diagnosis, the command line and the directory listing of :func:`resolve_files` ask it,
never the file names.

A source gives the files (the shards of the chosen split, for TFDS), their example
counts when known up front, their compression, the schema and how the records become
its features (a :meth:`RecordSource.decoding`: a TFDS directory's decodes images and
sequences), and checks each file's first
record before any pipeline is built. A new kind of source is one module: a subclass of
:class:`RecordSource`, and one line in :data:`SOURCE_MODULES`. A source that lives
outside the package (a layout of one's own, a test's) is added with
:func:`register_source` instead, and removed with :func:`unregister_source`.
"""

from __future__ import annotations

import abc
import functools
import importlib
import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Union

import tensorflow as tf

from tfr_hooks.tfrecord.errors import NoFilesError
from tfr_hooks.tfrecord.formats.damage import DamageMap
from tfr_hooks.tfrecord.formats.framing import Files, check_readable
from tfr_hooks.tfrecord.formats.index import is_index_file
from tfr_hooks.tfrecord.formats.reading import files_format
from tfr_hooks.tfrecord.schema.decoding import Decoding
from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.schema.sidecar import SCHEMA_FILENAME, Sidecar

__all__ = [
    "SOURCE_MODULES",
    "Checked",
    "RecordSource",
    "SchemaLike",
    "list_directory",
    "open_source",
    "register_source",
    "resolve_files",
    "source_kinds",
    "unregister_source",
]

logger = logging.getLogger(__name__)

_GLOB_CHARS = frozenset("*?[")

#: What a reader's ``schema`` may be: a Schema, the path of a schema.json, or ``None``.
SchemaLike = Union[Schema, str, "os.PathLike[str]", None]

#: The sources, ``"module:class"``, in the order the dispatcher asks them: the first that
#: recognizes what the user passed reads it (plain files, which take anything, last).
#: A new kind of source is a module and one line here.
SOURCE_MODULES = (
    "tfr_hooks.tfrecord.sources.tfds:TfdsSource",
    "tfr_hooks.tfrecord.sources.converted:ConvertedSource",
    "tfr_hooks.tfrecord.sources.files:FileSource",
)

#: What :meth:`RecordSource.check` found: the schema to read with (a converted
#: directory's stored encodings applied), the examples of each file (``None`` when
#: unknown before reading) and the examples per record (packed shards).
Checked = tuple[Schema, list[int | None], int]


class RecordSource(abc.ABC):
    """One kind of input behind one seam: its files, counts, schema and checks.

    Made by :func:`open_source`, never directly. Subclasses set :attr:`files` and
    implement :meth:`open`, :meth:`schema` and :meth:`check`.

    Attributes:
        files: The files to read, in order (for TFDS: the shards of the split).
        damage: What :meth:`scan` found (``max_corrupt_records`` above 0), else ``None``:
            the schema, the checks and the counts then read the whole records only.
        takes_split: Whether ``split`` means something to the source (TFDS only).
        declares_schema: Whether the source brings its own schema (and
            :meth:`decoding`), so a reader's ``schema`` and ``decode`` are refused.
    """

    files: list[str]
    damage: DamageMap | None = None
    takes_split: ClassVar[bool] = False
    declares_schema: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def open(
        cls, files: Any, split: str | None, paths: Callable[[], list[str]]
    ) -> RecordSource | None:
        """The source of ``files`` if this kind reads them, else ``None``.

        Args:
            files: What the user passed (a path, directory, glob, or a list of them).
            split: The split asked for (checked by the dispatcher for the others).
            paths: ``files`` resolved by :func:`resolve_files`,
                computed at the first call and kept.
        """

    @classmethod
    def list_directory(cls, directory: str) -> list[str] | None:
        """The data files of ``directory`` if this kind owns it, else ``None``."""
        del directory
        return None

    def counts(self) -> list[int | None]:
        """The examples of each file known before reading (``None``: unknown)."""
        return [None] * len(self.files)

    def sidecar(self, path: str) -> Sidecar | None:
        """What this package wrote beside ``path`` when it wrote it, else ``None``.

        The stored schema, compression, packing and counts of a directory written by
        ``tfr-hooks convert`` or :func:`~tfr_hooks.tfrecord.write`; inspection,
        diagnosis and conversion ask the source for it, never the file names.

        Args:
            path: One of the source's files.
        """
        del path
        return None

    def names(self, as_tuple: object) -> object:
        """``as_tuple`` as the source reads it (TFDS: ``True`` for the supervised keys)."""
        return as_tuple

    @abc.abstractmethod
    def compression(self, given: str | None, *, tolerant: bool) -> str:
        """The files' one compression: ``given`` (checked) or detected.

        Args:
            given: The reader's ``compression`` (``None`` to detect).
            tolerant: Whether a damaged first record may only be guessed past
                (``max_corrupt_records`` above 0: the scan then finds the damage).
        """

    def scan(self, compression: str, max_corrupt_records: int) -> DamageMap:
        """Scan the files for damaged records.

        By the files' format (:meth:`~tfr_hooks.tfrecord.formats.records.RecordFormat.scan`;
        TFRecord's is :func:`~tfr_hooks.tfrecord.formats.damage.scan_damage`).

        What it finds is kept as :attr:`damage`, which the schema and the checks use.
        """
        reading = files_format(self.files)
        self.damage = reading.scan(self.files, compression, max_corrupt_records)
        return self.damage

    @abc.abstractmethod
    def schema(
        self, given: SchemaLike, decode: Mapping[str, Any] | None, compression: str
    ) -> Schema:
        """The schema to parse the records with (before ``as_tuple`` selects from it)."""

    def decoding(self) -> Decoding | None:
        """How the records become the features of :meth:`schema`; ``None``: as declared.

        A source whose records hold its features in another form (TFDS: encoded images,
        flattened sequences) returns a :class:`~tfr_hooks.tfrecord.schema.decoding.Decoding`;
        the readers carry it beside the schema and parse with both
        (:func:`~tfr_hooks.tfrecord.schema.decoding.parse_batch`).
        """
        return None

    @abc.abstractmethod
    def check(self, schema: Schema, compression: str, *, given: bool) -> Checked:
        """Check every file's first (whole) record against ``schema``.

        Args:
            schema: The schema chosen.
            compression: The files' compression.
            given: Whether the user gave the schema or ``decode`` (not the stored one).

        Returns:
            The schema to read with, the examples of each file, the examples per record.
        """

    def to_dict(self) -> dict[str, Any] | None:
        """What ``tfr-hooks inspect --json`` prints of the whole source; ``None``: per file."""
        return None

    def describe(self) -> str | None:
        """What ``tfr-hooks inspect`` prints of the whole source; ``None``: per file."""
        return None


#: The sources added by :func:`register_source`, in the order they were added.
_REGISTERED: list[type[RecordSource]] = []


def register_source(kind: type[RecordSource]) -> type[RecordSource]:
    """Add a kind of source from outside the package; the dispatcher asks it first.

    Sources registered are asked before those of :data:`SOURCE_MODULES`, in the order
    they were registered, so a layout of one's own is read as such even where a source
    of the package would also take it (plain files take anything). Registering a
    registered class again changes nothing. Returns ``kind``, so it can decorate the
    class.

    Args:
        kind: A concrete subclass of :class:`RecordSource`.

    Returns:
        ``kind``.

    Raises:
        TypeError: If ``kind`` is not a subclass of :class:`RecordSource`, or leaves an
            abstract method unimplemented.

    Examples:
        >>> from tfr_hooks.tfrecord.sources.base import register_source
        >>> register_source(ManifestSource)  # doctest: +SKIP
        >>> tfrecord.source("data/with_manifest", 32)  # doctest: +SKIP
    """
    if not (isinstance(kind, type) and issubclass(kind, RecordSource)):
        raise TypeError(
            "Expected `kind` to be a subclass of tfr_hooks.tfrecord.sources.base."
            f"RecordSource. Received: kind={kind!r}"
        )
    if inspect.isabstract(kind):
        missing = sorted(getattr(kind, "__abstractmethods__", ()))
        raise TypeError(
            f"Expected `kind` to implement every abstract method of RecordSource; "
            f"{kind.__name__} leaves {missing} abstract. Received: kind={kind!r}"
        )
    if kind not in _REGISTERED:
        _REGISTERED.append(kind)
    return kind


def unregister_source(kind: type[RecordSource]) -> None:
    """Remove a source :func:`register_source` added; the dispatcher no longer asks it.

    Raises:
        ValueError: If ``kind`` is not registered.
    """
    if kind not in _REGISTERED:
        raise ValueError(
            "Expected `kind` to be a source added with register_source (registered: "
            f"{[k.__name__ for k in _REGISTERED]}). Received: kind={kind!r}"
        )
    _REGISTERED.remove(kind)


def source_kinds() -> list[type[RecordSource]]:
    """The source classes in the dispatcher's order: registered, then :data:`SOURCE_MODULES`.

    Those of :data:`SOURCE_MODULES` are imported here at the first call: each source
    module imports this one.
    """
    return [*_REGISTERED, *(_source_class(name) for name in SOURCE_MODULES)]


@functools.cache
def _source_class(name: str) -> type[RecordSource]:
    module_name, _, class_name = name.partition(":")
    found = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(found, type) and issubclass(found, RecordSource)):
        raise TypeError(f"Expected {name} to be a RecordSource. Received: {found!r}")
    return found


def open_source(files: Any, split: str | None = None) -> RecordSource:
    """The one source that reads ``files``: picked once, from what the user passed.

    Args:
        files: A path, directory or glob pattern, or a sequence of them.
        split: The split to read; only a source that has splits (TFDS) takes one.

    Returns:
        The :class:`RecordSource`.

    Raises:
        ValueError: If ``split`` is given for a source without splits, or the source
            finds something wrong with ``files``.
        TFRecordError: If no file matches, or a file cannot be read.
    """
    paths = functools.cache(lambda: resolve_files(files))
    for kind in source_kinds():
        if split is not None and not kind.takes_split:
            continue
        source = kind.open(files, split, paths)
        if source is not None:
            return source
    raise ValueError(
        "Expected `split` only with a TensorFlow Datasets directory (one that "
        f"tensorflow-datasets prepared). Received: split={split!r}, files={files!r}"
    )


def list_directory(directory: str) -> list[str] | None:
    """The data files of ``directory`` as the source that owns it lists them.

    ``None`` when no source claims it (then every file that is not hidden and not JSON).
    """
    for kind in source_kinds():
        listed = kind.list_directory(directory)
        if listed is not None:
            return listed
    return None


def _is_glob(path: str) -> bool:
    return any(char in _GLOB_CHARS for char in path)


def _directory_files(directory: str) -> list[str]:
    """The record files of a directory, as the source that owns it lists them.

    A ``schema.json`` sidecar's shard list, a TensorFlow Datasets directory's shards, or
    else every file that is not hidden and not JSON
    (:func:`~tfr_hooks.tfrecord.sources.base.list_directory`).
    """
    return list_directory(directory) or []


def resolve_files(files: Files) -> list[str]:
    """Expand paths, directories and glob patterns into a checked list of readable files.

    A directory stands for the files its source lists: the shards of its ``schema.json``
    sidecar, a TensorFlow Datasets directory's shards, or else every file in it that is
    not hidden and not JSON. Globs are sorted and skip
    ``schema.json``. Order is kept otherwise.

    Args:
        files: A path, directory or glob pattern, or a sequence of them.

    Returns:
        The files, each existing and readable, without duplicates.

    Raises:
        TypeError: If ``files`` is not a path or a sequence of paths.
        NoFilesError: If a glob or directory matches nothing, or a file does not exist.
        UnreadableFileError: If a file cannot be opened.
    """
    if isinstance(files, (str, os.PathLike)):
        items: list[object] = [files]
    elif isinstance(files, Sequence) and not isinstance(files, bytes):
        items = list(files)
    else:
        raise TypeError(
            "Expected `files` to be a path, a directory, a glob pattern or a list of them. "
            f"Received: files={files!r}"
        )
    if not items:
        raise NoFilesError(
            f"Expected `files` to name at least one TFRecord file. Received: files={files!r}"
        )
    result: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(
                f"Expected `files[{i}]` to be a path, a directory or a glob "
                f"pattern. Received: files[{i}]={item!r} of type "
                f"{type(item).__name__}"
            )
        path = os.fspath(item)
        if tf.io.gfile.isdir(path):
            found = _directory_files(path)
            if not found:
                raise NoFilesError(f"Directory {path!r} contains no TFRecord files.", file=path)
        elif _is_glob(path):
            found = sorted(
                p
                for p in tf.io.gfile.glob(path)
                if os.path.basename(p) != SCHEMA_FILENAME and not tf.io.gfile.isdir(p)
            )
            if not found:
                raise NoFilesError(f"No files match the pattern {path!r}.", file=path)
        else:
            found = [path]
        for name in found:
            if is_index_file(name):
                # a record index (or its lock) the package keeps beside a file, which a
                # user's glob or listing of the directory picks up with the data
                logger.debug("Skipped %s: a record index, not data.", name)
                continue
            if name not in seen:
                check_readable(name)
                seen.add(name)
                result.append(name)
    return result
