"""A record format only the tests know: records framed by an 8-byte little-endian length.

It proves the seam of :mod:`tfr_hooks.tfrecord.formats.records`: the package knows
nothing of this framing, and reads it through
:func:`~tfr_hooks.tfrecord.formats.reading.register_format` alone. A file named
``*.lpx`` holds, for each record, its length (8 bytes, little-endian) then its bytes:
serialized ``tf.train.Example``s here. Records are read in Python, a file (or the rest
of one, from a record's offset) at a time through ``tf.numpy_function``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.formats.index import RecordIndex
from tfr_hooks.tfrecord.formats.records import READ_BUFFER, RecordFormat, index_of_offsets

__all__ = ["SUFFIX", "LengthPrefixed", "write_length_prefixed"]

#: The name every file of the format ends with.
SUFFIX = ".lpx"
_LENGTH = struct.Struct("<Q")


def write_length_prefixed(path: str | Path, records: Iterable[bytes]) -> str:
    """Write ``records`` to ``path``, each after its 8-byte little-endian length."""
    with open(path, "wb") as handle:
        for record in records:
            handle.write(_LENGTH.pack(len(record)))
            handle.write(record)
    return str(path)


def _frames(data: bytes, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(offset, record)`` of every record of ``data`` from ``offset`` on."""
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        start = offset + _LENGTH.size
        yield offset, data[start : start + length]
        offset = start + length


def _read(path: str | bytes) -> bytes:
    with open(path.decode() if isinstance(path, bytes) else path, "rb") as handle:
        return handle.read()


class LengthPrefixed(RecordFormat):
    """Files named ``*.lpx``: each record after its 8-byte little-endian length."""

    name = "length-prefixed"

    @classmethod
    def recognizes(cls, path: str) -> bool:
        return str(path).endswith(SUFFIX)

    def iter_records(self, path: str, compression: str) -> Iterator[bytes]:
        for _, record in _frames(_read(path)):
            yield record

    def records(self, path: Any, compression: str) -> tf.data.Dataset:
        return self.records_from(path, 0)

    def seekable(self, compression: str) -> bool:
        return not compression

    def index(self, path: str, compression: str) -> RecordIndex:
        data = _read(path)
        starts = [offset for offset, _ in _frames(data)]
        return index_of_offsets(path, starts, len(data))

    def records_from(self, path: Any, offset: Any, buffer_size: Any = READ_BUFFER) -> Any:
        def rest(name: bytes, at: np.int64) -> np.ndarray:
            found = [record for _, record in _frames(_read(name), int(at))]
            return np.array(found, dtype=object).reshape(-1)

        records = tf.numpy_function(
            rest, [path, tf.cast(offset, tf.int64)], tf.string, stateful=False
        )
        records.set_shape([None])
        return tf.data.Dataset.from_tensor_slices(records)
