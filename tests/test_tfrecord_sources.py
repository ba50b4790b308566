"""The record sources: the dispatcher picks one per input, and each gives its facts.

Plain files, a directory written by ``tfrecord.write`` (a ``schema.json`` sidecar) and a
directory TensorFlow Datasets prepared (``tests/_tfds_builders.py``, written by TFDS
itself) each open as their own source, with their files, counts and schema.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tfr_hooks import tfrecord
from tfr_hooks.tfrecord.sources.base import (
    SOURCE_MODULES,
    RecordSource,
    open_source,
    resolve_files,
    source_kinds,
)
from tfr_hooks.tfrecord.sources.converted import ConvertedSource
from tfr_hooks.tfrecord.sources.files import FileSource
from tfr_hooks.tfrecord.sources.tfds import TfdsSource

try:
    import _tfds_builders as builders
    from _tfrecord_data import example, int64_feature, write_records
except ImportError:  # tests imported as a package
    from tests import _tfds_builders as builders
    from tests._tfrecord_data import example, int64_feature, write_records


@pytest.fixture(scope="module")
def tokens_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A directory TFDS prepared (train 7 examples, test 3 in its builder)."""
    return builders.prepare("tokens", tmp_path_factory.mktemp("tfds"))


def _plain(tmp_path: Path) -> str:
    records = [example(label=int64_feature([i])) for i in range(5)]
    return write_records(tmp_path / "plain.tfrecord", records)


def _converted(tmp_path: Path) -> Path:
    out = tmp_path / "converted"
    tfrecord.write({"x": np.arange(12, dtype=np.int64)}, out, shards=2)
    return out


def test_the_dispatcher_asks_the_sources_in_the_declared_order():
    kinds = source_kinds()
    assert kinds == [TfdsSource, ConvertedSource, FileSource]
    assert len(kinds) == len(SOURCE_MODULES)
    assert all(issubclass(kind, RecordSource) for kind in kinds)


def test_plain_files_are_a_file_source_of_unknown_counts(tmp_path):
    path = _plain(tmp_path)
    source = open_source(str(tmp_path / "*.tfrecord"))
    assert type(source) is FileSource
    assert source.files == [path]
    assert source.counts() == [None]
    assert source.compression(None, tolerant=False) == ""
    assert source.schema(None, None, "").names == ["label"]
    assert source.describe() is None and source.to_dict() is None


def test_a_written_directory_is_a_converted_source_with_its_counts(tmp_path):
    out = _converted(tmp_path)
    source = open_source(out)
    assert type(source) is ConvertedSource
    assert [Path(f).name for f in source.files] == [
        "data-00000-of-00002.tfrecord",
        "data-00001-of-00002.tfrecord",
    ]
    assert source.counts() == [6, 6]
    schema = source.schema(None, None, "")
    assert schema.names == ["x"]
    _, counts, per_record = source.check(schema, "", given=False)
    assert (counts, per_record) == ([6, 6], 1)
    # a glob into the directory reads its shards as converted too
    assert type(open_source(str(out / "data-*"))) is ConvertedSource


def test_a_tfds_directory_is_a_tfds_source_of_its_split(tokens_dir):
    train = open_source(tokens_dir)
    assert type(train) is TfdsSource
    assert train.split.name == "train"
    assert sum(c for c in train.counts() if c is not None) == train.split.examples > 0
    assert all("-train.tfrecord-" in f for f in train.files)
    test = open_source(tokens_dir, "test")
    assert all("-test.tfrecord-" in f for f in test.files)
    assert test.to_dict()["tfds"]["name"] == "tokens"
    codec = test.compression(None, tolerant=False)
    assert test.schema(None, None, codec).names == train.directory.schema.names
    # the listing of the directory is its shards: no JSON, no label names
    assert resolve_files(tokens_dir) == sorted(
        [*train.files, *test.files], key=lambda f: Path(f).name
    )


def test_a_split_with_a_source_without_splits_is_an_error(tmp_path):
    path = _plain(tmp_path)
    with pytest.raises(ValueError, match=r"Expected `split` only with a TensorFlow Datasets"):
        open_source(path, "train")


def test_features_json_that_is_not_json_is_an_error_naming_the_file(tokens_dir, tmp_path):
    copy = tmp_path / "copy" / "1.0.0"
    shutil.copytree(tokens_dir, copy)
    features = copy / "features.json"
    features.write_text('{"pythonClassName": "tensorflow_datasets.core.features')  # cut
    with pytest.raises(ValueError, match=r"features\.json' to be the JSON object") as caught:
        tfrecord.dataset(copy, 2)
    message = str(caught.value)
    assert str(features) in message
    assert "not valid JSON" in message and "line 1" in message
    assert 'Received: features.json=\'{"pythonClassName"' in message
