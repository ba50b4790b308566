"""The record sources: the dispatcher picks one per input, and each gives its facts.

Plain files, a directory written by ``tfrecord.write`` (a ``schema.json`` sidecar) and a
directory TensorFlow Datasets prepared (``tests/_tfds_builders.py``, written by TFDS
itself) each open as their own source, with their files, counts and schema.

A source the package does not know (``tests/_manifest_source.py``: a folder whose
``manifest.txt`` lists its shards and counts) is added through the seam alone
(``register_source``) and runs through every pipeline kind under both loops (issue 44);
unregistered, the dispatcher falls back to plain files and the facts differ.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import _tfds_builders as builders
import tfr_hooks
from _manifest_source import ManifestSource, write_manifest_folder
from _tfrecord_data import example, int64_feature, write_records
from helpers import EpochSizes
from test_size_matrix import BATCH, EPOCHS, _reader_args, expected_epochs
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.tfrecord.pipelines.options import PipelineKind
from tfr_hooks.tfrecord.sources.base import (
    SOURCE_MODULES,
    RecordSource,
    open_source,
    register_source,
    resolve_files,
    source_kinds,
    unregister_source,
)
from tfr_hooks.tfrecord.sources.converted import ConvertedSource
from tfr_hooks.tfrecord.sources.files import FileSource
from tfr_hooks.tfrecord.sources.tfds import TfdsSource

v1 = tf.compat.v1


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


@pytest.mark.slow  # an index built beside the files: about 1 s of CPU
def test_a_directory_of_plain_files_lists_no_record_index_kept_beside_them(tmp_path):
    """shuffle='global' keeps FILE.tfrindex (and its .lock) beside each file: not data."""
    path = _plain(tmp_path)
    first = tfrecord.source(str(tmp_path), 2, shuffle="global", seed=1)
    assert sorted(int(i) for b in first.dataset for i in b["label"]) == list(range(5))
    assert (tmp_path / "plain.tfrecord.tfrindex").exists()
    (tmp_path / "plain.tfrecord.tfrindex.lock").touch()  # as while another worker builds
    assert open_source(str(tmp_path)).files == [path]
    again = tfrecord.source(str(tmp_path), 2, shuffle="global", seed=1)
    assert sorted(int(i) for b in again.dataset for i in b["label"]) == list(range(5))
    # a user's own glob or listing of the folder picks the index up too: not data either
    assert resolve_files(str(tmp_path / "plain*")) == [path]
    listed = sorted(str(p) for p in tmp_path.iterdir())
    assert len(listed) == 3 and resolve_files(listed) == [path]
    by_hand = tfrecord.source(listed, 2, shuffle="global", seed=1)
    assert sorted(int(i) for b in by_hand.dataset for i in b["label"]) == list(range(5))


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


# --- a source only the tests know, through the seam -------------------------------------

#: a batch divides it, and does not (``BATCH`` of tests/test_size_matrix.py is 8)
MANIFEST_SIZES = {"divisible": 32, "remainder": 37}
#: every pipeline kind a local source feeds (the served kind reads the same plan through
#: a tf.data service: tests/test_size_matrix.py); the queue is ``SessionLoop``'s only
MANIFEST_KINDS = ("streamed", "packed", "decoded", "encoded", "queue")
#: the kind each case must build: the source's facts choose it (packed: its manifest)
BUILT = {
    "streamed": PipelineKind.STREAMED,
    "packed": PipelineKind.PACKED,
    "decoded": PipelineKind.MEMORY_DECODED,
    "encoded": PipelineKind.MEMORY_ENCODED,
    "queue": PipelineKind.QUEUE,
}


@pytest.fixture
def registered() -> Iterator[type[RecordSource]]:
    """The manifest source registered for one test, and removed after it."""
    register_source(ManifestSource)
    try:
        yield ManifestSource
    finally:
        unregister_source(ManifestSource)


@pytest.fixture(scope="module", params=list(MANIFEST_SIZES))
def manifest_folders(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One size's manifest folders, plain and packed (4 a record), written once."""
    n = MANIFEST_SIZES[request.param]
    plain = tmp_path_factory.mktemp(f"manifest{n}")
    packed = tmp_path_factory.mktemp(f"manifest_packed{n}")
    shards = {
        "plain": write_manifest_folder(plain, n),
        "packed": write_manifest_folder(packed, n, per_record=4),
    }
    return n, plain, packed, shards


