"""The records ``array_record``'s readers are asked for, counted at the reader itself.

``counted_reads(monkeypatch)`` makes every ``ArrayRecordReader`` the package opens from
then on a real one whose ``read`` calls are recorded as ``(file name, record)`` pairs
(the readers opened before are closed, so none escapes the count); ``stop_counting()``
closes the counted ones. No TensorFlow part is replaced.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
from array_record.python import array_record_module

from tfr_hooks.tfrecord.formats import arrayrecord


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Start counting; the returned list grows with each record a reader is asked for."""
    pairs: list[tuple[str, int]] = []

    class Reader:
        def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
            self._reader = array_record_module.ArrayRecordReader(path, *args, **kwargs)
            self._name = os.path.basename(path)

        def read(self, *args: Any) -> Any:
            if len(args) == 1:  # read(indices)
                indices = [int(i) for i in args[0]]
            else:  # read() or read(begin, end)
                indices = list(range(*(args or (self._reader.num_records(),))))
            pairs.extend((self._name, i) for i in indices)
            return self._reader.read(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._reader, name)

    arrayrecord.READERS.forget()
    monkeypatch.setattr(arrayrecord, "_module", lambda: SimpleNamespace(ArrayRecordReader=Reader))
    return pairs


def stop_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the real readers back and close the counted ones."""
    monkeypatch.undo()
    arrayrecord.READERS.forget()
