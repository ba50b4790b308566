"""Two MultiWorkerMirroredStrategy trainers (real processes) share one tf.data service job.

A :class:`~tfr_hooks.service.local.LocalService` (a dispatcher and 2 workers, real
processes on loopback) serves the batches of ``tfrecord.dataset(files, batch,
service=address)``; two trainer processes (``tests/_multi_worker_child.py service``,
through ``tests/_cluster.py``, with ``TF_CONFIG`` naming ``127.0.0.1`` ports) train on
them with ``FunctionLoop(strategy=MultiWorkerMirroredStrategy())``. The reader gives both
trainers one job (a name they derive alike, auto-sharding off), so the service splits
each epoch between them. Files of unequal sizes make their shares uneven.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import tensorflow as tf

from _cluster import run_cluster
from tfr_hooks.service.local import LocalService

CHILD = "tests/_multi_worker_child.py"
#: unequal files, 1,041 examples: an odd number, so the two trainers' shares of an epoch
#: are never equal; each service worker batches the files it is handed, so its last
#: batch of an epoch is a partial one. Not fewer: with ~100 examples one trainer's service
#: client often fetched the whole epoch before the other's first request (no example
#: twice, none lost, but one trainer on empty batches all epoch)
SIZES = (373, 229, 181, 107, 89, 62)
IDS = list(range(sum(SIZES)))
BATCH = 10
EPOCHS = 3  # the child's EPOCHS
#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 120


def _write(directory: Path) -> Path:
    """One file per size in ``SIZES``, of ``tf.train.Example`` records with an ``id``."""
    directory.mkdir()
    first = 0
    for f, size in enumerate(SIZES):
        with tf.io.TFRecordWriter(str(directory / f"part-{f}.tfrecord")) as writer:
            for index in range(first, first + size):
                feature = {
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[index % 7] * 4)),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
        first += size
    return directory


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 180)
def test_two_trainers_of_one_cluster_split_each_served_epoch(tmp_path: Path) -> None:
    data = _write(tmp_path / "data")
    with LocalService(workers=2, timeout=START) as service:
        workers = run_cluster(
            [CHILD, "service", str(data), service.address],
            2,
            timeout=150,
            env={"SERVICE_BATCH": str(BATCH)},
        )
    for worker in workers:  # the run ended, on both trainers, without an error
        assert worker.returncode == 0, (worker.index, worker.stdout[-2000:], worker.stderr[-4000:])
    chief, other = (w.result() for w in workers)
    assert len(chief["ids"]) == len(other["ids"]) == EPOCHS
    for epoch in range(EPOCHS):
        mine, theirs = chief["ids"][epoch], other["ids"][epoch]
        both = collections.Counter(mine + theirs)
        # no example twice: not within one trainer, not in both
        assert [i for i, n in both.items() if n > 1] == [], epoch
        assert set(both) <= set(IDS), epoch
        assert mine and theirs, epoch  # both trainers took part
        # every example of the epoch arrives: a trainer whose share ran out steps on
        # with empty batches (MultiWorkerMirroredStrategy's get_next_as_optional)
        # until the other's ends too
        assert sorted(both) == IDS, (epoch, sorted(set(IDS) - set(both)))
        # the loop's counts: equal steps on both, each trainer's steps as many as the
        # local batches it stepped on, examples those of both trainers
        steps = [w["epochs"][epoch]["steps"] for w in (chief, other)]
        assert steps[0] == steps[1] == len(chief["sizes"][epoch]) == len(other["sizes"][epoch])
        assert [w["epochs"][epoch]["examples"] for w in (chief, other)] == [len(IDS)] * 2
        # the loop's examples are those both trainers read: none dropped, none added
        assert sum(chief["sizes"][epoch]) + sum(other["sizes"][epoch]) == len(IDS)
        # uneven shares (an odd number of examples), and still the run went on to its end
        assert sum(chief["sizes"][epoch]) != sum(other["sizes"][epoch])
