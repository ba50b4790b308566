"""TFRecord I/O: write arrays to shards, convert and inspect any file, read batches back.

Examples:
    >>> import numpy as np
    >>> from tfr_hooks import tfrecord
    >>> tfrecord.write({"image": images, "label": labels}, "data/mnist",
    ...                shards=4, compression="gzip")  # doctest: +SKIP
    >>> tfrecord.inspect("data/mnist")[0].num_records  # doctest: +SKIP
    15000
    >>> ds = tfrecord.dataset("data/mnist", batch_size=128,
    ...                       as_tuple=("image", "label"))  # doctest: +SKIP
"""

from tfr_hooks.tfrecord.errors import (
    CorruptRecordError,
    EmptyFileError,
    MissingFeatureError,
    NoFilesError,
    NotTFRecordError,
    SchemaMismatchError,
    TFRecordError,
    UnreadableFileError,
)
from tfr_hooks.tfrecord.formats.damage import CorruptRecord
from tfr_hooks.tfrecord.formats.framing import detect_compression, iter_records
from tfr_hooks.tfrecord.inspection.describe import infer_schema, inspect
from tfr_hooks.tfrecord.inspection.diagnose import explain_error
from tfr_hooks.tfrecord.pipelines.contract import ReadFacts, Source
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadArgs, ReadConfig
from tfr_hooks.tfrecord.pipelines.position import ReadPosition
from tfr_hooks.tfrecord.pipelines.read import Batches, batches_of, dataset, read_batches, source
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.schema.sidecar import SCHEMA_FILENAME, load_schema
from tfr_hooks.tfrecord.sources.base import resolve_files
from tfr_hooks.tfrecord.sources.scan import FeatureInfo, FeatureListInfo, FileInfo
from tfr_hooks.tfrecord.writing.convert import convert
from tfr_hooks.tfrecord.writing.write import WriteResult, write

__all__ = [
    # writing
    "write",
    "convert",
    "WriteResult",
    # schema
    "Feature",
    "Schema",
    "load_schema",
    "SCHEMA_FILENAME",
    # inspecting
    "inspect",
    "infer_schema",
    "FileInfo",
    "FeatureInfo",
    "FeatureListInfo",
    "detect_compression",
    "iter_records",
    "resolve_files",
    # reading
    "dataset",
    "source",
    "read_batches",
    "batches_of",
    "ReadArgs",
    "ReadConfig",
    "Batches",
    "Source",
    "ReadFacts",
    "ReadPosition",
    "PipelineKind",
    "CorruptRecord",
    # errors
    "explain_error",
    "TFRecordError",
    "NoFilesError",
    "UnreadableFileError",
    "EmptyFileError",
    "CorruptRecordError",
    "NotTFRecordError",
    "SchemaMismatchError",
    "MissingFeatureError",
]