def test_a_registered_source_is_asked_before_the_package_sources(registered):
    assert source_kinds()[0] is registered
    assert source_kinds()[1:] == [TfdsSource, ConvertedSource, FileSource]
    assert register_source(registered) is registered  # again: no second entry
    assert source_kinds().count(registered) == 1


def test_register_source_refuses_what_is_not_a_whole_source():
    with pytest.raises(
        TypeError, match=r"subclass of .*RecordSource. Received: kind=<class 'int'>"
    ):
        register_source(int)  # type: ignore[arg-type]

    class Half(RecordSource):  # no compression, schema, check
        @classmethod
        def open(cls, files: Any, split: Any, paths: Any) -> None:
            return None

    with pytest.raises(TypeError, match=r"Half leaves \['check', 'compression', 'schema'\]"):
        register_source(Half)
    with pytest.raises(ValueError, match=r"added with register_source .*Received: kind="):
        unregister_source(Half)
    assert Half not in source_kinds()


def test_a_manifest_folder_is_read_through_the_registered_source(registered, tmp_path):
    shards = write_manifest_folder(tmp_path / "m", 37)
    source = open_source(tmp_path / "m")
    assert type(source) is registered
    assert source.files == shards  # the manifest's shards: not manifest.txt
    assert source.counts() == [12, 25]  # the manifest's counts, known before a read
    assert resolve_files(tmp_path / "m") == shards
    facts = tfrecord.source(tmp_path / "m", BATCH).facts
    assert (facts.kind, facts.files, facts.examples) == (PipelineKind.STREAMED, tuple(shards), 37)
    assert facts.steps == 5  # ceil(37 / 8), known up front from the counts


