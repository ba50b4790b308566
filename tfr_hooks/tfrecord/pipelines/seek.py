"""An unshuffled stream entered at a record: the files' interleave, continued exactly.

An unshuffled streamed read interleaves ``reads`` files one record at a time
(``Dataset.interleave(cycle_length=reads, block_length=1)``, see
:func:`~tfr_hooks.tfrecord.pipelines.passes.record_stream`). Its order is fixed by the files'
record counts, so the state it reaches after ``records`` records is arithmetic:
:func:`interleave_state` plays the interleave forward (whole rounds at once while
every slot holds a file) and returns, for each slot in the order the interleave visits
them next, the file it holds and the records of that file already read, then the
files not yet opened. A fresh interleave of those files, each entered at that record
(a seek to its block through the record index, then fewer than 128 records skipped;
a format read by index starts at the record itself, reading nothing before it: see
:meth:`~tfr_hooks.tfrecord.formats.records.RecordFormat.entry`), gives the rest of the
stream, record for record.

tf.data's interleave (sequential or parallel and deterministic, checked on TF 2.21 by
the tests) visits the slots in turn; a slot whose file ends finds it out at a visit
that gives nothing, and opens the next file at its following visit. A file entered at
its end reproduces that visit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.reading import RecordFiles
from tfr_hooks.tfrecord.formats.records import READ_BUFFER
from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = ["interleave_state", "stream_from_position"]


def interleave_state(counts: Sequence[int], reads: int, records: int) -> list[tuple[int, int]]:
    """The files (and their records read) a fresh interleave continues from.

    Args:
        counts: The records of each file, in the order the interleave opens them.
        reads: The interleave's ``cycle_length``.
        records: The records the interleave gave so far.

    Returns:
        ``(file, records of it read)`` pairs, in the order a fresh interleave must open
        them to give the records after ``records``; empty when nothing is left.
    """
    slots: list[list[int] | None] = [None] * reads
    queue = deque(range(len(counts)))
    cycle = out = 0
    while out < records:
        open_slots = [s for s in slots if s is not None]
        if not open_slots and not queue:
            return []
        if cycle == 0 and (not queue or len(open_slots) == reads):  # whole rounds at once
            left = min(counts[s[0]] - s[1] for s in open_slots) if open_slots else 0
            rounds = min(left, (records - out) // max(1, len(open_slots)))
            if rounds > 0:
                for s in open_slots:
                    s[1] += rounds
                out += rounds * len(open_slots)
                continue
        slot = slots[cycle]
        if slot is None and queue:
            slot = slots[cycle] = [queue.popleft(), 0]
        if slot is not None:
            if slot[1] < counts[slot[0]]:
                slot[1] += 1
                out += 1
            else:
                slots[cycle] = None
        cycle = (cycle + 1) % reads
    entries: list[tuple[int, int]] = []
    for k in range(reads):
        slot = slots[(cycle + k) % reads]
        if slot is not None:
            entries.append((slot[0], slot[1]))
        elif queue:
            entries.append((queue.popleft(), 0))
    entries.extend((f, 0) for f in queue)
    return entries


def stream_from_position(
    records: RecordFiles, *, reads: int, deterministic: bool, position: ReadPosition
) -> tf.data.Dataset:
    """The records of uncompressed files, interleaved, from ``position``'s record.

    The same stream as :func:`~tfr_hooks.tfrecord.pipelines.passes.record_stream` unshuffled;
    each new iterator starts where ``position`` is then (a whole pass at record 0, which
    needs no index; else the files' record index, built once and kept). The files are
    indexed and entered through their format
    (:class:`~tfr_hooks.tfrecord.formats.records.RecordFormat`).
    """
    names = list(records.files)
    reading, compression = records.format, records.compression

    def entries(records: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        records = int(records)
        if records == 0:
            offsets = np.zeros(len(names), np.int64)
            skips = np.zeros(len(names), np.int64)
            return np.arange(len(names), dtype=np.int64), offsets, skips
        indexes = [reading.index(name, compression) for name in names]
        at = interleave_state([index.count for index in indexes], reads, records)
        found = np.array([f for f, _ in at], np.int64)
        entered = [reading.entry(indexes[f], start) for f, start in at]
        offsets = np.array([offset for offset, _ in entered], np.int64).reshape(-1)
        skips = np.array([skip for _, skip in entered], np.int64).reshape(-1)
        return found, offsets, skips

    paths = tf.constant(names or [""], tf.string)
    parallel: dict[str, Any] = {}
    if reads > 1:
        parallel = {"num_parallel_calls": reads, "deterministic": deterministic}

    def one_pass(epoch: Any, records: Any) -> tf.data.Dataset:
        del epoch  # an unshuffled pass is the same every epoch
        found, offsets, skips = tf.numpy_function(
            entries, [records], [tf.int64, tf.int64, tf.int64], stateful=False
        )
        for vector in (found, offsets, skips):
            vector.set_shape([None])
        slices = tf.data.Dataset.from_tensor_slices((tf.gather(paths, found), offsets, skips))
        return slices.interleave(
            lambda path, offset, skip: reading.records_from(path, offset, READ_BUFFER).skip(skip),
            cycle_length=reads,
            block_length=1,
            **parallel,
        )

    return position.start().flat_map(one_pass)
