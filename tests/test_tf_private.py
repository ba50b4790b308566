"""tfr_hooks.tf_private: each private TensorFlow API is where the module expects it.

Checked on the installed TensorFlow with real objects (datasets, a real tf.data service
on loopback), so that a release that moves or renames one fails here, not in a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tensorflow as tf

from tfr_hooks import tf_private
from tfr_hooks.data_service import LocalService
from tfr_hooks.tf_private import service_addresses

service_ops = tf.data.experimental.service
#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 180


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    with LocalService(workers=1, timeout=START) as local:
        yield local.address


def served(address: str) -> tf.data.Dataset:
    """``range(10)`` read through the tf.data service at ``address``."""
    return tf.data.Dataset.range(10).apply(service_ops.distribute("parallel_epochs", address))


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


def test_service_addresses_does_not_serialize_the_data_a_pipeline_holds() -> None:
    """5 stages over 32 MiB in memory: the walk stays far below serializing the graph."""
    dataset = plain_pipelines()["in_memory"]
    start = time.perf_counter()
    for _ in range(10):
        service_addresses(dataset)
    walk = (time.perf_counter() - start) / 10
    start = time.perf_counter()
    tf_private._serialized_graph(dataset)  # copies the 32 MiB constant (0.25 s on 2.21)
    serialized = time.perf_counter() - start
    assert walk < serialized / 10, (walk, serialized)


def test_service_addresses_names_a_wrong_argument() -> None:
    with pytest.raises(TypeError, match=r"tf.data.Dataset\. Received: dataset=\[1, 2\]"):
        service_addresses([1, 2])


def test_every_service_op_has_an_address_and_protocol_input() -> None:
    """The graph fallback finds the two inputs by name in each op's definition."""
    for op_type in ("DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV4"):
        assert tf_private._input_index(op_type, "address") is not None, op_type
        assert tf_private._input_index(op_type, "protocol") is not None, op_type
