"""examples/data_service.py, run as a user runs it: one dispatcher and two local workers.

The script runs as ``__main__`` with its own argv in a process of the test fork server
(``tests/_cluster.py``: TensorFlow already imported); the servers it starts are real
``tfr-hooks data-service`` processes of its own, stopped before it exits.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _cluster import run_cluster

EPOCHS = 2
#: seconds the servers may take to start on a loaded 2-core machine (they import TF)
START = 180


@pytest.mark.slow
@pytest.mark.data_service
@pytest.mark.timeout(START + 300)
def test_data_service_example_trains_each_example_once_per_epoch(tmp_path: Path) -> None:
    data, logdir = tmp_path / "data", tmp_path / "logs"
    argv = ["examples/data_service.py", "--epochs", str(EPOCHS), "--data-dir", str(data),
            "--logdir", str(logdir), "--timeout", str(START)]  # fmt: skip
    (run,) = run_cluster(argv, 0, timeout=START + 240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "2 workers" in run.stdout
    epochs = re.findall(r"^epoch (\d+)/\d+: (\d+) steps, (\d+) examples", run.stdout, re.M)
    # every training example once an epoch; each of the 2 service workers batches its
    # own records, so an epoch is 24 full batches of 50 and at most one partial batch more
    assert [(e, n) for e, _, n in epochs] == [(str(e), "1200") for e in range(1, EPOCHS + 1)]
    assert all(int(steps) in (24, 25) for _, steps, _ in epochs), run.stdout
    assert "servers stopped; exit codes [0, 0, 0]" in run.stdout  # nothing left running
    assert sorted(p.name for p in (data / "train").glob("*.tfrecord")) == [
        f"data-0000{i}-of-00004.tfrecord" for i in range(4)
    ]
    assert (logdir / "checkpoints" / "best.weights.h5").is_file()
    for run_name in ("train", "validation"):
        events = list((logdir / "tensorboard" / run_name).glob("events.out.tfevents.*"))
        assert events, run_name


@pytest.mark.slow
def test_data_service_example_given_a_closed_address_fails_at_once(tmp_path: Path) -> None:
    argv = ["examples/data_service.py", "--service", "grpc://127.0.0.1:1",
            "--data-dir", str(tmp_path / "data"), "--logdir", str(tmp_path / "logs")]  # fmt: skip
    (run,) = run_cluster(argv, 0, timeout=120)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "No tf.data service dispatcher answers at grpc://127.0.0.1:1" in run.stderr
    assert not (tmp_path / "data").exists()  # nothing written, nothing started
