"""The records of ``--suite positions``: class-ordered TFRecords, and the same as ArrayRecord.

``write_records`` writes ``records`` small records (an ``int64`` label, an ``int64`` id
and 32 random bytes: about 60 bytes a record) for 20 classes in class order, the layout
a converter that walks class folders writes, into 4 files with a plain
``tf.io.TFRecordWriter`` (no schema sidecar: the reader infers the features).
``to_array_record`` converts the same records, in the same order, to ArrayRecord files
(``group_size:1``, so each record can be read on its own) for Grain. Both are cached
in their directory by their parameters (``info.json``) and reused.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CLASSES", "FILES", "write_records", "to_array_record"]

CLASSES = 20
FILES = 4


def write_records(directory: str | Path, records: int, seed: int = 0) -> dict[str, Any]:
    """Write (or reuse) the class-ordered TFRecord files; their info.

    Returns:
        ``{"files", "records", "bytes", "write_seconds", "reused"}``.
    """
    import tensorflow as tf

    directory = Path(directory) / f"records-{records}"
    info_path = directory / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if all(Path(f).exists() for f in info["files"]):
            return {**info, "reused": True}
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_class = -(-records // CLASSES)
    example = tf.train.Example()
    feature = example.features.feature
    feature["label"].int64_list.value.append(0)
    feature["id"].int64_list.value.append(0)
    feature["x"].bytes_list.value.append(b"")
    label_value, id_value = feature["label"].int64_list.value, feature["id"].int64_list.value
    x_value = feature["x"].bytes_list.value
    files, start = [], time.perf_counter()
    bounds = np.linspace(0, records, FILES + 1).astype(int)
    for f in range(FILES):
        path = directory / f"part-{f}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            payload = rng.bytes(32 * int(bounds[f + 1] - bounds[f]))
            for i, record in enumerate(range(int(bounds[f]), int(bounds[f + 1]))):
                label_value[0] = record // per_class
                id_value[0] = record
                x_value[0] = payload[32 * i : 32 * (i + 1)]
                writer.write(example.SerializeToString())
        files.append(str(path))
    info = {
        "files": files,
        "records": records,
        "classes": CLASSES,
        "bytes": sum(os.path.getsize(f) for f in files),
        "write_seconds": time.perf_counter() - start,
    }
    info_path.write_text(json.dumps(info, indent=1))
    return {**info, "reused": False}


def to_array_record(files: list[str], directory: str | Path) -> dict[str, Any]:
    """Convert ``files`` (TFRecord) to ArrayRecord files, ``group_size:1``; their info.

    Returns:
        ``{"files", "records", "bytes", "convert_seconds", "reused"}``.
    """
    import tensorflow as tf
    from array_record.python.array_record_module import ArrayRecordWriter

    directory = Path(directory)
    info_path = directory / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if all(Path(f).exists() for f in info["files"]):
            return {**info, "reused": True}
    directory.mkdir(parents=True, exist_ok=True)
    out, records, start = [], 0, time.perf_counter()
    for f, path in enumerate(files):
        target = directory / f"part-{f}.array_record"
        writer = ArrayRecordWriter(str(target), "group_size:1")
        for batch in tf.data.TFRecordDataset(path).batch(4096).as_numpy_iterator():
            for record in batch:
                writer.write(record)
            records += len(batch)
        writer.close()
        out.append(str(target))
    info = {
        "files": out,
        "records": records,
        "bytes": sum(os.path.getsize(f) for f in out),
        "convert_seconds": time.perf_counter() - start,
    }
    info_path.write_text(json.dumps(info, indent=1))
    return {**info, "reused": False}
