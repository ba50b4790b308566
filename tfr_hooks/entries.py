"""History entries that a loop's features add, as hooks the loop installs.

The engine writes a run's history from the epoch logs and its own input measurement; a
feature that adds an entry of its own (the damaged records a reader skips, the
``steps_per_execution`` that ``"auto"`` chose) does it from its own hook at
``epoch_end``, through ``loop.history_entries``, as pytorch-ignite attaches handlers to
an engine's events: the engine gets no parameter for it. Entries go to the history only,
never to the logs hooks and Keras callbacks get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfr_hooks.hooks import Hook
from tfr_hooks.input_report import CORRUPT_RECORDS

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.contract import ReadFacts

__all__ = ["HistoryEntry", "input_entries"]


class HistoryEntry(Hook):
    """Adds ``key: value`` to the history of every epoch of a run.

    Args:
        key: The history key (a key with a ``/``, which no metric name has).
        value: The value each epoch gets.
    """

    needs_every_step = False

    def __init__(self, key: str, value: Any) -> None:
        self.key = key
        self.value = value

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Add the entry to this epoch's ``loop.history_entries``."""
        self.loop.history_entries[self.key] = self.value

    def __repr__(self) -> str:
        return f"HistoryEntry({self.key!r}, {self.value!r})"


def input_entries(facts: ReadFacts) -> list[Hook]:
    """The hooks of the history entries a read's ``facts`` add to a run, for both loops.

    :data:`~tfr_hooks.input_report.CORRUPT_RECORDS` (the damaged records the reader
    skips, :attr:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts.corrupt_count`) when the reader
    looked for them (``max_corrupt_records`` above 0); none otherwise.
    """
    count = facts.corrupt_count
    return [] if count is None else [HistoryEntry(CORRUPT_RECORDS, count)]
