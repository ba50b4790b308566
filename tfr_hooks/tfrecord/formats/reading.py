"""The reading of records: the formats registered, and the one value the pipelines read.

:func:`format_of` tells a file's :class:`~tfr_hooks.tfrecord.formats.records.RecordFormat`
(the last registered format that recognizes it, else TFRecord; ArrayRecord,
:mod:`~tfr_hooks.tfrecord.formats.arrayrecord`, is built in); :func:`register_format`
adds a format from outside the package. :class:`RecordFiles` is what the pipelines read
records through: the files, their compression and format, and the damage to skip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFormat
from tfr_hooks.tfrecord.formats.damage import DamagedReads, DamageMap
from tfr_hooks.tfrecord.formats.records import RecordFormat
from tfr_hooks.tfrecord.formats.tfrecord import TFRecordFormat

__all__ = [
    "RecordFiles",
    "files_format",
    "format_of",
    "register_format",
    "unregister_format",
]


#: The formats asked, last registered first; TFRecord is every other file's.
_FORMATS: list[type[RecordFormat]] = [ArrayRecordFormat]


def register_format(kind: type[RecordFormat]) -> type[RecordFormat]:
    """Add ``kind`` to the formats files are recognized by (asked before those before it).

    Usable as a class decorator. TFRecord is the format of any file no registered format
    recognizes.

    Raises:
        TypeError: ``kind`` is not a :class:`RecordFormat` subclass.
    """
    if not (isinstance(kind, type) and issubclass(kind, RecordFormat)):
        raise TypeError(f"Expected a RecordFormat subclass. Received: kind={kind!r}")
    if kind not in _FORMATS:
        _FORMATS.insert(0, kind)
    return kind


def unregister_format(kind: type[RecordFormat]) -> None:
    """Remove ``kind`` from the formats (a test's clean-up); unknown kinds are ignored."""
    if kind in _FORMATS:
        _FORMATS.remove(kind)


def format_of(path: str) -> RecordFormat:
    """The format of file ``path``: the last registered that recognizes it, else TFRecord."""
    for kind in _FORMATS:
        if kind.recognizes(path):
            return kind()
    return TFRecordFormat()


def files_format(paths: Sequence[str]) -> RecordFormat:
    """The one format of ``paths``.

    Raises:
        ValueError: The files are of several formats (naming one file of each).
    """
    found = {path: format_of(path) for path in paths}
    names = {fmt.name: path for path, fmt in reversed(found.items())}
    if len(names) > 1:
        raise ValueError(f"Expected the files of one format. Received: files of formats {names}")
    if not found:
        return format_of("")
    return next(iter(found.values()))


@dataclass(frozen=True)
class RecordFiles:
    """The reading of records: the files, their compression, and the damage to skip.

    The one value the pipelines read records through (a plan's
    :attr:`~tfr_hooks.tfrecord.pipelines.plan.Plan.records`): where a scan found damaged
    records (``max_corrupt_records``), only the whole records of the damaged files are
    read (:class:`DamagedReads`), and every other file through its format
    (:mod:`tfr_hooks.tfrecord.formats.records`).

    Attributes:
        files: The files, in order (held as a tuple).
        compression: Their compression (``""``, ``"GZIP"``, ``"ZLIB"``).
        damage: What :func:`scan_damage` found in them, or ``None`` when nothing was scanned.
        reading: Their :class:`~tfr_hooks.tfrecord.formats.records.RecordFormat`
            (``None``: recognized from the files, see
            :func:`~tfr_hooks.tfrecord.formats.records.files_format`).
    """

    files: Sequence[str]
    compression: str
    damage: DamageMap | None = None
    reading: RecordFormat | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))

    @property
    def format(self) -> RecordFormat:
        """The files' :class:`~tfr_hooks.tfrecord.formats.records.RecordFormat`."""
        return files_format(self.files) if self.reading is None else self.reading

    def damaged(self, files: Sequence[str] | None = None) -> bool:
        """Whether any of ``files`` (default: all) holds a damaged record."""
        return self.damage is not None and self.damage.damages(self._of(files))

    def clean(self) -> list[str]:
        """The files without damage."""
        return list(self.files) if self.damage is None else self.damage.clean(self.files)

    def records(self, files: Sequence[str] | None = None) -> tf.data.Dataset:
        """The (whole) records of ``files`` (default: all), file after file."""
        chosen = self._of(files)
        if self.damage is not None and self.damage.damages(chosen):
            return DamagedReads(self.damage).all_records(chosen)
        return self.format.records_of_files(chosen, self.compression)

    def per_file(
        self, files: Sequence[str] | None = None
    ) -> tuple[tf.data.Dataset, Callable[..., tf.data.Dataset]]:
        """A dataset of ``files`` (default: all), and the records of one of its elements.

        For ``interleave``: the function takes an element (a path; with damage among
        ``files``, a path and its position) and returns that file's whole records.
        """
        chosen = self._of(files)
        if self.damage is not None and self.damage.damages(chosen):
            reads = DamagedReads(self.damage)
            return reads.paths(chosen), reads.records
        return tf.data.Dataset.from_tensor_slices(chosen), self._file_records

    def file_records(self, path: Any, position: Any) -> tf.data.Dataset:
        """The whole records of one file: ``path``, at :meth:`position` (tensors may do)."""
        if self.damage is None:
            return self._file_records(path)
        return DamagedReads(self.damage).records(path, position)

    def position(self, path: str) -> int:
        """Where :meth:`file_records` finds ``path``'s damage (0 without a scan)."""
        return 0 if self.damage is None else self.damage.index(path)

    def _file_records(self, path: Any) -> tf.data.Dataset:
        return self.format.records(path, self.compression)

    def _of(self, files: Sequence[str] | None) -> list[str]:
        return list(self.files if files is None else files)
