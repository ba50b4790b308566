"""``cardinality()`` is the steps a pass makes, on a real two-worker cluster (issue 20).

Sharded by file, each worker batches its own files with the global batch size and the
strategy splits every such batch into one piece per replica: a worker's share that ends in
a partial batch makes one more step than the data's global batches. Files of unequal size
(161 and 144 examples, global batch 16) make 2 x 11 = 22 steps a pass, while the data
holds 20 global batches. The dataset of ``tfrecord.source`` reports the 22, its facts
(the input contract) tell the loop, which shows hooks the 22 from the first epoch on,
and 22 steps run, on the streamed and the packed pipeline (sharded by file) and the
in-memory one (split by data: 20), with and without ``drop_remainder``; every example of
an epoch is counted once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _cluster import run_cluster

pytestmark = pytest.mark.slow

SIZES, BATCH = (161, 144), 16


def test_cardinality_is_the_steps_a_pass_makes_under_file_sharding(tmp_path: Path) -> None:
    from tfr_hooks import tfrecord
    from tfr_hooks.tfrecord.pipelines.sharding import file_sharded_steps

    start = 0
    for index, size in enumerate(SIZES):
        ids = {"id": np.arange(start, start + size)}
        tfrecord.write(ids, tmp_path / f"stream{index}")
        tfrecord.write(ids, tmp_path / f"packed{index}", examples_per_record=8)
        start += size
    total = sum(SIZES)
    # by file: 2 workers x the batches of the worker with the most (161 examples); with
    # drop_remainder worker 0 keeps 10 x 16 of its 161, worker 1 9 x 16 of its 144 and
    # joins the 10th step with an empty batch
    by_file = {False: (2 * 11, total), True: (2 * 10, 10 * BATCH + 9 * BATCH)}
    expected = {f"{p} drop={d}": by_file[d] for p in ("stream", "packed") for d in (False, True)}
    # in memory: split by data, every worker gathers every global batch and keeps its piece
    expected["memory drop=False"] = (-(-total // BATCH), total)
    expected["memory drop=True"] = (total // BATCH, total // BATCH * BATCH)
    assert file_sharded_steps(list(SIZES), 2, BATCH) == 22

    workers = run_cluster(
        ["tests/_multi_worker_child.py", "cardinality", str(tmp_path)],
        2,
        timeout=300,
        env={"GLOBAL_BATCH": str(BATCH)},
    )
    results = [w.result() for w in workers]
    assert results[0] == results[1]
    for case, (steps, examples) in expected.items():
        got = results[0][case]
        assert got["cardinality"] == steps, case
        assert got["epochs"] == [{"known": steps, "steps": steps, "examples": examples}] * 2, case
