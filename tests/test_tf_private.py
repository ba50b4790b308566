"""tfr_hooks.tf_private: each private TensorFlow API is where the module expects it.

Checked on the installed TensorFlow with real objects (datasets, a real tf.data service
on loopback), so that a release that moves or renames one fails here, not in a run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tf_private
from tfr_hooks.tf_private import service_addresses

service_ops = tf.data.experimental.service
#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 180


@pytest.fixture(scope="module")
def service(shared_service: str) -> str:
    return shared_service


def served(address: str) -> tf.data.Dataset:
    """``range(10)`` read through the tf.data service at ``address``."""
    return tf.data.Dataset.range(10).apply(service_ops.distribute("distributed_epoch", address))


def by_id(address: str) -> tf.data.Dataset:
    """``range(5)`` registered at ``address`` and read back with ``from_dataset_id``."""
    dataset_id = service_ops.register_dataset(address, tf.data.Dataset.range(5))
    spec = tf.TensorSpec((), tf.int64)
    return service_ops.from_dataset_id("parallel_epochs", address, dataset_id, element_spec=spec)


def inside_flat_map(address: str) -> tf.data.Dataset:
    return tf.data.Dataset.range(2).flat_map(lambda _: served(address))


def inside_nested_interleave(address: str) -> tf.data.Dataset:
    return tf.data.Dataset.range(2).interleave(
        lambda _: tf.data.Dataset.range(1).flat_map(lambda _: served(address)), cycle_length=2
    )


def with_every_stage(address: str) -> tf.data.Dataset:
    options = tf.data.Options()
    options.deterministic = True
    data = served(address).map(lambda x: x + 1).with_options(options)
    data = data.batch(2).take(3).repeat(2).apply(tf.data.experimental.assert_cardinality(6))
    return data.prefetch(1)


PIPELINES: dict[str, Callable[[str], tf.data.Dataset]] = {
    "distribute": served,
    "map_prefetch": lambda address: served(address).map(lambda x: x + 1).prefetch(1),
    "every_stage": with_every_stage,
    "from_dataset_id": by_id,
    "flat_map": inside_flat_map,
    "nested_interleave": inside_nested_interleave,
}


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_service_addresses_finds_the_service_a_pipeline_reads(service: str, pipeline: str) -> None:
    dataset = PIPELINES[pipeline](service)
    assert service_addresses(dataset) == [service]
    # by the cheap walk, not by the serialized-graph fallback
    assert list(dict.fromkeys(tf_private._walk_services(dataset))) == [service]


@pytest.mark.slow
@pytest.mark.data_service
def test_the_found_service_is_the_one_read(service: str) -> None:
    dataset = served(service).map(lambda x: x + 1).prefetch(1)
    (address,) = service_addresses(dataset)
    assert sorted(int(x) for x in dataset.take(20)) == list(range(1, 11))
    assert address == service


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.parametrize("pipeline", ["map_prefetch", "from_dataset_id", "flat_map"])
def test_service_addresses_in_graph_mode(service: str, pipeline: str) -> None:
    with tf.Graph().as_default():
        if pipeline == "map_prefetch":
            dataset = tf.compat.v1.data.Dataset.range(10).apply(
                service_ops.distribute("parallel_epochs", service)
            )
            dataset = dataset.map(lambda x: x + 1).prefetch(1)
        else:
            dataset = PIPELINES[pipeline](service)
        assert service_addresses(dataset) == [service]
        assert list(dict.fromkeys(tf_private._walk_services(dataset))) == [service]


@pytest.mark.slow
@pytest.mark.data_service
def test_the_serialized_graph_fallback_finds_the_same_services(service: str) -> None:
    """The fallback (other TensorFlows' internals) reads the dataset's own graph."""
    for name in ("map_prefetch", "from_dataset_id", "nested_interleave"):
        dataset = PIPELINES[name](service)
        graph = tf_private._serialized_graph(dataset)
        assert list(dict.fromkeys(tf_private._graph_services(graph))) == [service], name
    with tf.Graph().as_default():
        graph = tf_private._serialized_graph(PIPELINES["map_prefetch"](service))
        assert list(dict.fromkeys(tf_private._graph_services(graph))) == [service]


def plain_pipelines() -> dict[str, tf.data.Dataset]:
    array = np.zeros((8 * 1024 * 1024,), np.float32)  # 32 MiB embedded in the pipeline
    return {
        "range": tf.data.Dataset.range(100).map(lambda x: x * 2).batch(4).prefetch(1).repeat(),
        "in_memory": tf.data.Dataset.from_tensor_slices(array)
        .map(lambda x: x + 1)
        .shuffle(10)
        .batch(4)
        .prefetch(1),
        "flat_map": tf.data.Dataset.range(3).flat_map(tf.data.Dataset.range),
    }


def test_a_pipeline_without_a_service_has_none() -> None:
    for name, dataset in plain_pipelines().items():
        assert service_addresses(dataset) == [], name


def test_service_addresses_does_not_serialize_the_data_a_pipeline_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5 stages over 32 MiB in memory: the walk finds the answer without serializing the
    pipeline's graph (which copies the 32 MiB constant), counted in calls."""
    serialized: list[Any] = []

    def serialize(dataset: Any) -> Any:
        serialized.append(dataset)
        return serialize_graph(dataset)

    serialize_graph = tf_private._serialized_graph
    monkeypatch.setattr(tf_private, "_serialized_graph", serialize)
    dataset = plain_pipelines()["in_memory"]
    assert service_addresses(dataset) == []
    assert serialized == []  # the walk, not the fallback that serializes


def test_service_addresses_names_a_wrong_argument() -> None:
    with pytest.raises(TypeError, match=r"tf.data.Dataset\. Received: dataset=\[1, 2\]"):
        service_addresses([1, 2])


def test_every_service_op_has_an_address_and_protocol_input() -> None:
    """The graph fallback finds the two inputs by name in each op's definition."""
    for op_type in ("DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV4"):
        assert tf_private._input_index(op_type, "address") is not None, op_type
        assert tf_private._input_index(op_type, "protocol") is not None, op_type


# -- the private modules, and who imports them ------------------------------------------

#: modules allowed to use a private TensorFlow API themselves (module -> names): none, all
#: go through tf_private
PENDING: dict[str, set[str]] = {}
PRIVATE_NAMES = {
    "tensorflow.python",
    "_DefaultDistributionStrategy",
    "_variant_tensor",
    "_common_args",
    "_in_multi_worker_mode",
    "_checkpoint_dir",
    "_as_serialized_graph",
    "_inputs",
    "_functions",
}


@pytest.mark.parametrize("module", sorted(tf_private.PRIVATE_APIS))
def test_each_private_module_has_the_names_tf_private_takes(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [n for n in tf_private.PRIVATE_APIS[module] if not hasattr(imported, n)]
    assert not missing, f"{module} has no {missing}: update tfr_hooks/tf_private.py"


def test_no_other_module_uses_a_private_tensorflow_api() -> None:
    package = Path(tf_private.__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name == "tf_private.py":
            continue
        text = path.read_text()
        used = {
            name for name in PRIVATE_NAMES if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text)
        }
        assert used == PENDING.get(name, set()), f"tfr_hooks/{name} uses {sorted(used)}"


# -- cancelling a blocked call ----------------------------------------------------------


@pytest.mark.timeout(120)
def test_start_cancel_ends_a_call_blocked_in_an_op() -> None:
    queue = tf.queue.FIFOQueue(1, tf.int64)
    blocked = tf.function(lambda: queue.dequeue())  # the queue stays empty: blocks
    manager = tf_private.cancellation_manager()
    cancel = threading.Timer(0.5, tf_private.start_cancel, [manager])
    # if cancelling does not work, the closed queue ends the call (OutOfRangeError)
    give_up = threading.Timer(60, lambda: queue.close(cancel_pending_enqueues=True))
    cancel.start()
    give_up.start()
    assert not tf_private.is_cancelled(manager)
    try:
        with pytest.raises(tf.errors.CancelledError):
            tf_private.call_cancellable(manager, blocked)
    finally:
        cancel.cancel()
        give_up.cancel()
    assert tf_private.is_cancelled(manager)  # a new manager is needed for the next call


def test_call_cancellable_returns_what_the_function_returns() -> None:
    manager = tf_private.cancellation_manager()
    add = tf.function(lambda a, b: a + b)
    assert int(tf_private.call_cancellable(manager, add, tf.constant(2), tf.constant(3))) == 5


# -- what TensorFlow has no public getter for -------------------------------------------


@pytest.mark.slow  # a fresh process imports TensorFlow (about 14 s of CPU)
@pytest.mark.range_ends
def test_op_determinism_enabled_follows_tensorflow() -> None:
    """Before and after ``enable_op_determinism()``, in a fresh process (it is global)."""
    script = (
        "import tensorflow as tf\n"
        "from tfr_hooks.tf_private import op_determinism_enabled\n"
        "before = op_determinism_enabled()\n"
        "tf.config.experimental.enable_op_determinism()\n"
        "print(before, op_determinism_enabled())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={
            **{k: v for k, v in os.environ.items() if k != "TF_DETERMINISTIC_OPS"},
            "TF_CPP_MIN_LOG_LEVEL": "2",
        },
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True"]


def test_is_default_strategy_tells_the_default_from_a_real_strategy() -> None:
    assert tf_private.is_default_strategy(tf.distribute.get_strategy())
    assert not tf_private.is_default_strategy(tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert not tf_private.is_default_strategy(tf.distribute.MirroredStrategy(["/cpu:0"]))
    assert not tf_private.is_default_strategy(None)


def test_in_multi_worker_mode_is_asked_of_the_strategy() -> None:
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    # the private method is where the module reads it, on the strategies that have it
    assert callable(mirrored.extended._in_multi_worker_mode)
    assert not tf_private.in_multi_worker_mode(mirrored)
    assert not tf_private.in_multi_worker_mode(tf.distribute.get_strategy())
    assert not tf_private.in_multi_worker_mode(None)


def test_saver_hook_checkpoint_dir_is_the_one_it_was_made_with(tmp_path: Path) -> None:
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        hook = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path / "ckpt"), save_steps=1)
        assert tf_private.saver_hook_checkpoint_dir(hook) == str(tmp_path / "ckpt")
    assert tf_private.saver_hook_checkpoint_dir(object()) is None


# -- a single-device map ----------------------------------------------------------------


def single_device_functions(dataset: tf.data.Dataset) -> list[str]:
    """The functions of ``dataset``'s graph with the single-device attribute."""
    graph = tf_private._serialized_graph(dataset)
    return [
        f.signature.name for f in graph.library.function if f.attr["experimental_ints_on_device"].b
    ]


@pytest.mark.parametrize("graph_mode", [False, True])
def test_single_device_map_maps_with_a_single_device_function(graph_mode: bool) -> None:
    with tf.Graph().as_default() if graph_mode else contextlib.nullcontext():
        data = tf_private.single_device_map(tf.data.Dataset.range(5), lambda x: x * 2)
        assert isinstance(data, tf_private.single_device_map_class())  # not the fallback
        assert data.element_spec == tf.TensorSpec((), tf.int64)
        assert len(single_device_functions(data)) == 1
        if not graph_mode:
            assert list(data.as_numpy_iterator()) == [0, 2, 4, 6, 8]
            assert int(data.cardinality()) == 5
        else:
            iterator = tf.compat.v1.data.make_one_shot_iterator(data).get_next()
            with tf.compat.v1.Session() as session:
                assert [int(session.run(iterator)) for _ in range(5)] == [0, 2, 4, 6, 8]


def test_random_record_reader_reads_by_offset_and_fails_on_a_bad_checksum(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in (b"abc", b"defg"):
            writer.write(record)
    reader = tf_private.random_record_reader(str(path))
    assert reader.read(0) == (b"abc", 19)  # 12 header + 3 data + 4 CRC
    assert reader.read(19) == (b"defg", 39)
    with pytest.raises(IndexError):
        reader.read(39)
    data = bytearray(path.read_bytes())
    data[19 + 12] ^= 1  # the second record's data
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        tf_private.random_record_reader(str(path)).read(19)


def test_records_from_offset_enters_a_file_at_a_record(tmp_path: Path) -> None:
    """The reader seeks to the byte offset: it starts at that record, reads no earlier one."""
    path = str(tmp_path / "r.tfrecord")
    records = [bytes([i]) * (i + 1) for i in range(10)]
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    offset = sum(len(r) + 16 for r in records[:4])  # 12-byte header, 4-byte footer each
    # the bytes before it are garbage: a read of them would fail its checksum
    with open(path, "r+b") as handle:
        handle.write(b"\xff" * offset)
    read = tf_private.records_from_offset(path, offset, 64)
    assert [r.numpy() for r in read] == records[4:]
    with pytest.raises(tf.errors.DataLossError):
        list(tf_private.records_from_offset(path, 0, 64))


# -- the stages of a pipeline -----------------------------------------------------------


@pytest.mark.parametrize("graph_mode", [False, True], ids=["eager", "graph"])
def test_dataset_stages_walks_back_and_tells_which_stages_keep_every_batch(
    graph_mode: bool,
) -> None:
    context = tf.Graph().as_default() if graph_mode else contextlib.nullcontext()
    with context:
        reader = tf.data.Dataset.range(12).batch(3)
        kept = (
            reader.map(lambda x: x + 1)
            .map(lambda x: x * 2, num_parallel_calls=2)
            .prefetch(1)
            .with_options(tf.data.Options())
        )
        stages = list(tf_private.dataset_stages(kept))
        names = [(name, keeps) for _, name, keeps in stages]
        assert names[:4] == [
            ("Options", True),
            ("Prefetch", True),
            ("ParallelMap", True),
            ("Map", True),
        ]
        assert names[4] == ("Batch", False)
        # the reader's own object is met, so what it noted is found behind the user's map
        found = [stage for stage, _, _ in stages]
        assert any(stage is reader or getattr(reader, "_dataset", None) is stage for stage in found)
        for changed, name in [
            (reader.filter(lambda x: True), "Filter"),
            (reader.take(2), "Take"),
            (reader.unbatch(), "Unbatch"),
            (reader.rebatch(2), "Rebatch"),
            (reader.shuffle(2), "Shuffle"),
            (reader.cache(), "Cache"),
            (reader.repeat(2), "Repeat"),
        ]:
            first = next(tf_private.dataset_stages(changed.map(lambda x: x)))
            second = next(tf_private.dataset_stages(changed))
            assert first[2] is True and second[1:] == (name, False), name
        both = tf.data.Dataset.zip((reader, reader))
        assert [n for _, n, _ in tf_private.dataset_stages(both)] == ["Zip"]  # several inputs