def test_tfr_hooks_inspect_asks_the_registered_source(registered, tmp_path, capsys):
    from tfr_hooks.cli import main

    write_manifest_folder(tmp_path / "m", 37)
    assert main(["inspect", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.strip() == "manifest source: 2 shards, 37 examples"


def test_unregistered_the_folder_falls_back_to_plain_files(tmp_path):
    shards = write_manifest_folder(tmp_path / "m", 37)
    assert ManifestSource not in source_kinds()
    # the directory's listing is every file: manifest.txt too, which is no TFRecord
    with pytest.raises(tfrecord.TFRecordError, match=r"manifest\.txt' is not a TFRecord file"):
        tfrecord.source(tmp_path / "m", BATCH)
    # its shards alone are plain files: nothing counts them before they are read
    source = open_source(str(tmp_path / "m" / "*.rec"))
    assert type(source) is FileSource and source.counts() == [None, None]
    facts = tfrecord.source(str(tmp_path / "m" / "*.rec"), BATCH).facts
    assert facts.files == tuple(shards) and facts.examples is None and facts.steps is None
    # packed shards read as plain: 1 example a record, its 4 indices one value
    packed = write_manifest_folder(tmp_path / "p", 37, per_record=4)
    facts = tfrecord.source(packed, BATCH).facts
    assert facts.kind is PipelineKind.STREAMED and facts.examples_per_record == 1


class _Seen(tfr_hooks.Hook):
    """How often each example's index was read in each epoch, from ``read()`` at its end.

    ``read`` gives the running count of each index; the hook keeps each epoch's part.
    """

    def __init__(self, read: Any) -> None:
        self.read = read
        self.epochs: list[list[int]] = []
        self.before: np.ndarray | None = None

    def begin(self) -> None:
        self.epochs, self.before = [], None

    def epoch_end(self, epoch: int, logs: Any = None) -> None:
        now = np.asarray(self.read())
        self.epochs.append((now - (0 if self.before is None else self.before)).tolist())
        self.before = now


class _SessionSeen(_Seen):
    """:class:`_Seen` for ``SessionLoop``: the index of each batch it takes, fetched."""

    def __init__(self, index: Any, n: int) -> None:
        self.index, self.n = index, n
        self.counts = np.zeros(n, np.int64)
        super().__init__(lambda: self.counts.copy())

    def begin(self) -> None:
        super().begin()
        self.counts = np.zeros(self.n, np.int64)

    def before_run(self, run_context: Any) -> Any:
        return v1.train.SessionRunArgs(self.index)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        np.add.at(self.counts, run_values.results, 1)


def _check_manifest_facts(facts: Any, kind: str, n: int, shards: dict[str, list[str]]) -> None:
    """The facts come from the manifest: its shards, its counts, its packing."""
    assert facts.kind is BUILT[kind]
    assert facts.files == tuple(shards["packed" if kind == "packed" else "plain"])
    assert facts.examples == n
    assert facts.examples_per_record == (4 if kind == "packed" else 1)


def _check_each_example(seen: list[list[int]], kind: str, n: int) -> None:
    """Each example once an epoch (the queue: once a pass, over its one stream)."""
    if kind == "queue":  # an epoch ends with the batch that ends a pass: whole run
        assert np.sum(seen, axis=0).tolist() == [EPOCHS] * n
    else:
        assert seen == [[1] * n] * EPOCHS


def _function_loop_manifest(kind: str, folders: Any) -> None:
    n, plain, packed, shards = folders
    read = tfrecord.source(**_reader_args(kind, n, plain, packed, False))
    _check_manifest_facts(read.facts, kind, n, shards)
    counts = tf.Variable(tf.zeros([n], tf.int64))

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        index = batch["index"]
        counts.scatter_nd_add(index[:, None], tf.ones_like(index))
        return {"examples": tf.cast(tf.size(index), tf.float32)}

    sizes = EpochSizes(max_steps=n // BATCH + 1)
    seen = _Seen(counts.numpy)
    FunctionLoop(read, step_fn=step, hooks=[sizes, seen], handle_signals=False).run(EPOCHS)
    assert sizes.sizes == expected_epochs(kind, n, False)
    _check_each_example(seen.epochs, kind, n)


def _session_loop_manifest(kind: str, folders: Any) -> None:
    n, plain, packed, shards = folders
    args = _reader_args(kind, n, plain, packed, False)
    if kind == "queue":
        args.update(pipeline="queue", num_epochs=EPOCHS)
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(**args)
        _check_manifest_facts(batches.facts, kind, n, shards)
        sizes = EpochSizes(max_steps=2 * n // BATCH + 1)
        seen = _SessionSeen(batches.tensors["index"], n)
        step = v1.train.get_or_create_global_step()
        loop = tfr_hooks.SessionLoop(
            v1.assign_add(step, 1), hooks=[sizes, seen], data=batches, handle_signals=False
        )
        loop.run(EPOCHS)
    assert sizes.sizes == expected_epochs(kind, n, False)
    _check_each_example(seen.epochs, kind, n)


@pytest.mark.parametrize(
    "kind",
    [
        "streamed",
        *(pytest.param(k, marks=pytest.mark.slow) for k in ("packed", "decoded", "encoded")),
    ],
)
def test_function_loop_reads_the_manifest_source(registered, manifest_folders, kind):
    _function_loop_manifest(kind, manifest_folders)


@pytest.mark.parametrize(
    "kind",
    [
        "streamed",
        *(pytest.param(k, marks=pytest.mark.slow) for k in MANIFEST_KINDS[1:]),
    ],
)
def test_session_loop_reads_the_manifest_source(registered, manifest_folders, kind):
    _session_loop_manifest(kind, manifest_folders)
