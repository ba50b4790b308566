"""The readers' ``service=``: the pipeline runs on tf.data service workers, the trainer reads.

One :class:`LocalService` (a dispatcher and 2 workers, real processes on loopback) serves
the whole module. No test kills a worker (a read then never ends on TensorFlow 2.21);
every test has a time bound.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tfr_hooks
from _scripted import scripted_timing
from tfr_hooks import FunctionLoop, tfrecord
from tfr_hooks.tuning import HISTORY_KEY

v1 = tf.compat.v1

FILES, PER_FILE = 4, 100
IDS = list(range(FILES * PER_FILE))
#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 180


@pytest.fixture(scope="module")
def service(shared_service: str) -> str:
    return shared_service


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """4 files of 100 ``tf.train.Example`` records (``id`` and ``x``), written by TF alone."""
    directory = tmp_path_factory.mktemp("plain")
    files = []
    for f in range(FILES):
        path = str(directory / f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(PER_FILE):
                index = f * PER_FILE + i
                feature = {
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[index % 7] * 4)),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        files.append(path)
    return files


@pytest.fixture(scope="module")
def packed(plain: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same examples as packed shards: 4 shards of 10 examples a record."""
    directory = tmp_path_factory.mktemp("packed")
    tfrecord.convert(plain, directory, shards=FILES, examples_per_record=10)
    return directory


def ids_of(batches: Any) -> list[int]:
    return sorted(int(i) for batch in batches for i in np.asarray(batch["id"]).ravel())


def graph_epochs(batches: tfrecord.Batches, epochs: int) -> list[list[int]]:
    """The ids each initialization of ``batches``' iterator reads, to its end."""
    found = []
    with v1.Session() as session:
        for _ in range(epochs):
            session.run(batches.initializers)
            ids: list[int] = []
            while True:
                try:
                    ids += [int(i) for i in session.run(batches.tensors["id"]).ravel()]
                except tf.errors.OutOfRangeError:
                    break
            found.append(sorted(ids))
    return found


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound by this process and not listening: a connection to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize("in_memory", [True, "auto"])
def test_in_memory_with_service_is_refused_naming_both(plain: list[str], in_memory: Any) -> None:
    with pytest.raises(ValueError, match=r"in_memory=False with service=.*tf\.numpy_function"):
        tfrecord.dataset(plain, 16, in_memory=in_memory, service="127.0.0.1:5050")
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"in_memory=.*service="):
        tfrecord.read_batches(plain, 16, in_memory=in_memory, service="127.0.0.1:5050")


def test_the_queue_pipeline_with_service_is_refused(plain: list[str]) -> None:
    with tf.Graph().as_default(), pytest.raises(ValueError, match="Received: pipeline='queue'"):
        tfrecord.read_batches(plain, 16, pipeline="queue", service="127.0.0.1:5050")


def test_a_malformed_address_is_refused(plain: list[str]) -> None:
    with pytest.raises(ValueError, match="Received: service='localhost'"):
        tfrecord.dataset(plain, 16, service="localhost")


def test_a_closed_port_is_an_error_at_once(plain: list[str], closed_port: int) -> None:
    # at once: the refused connection is the error, not a wait for a dispatcher's answer
    with pytest.raises(ConnectionError, match=f"grpc://127.0.0.1:{closed_port}: .*refused"):
        tfrecord.dataset(plain, 16, service=f"127.0.0.1:{closed_port}")
    with tf.Graph().as_default(), pytest.raises(ConnectionError, match=f"{closed_port}: .*refused"):
        tfrecord.read_batches(plain, 16, service=f"grpc://127.0.0.1:{closed_port}")


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
@pytest.mark.parametrize("shuffle", [None, 64])
def test_every_example_once_per_epoch_through_the_service(
    service: str, plain: list[str], packed: Path, shuffle: int | None
) -> None:
    for files in (plain, packed):
        data = tfrecord.dataset(files, 16, shuffle=shuffle, service=service)
        assert data.cardinality() == tf.data.UNKNOWN_CARDINALITY
        for _ in range(2):  # a new iterator each: a new epoch
            assert ids_of(data) == IDS


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
def test_the_workers_run_map_fn_padding_and_batch_map_fn(service: str, plain: list[str]) -> None:
    def map_fn(example: dict[str, tf.Tensor]) -> dict[str, Any]:
        return {"id": example["id"], "x": example["x"][: example["id"] % 3 + 1]}  # ragged

    data = tfrecord.dataset(
        plain,
        16,
        map_fn=map_fn,
        pad_to="longest",
        batch_map_fn=lambda batch: {**batch, "twice": batch["id"] * 2},
        service=service,
    )
    batches = list(data)
    assert ids_of(batches) == IDS
    assert all(np.array_equal(b["twice"], 2 * np.asarray(b["id"])) for b in batches)
    assert {b["x"].shape[1] for b in batches} <= {1, 2, 3}


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
@pytest.mark.parametrize("shuffle", [None, 64])
def test_graph_mode_reads_each_example_once_per_initialization(
    service: str, plain: list[str], packed: Path, shuffle: int | None
) -> None:
    for files in (plain, packed):
        with tf.Graph().as_default():
            batches = tfrecord.read_batches(files, 16, shuffle=shuffle, seed=3, service=service)
            assert batches.facts.service == service
            assert batches.facts.kind is (
                tfrecord.PipelineKind.STREAMED if files is plain else tfrecord.PipelineKind.PACKED
            )
            assert graph_epochs(batches, 2) == [IDS, IDS]


