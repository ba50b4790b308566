"""The user's tools to look at record files: :func:`inspect` and :func:`infer_schema`.

:func:`inspect` reads each file's records (in any compression) and reports the record
count and, per feature, its kind (``bytes``/``float``/``int64``), how many records hold
it and how long its value lists are. Records of ``tf.train.SequenceExample`` are told
from ``tf.train.Example`` ones by their ``feature_lists``: the context is reported as an
Example's features, and each feature list per frame, with its frames per record.
:func:`infer_schema` turns that into a :class:`~tfr_hooks.tfrecord.schema.schema.Schema` the
readers can use, preferring the ``schema.json`` sidecar when the files were written by
this package. Both scan through :mod:`tfr_hooks.tfrecord.sources.scan`.
"""

from __future__ import annotations

from tfr_hooks.checks import check_optional_positive_int
from tfr_hooks.tfrecord.formats.framing import Files, check_compression
from tfr_hooks.tfrecord.schema.schema import Schema
from tfr_hooks.tfrecord.sources.base import open_source, resolve_files
from tfr_hooks.tfrecord.sources.scan import FileInfo, infer_from_records, inspect_file

__all__ = ["inspect", "infer_schema"]


def inspect(
    files: Files, *, compression: str | None = None, max_records: int | None = None
) -> list[FileInfo]:
    """Report what TFRecord files hold: record counts, feature names, kinds and lengths.

    Works on files written by any tool, uncompressed or compressed (detected per file),
    and on ArrayRecord files (told by their name or first bytes; they need the
    ``arrayrecord`` extra: ``pip install tfr_hooks[arrayrecord]``).

    Args:
        files: Paths, directories or glob patterns.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        max_records: Examine the features of at most this many records per file (all
            records are still counted); ``None`` for all.

    Returns:
        One :class:`FileInfo` per file.

    Raises:
        NoFilesError: If nothing matches, or a file is missing.
        EmptyFileError: If a file holds no records.
        NotTFRecordError: If a file is neither a TFRecord nor an ArrayRecord file.
        ImportError: For an ArrayRecord file without the ``array-record`` package.
        CorruptRecordError: If a record is damaged, or the first one of a file is not a
            ``tf.train.Example`` or ``tf.train.SequenceExample`` (later ones that are
            neither are counted in :attr:`FileInfo.other_records`, with a warning).

    Examples:
        >>> from tfr_hooks import tfrecord
        >>> info = tfrecord.inspect("data/train-*.tfrecord")[0]  # doctest: +SKIP
        >>> info.num_records, info.features["label"].kind  # doctest: +SKIP
        (1000, 'int64')
    """
    codec = check_compression(compression)
    check_optional_positive_int(max_records, "max_records")
    paths = resolve_files(files)
    source = open_source(paths)  # what was written beside the files: the source knows
    return [inspect_file(path, codec, max_records, source.sidecar(path)) for path in paths]


def infer_schema(
    files: Files, *, compression: str | None = None, max_records: int | None = 1000
) -> Schema:
    """The schema to read ``files`` with: stored in ``schema.json``, or inferred.

    When the files were written by :func:`~tfr_hooks.tfrecord.write`, the sidecar gives
    the exact dtypes and shapes. Otherwise the first ``max_records`` records of each file
    are examined: a feature with the same number of values in all of them gets a fixed
    shape (``()`` for one value), any other a varying length (read as ragged), also one
    that some records lack, whichever records they are (an empty row where it is
    missing; give it a default to read it dense); int64 lists read as ``int64``, float
    lists as ``float32``, bytes lists as ``tf.string``. The feature lists of
    SequenceExample records are features with ``sequence=True``, inferred per frame the
    same way (after the context features).

    Args:
        files: Paths, directories or glob patterns.
        compression: ``None`` to detect, or ``""``, ``"gzip"``, ``"zlib"``.
        max_records: Records examined per file when there is no sidecar.

    Returns:
        The schema.

    Raises:
        SchemaMismatchError: If a feature holds different kinds of lists in different
            records, or the files disagree.
        TFRecordError: Any error of :func:`inspect`.
    """
    paths = resolve_files(files)
    sidecar = open_source(paths).sidecar(paths[0])
    if sidecar is not None:
        return sidecar.schema
    return infer_from_records(paths, check_compression(compression), max_records)
