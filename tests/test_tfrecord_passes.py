"""The streamed passes over the records (``tfrecord/pipelines/passes.py``).

Their order, seed, epochs and damage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from _tfrecord_data import example, int64_feature, write_records
from tfr_hooks.tfrecord.formats.damage import scan_damage
from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.pipelines.passes import record_passes, record_stream


def _files(tmp_path: Path, per_file: int = 20) -> list[str]:
    return [
        write_records(
            tmp_path / f"{n}.tfrecord",
            [example(v=int64_feature([n * per_file + i])) for i in range(per_file)],
        )
        for n in range(3)
    ]


def _values(data: tf.data.Dataset) -> list[int]:
    parsed = (tf.train.Example.FromString(record) for record in data.as_numpy_iterator())
    return [e.features.feature["v"].int64_list.value[0] for e in parsed]


def test_each_pass_holds_every_record_once_in_its_own_order(tmp_path):
    files = _files(tmp_path)
    records, seed = record_passes(
        RecordFiles(files, ""), reads=2, deterministic=True, buffer=60, seed=7, num_epochs=2
    )
    assert seed == 7  # eagerly, the seed itself
    values = _values(records)
    first, second = values[:60], values[60:]
    assert sorted(first) == sorted(second) == list(range(60))
    assert first != second  # reshuffled each pass
    again, _ = record_passes(
        RecordFiles(files, ""), reads=2, deterministic=True, buffer=60, seed=7, num_epochs=2
    )
    assert _values(again) == values  # reproducible given the seed


def test_without_a_buffer_the_stored_order_is_kept_and_files_interleave(tmp_path):
    files = _files(tmp_path, per_file=2)
    records, seed = record_passes(
        RecordFiles(files, ""), reads=3, deterministic=True, buffer=0, seed=None, num_epochs=1
    )
    assert seed is None
    assert _values(records) == [0, 2, 4, 1, 3, 5]  # one record of each file in turn


def test_the_damage_map_plugs_into_the_read_and_skips_the_damaged_record(tmp_path):
    files = _files(tmp_path, per_file=4)
    data = bytearray(Path(files[1]).read_bytes())
    data[-2] ^= 0xFF  # the data CRC of the last record of the second file
    Path(files[1]).write_bytes(bytes(data))
    damage = scan_damage(files, "", 1)
    read = _values(
        record_stream(
            RecordFiles(files, "", damage),
            reads=1,
            deterministic=True,
            shuffle_files=False,
            seed=None,
        )
    )
    assert read == [i for i in range(12) if i != 7]
    assert np.all(np.diff(read) > 0)