class EpochCounts(tfr_hooks.Hook):
    """The steps and examples the loop reports at each epoch's end, and the calls run."""

    needs_every_step = False  # counts calls: "auto" is to make fewer than steps

    def __init__(self) -> None:
        self.reported: list[tuple[int, int]] = []
        self.runs = 0
        self.ran: list[int] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.runs += 1

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.reported.append((self.loop.epoch_steps, self.loop.epoch_examples))
        self.ran.append(self.runs)
        self.runs = 0


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
def test_function_loop_trains_exact_epochs_through_the_service(
    service: str, plain: list[str]
) -> None:
    # 20 divides each file's 100 examples: however the files are split over the workers,
    # every batch is full and an epoch is 20 steps
    data = tfrecord.dataset(plain, 20, shuffle=50, service=service)
    w = tf.Variable(tf.zeros([4]))

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.reduce_sum(batch["x"] * w, 1) - 1.0))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return {"loss": loss, "id": tf.reduce_mean(tf.cast(batch["id"], tf.float32))}

    counts = EpochCounts()
    history = FunctionLoop(data, step_fn=step, hooks=[counts], steps_per_execution=1).run(epochs=2)
    assert counts.reported == [(20, 400), (20, 400)]
    assert counts.ran == [20, 20]
    assert history["id"] == pytest.approx([199.5, 199.5])  # every example once, weighted
    assert len(history["loss"]) == 2


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
def test_function_loop_with_auto_steps_trains_exact_epochs_through_the_service(
    service: str, plain: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_timing(monkeypatch)  # cheap calls as the tuner sees them, on any machine
    # 100 steps an epoch (4 divides each file's 100 examples), a cheap step: calls grow
    source = tfrecord.source(plain, 4, shuffle=50, service=service)

    def step(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return {"id": tf.reduce_mean(tf.cast(batch["id"], tf.float32))}

    counts = EpochCounts()
    loop = FunctionLoop(source, step_fn=step, hooks=[counts], steps_per_execution="auto")
    history = loop.run(epochs=3)
    assert counts.reported == [(100, 400)] * 3
    assert history["id"] == pytest.approx([199.5] * 3)  # every example once an epoch
    assert max(history[HISTORY_KEY]) > 1 and sum(counts.ran) < 300  # calls of several steps


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
def test_session_loop_trains_exact_epochs_through_the_service(
    service: str, plain: list[str]
) -> None:
    with tf.Graph().as_default():
        batches = tfrecord.read_batches(plain, 20, shuffle=50, service=service)
        w = v1.get_variable("w", [4], initializer=tf.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.reduce_sum(batches.tensors["x"] * w, 1) - 1.0))
        train_op = v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        mean_id = tf.reduce_mean(tf.cast(batches.tensors["id"], tf.float32))
        counts = EpochCounts()
        loop = tfr_hooks.SessionLoop(
            train_op, {"loss": loss, "id": mean_id}, hooks=[counts], data=batches
        )
        history = loop.run(epochs=2)
    assert counts.reported == [(20, 400), (20, 400)]
    assert counts.ran == [20, 20]
    assert history["id"] == pytest.approx([199.5, 199.5])


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 240)
def test_the_trainers_of_one_cluster_share_each_epoch(
    service: str, plain: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # two trainers of one cluster, as MultiWorkerMirroredStrategy's TF_CONFIG gives them,
    # read one job: here in one process, taking batches in turn
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker"}}))
    # each trainer builds its dataset once; every epoch is a new iterator over it (the
    # iterations of one named job are counted per dataset)
    datasets = [tfrecord.dataset(plain, 10, service=service) for _ in range(2)]
    for epoch in range(2):
        trainers = [iter(data) for data in datasets]
        got: list[list[int]] = [[], []]
        going = [True, True]
        while any(going):
            for t, trainer in enumerate(trainers):
                if going[t]:
                    try:
                        got[t] += [int(i) for i in next(trainer)["id"].numpy()]
                    except StopIteration:
                        going[t] = False
        assert sorted(got[0] + got[1]) == IDS, epoch  # each example once, in one trainer
        assert got[0] and got[1], epoch  # both took part


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 120)
def test_the_served_reader_names_its_service_in_its_facts_and_graph(
    service: str, plain: list[str], packed: Path
) -> None:
    """The loops watch the service the reader's facts name, or its graph shows."""
    from tfr_hooks import tf_private

    source = tfrecord.source(plain, 16, service=service)
    assert source.facts.service == service
    assert source.facts.served_examples() is None  # no schema.json: the size is unknown
    # schema.json counts the epoch's examples: a lost worker's are then counted
    assert tfrecord.source(packed, 16, service=service).facts.served_examples() == 400
    # a plain dataset, transformed after the reader: its graph still names the service
    mapped = tfrecord.dataset(plain, 16, service=service).map(lambda d: d).prefetch(1)
    assert tf_private.service_addresses(mapped) == [service]
    assert tf_private.service_addresses(tfrecord.dataset(plain, 16)) == []
