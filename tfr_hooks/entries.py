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

#: The history keys of a mixture's sources: ``input/examples/<name>``, ``input/epochs/<name>``.
MIXTURE_EXAMPLES = "input/examples/"
MIXTURE_EPOCHS = "input/epochs/"

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.contract import ReadFacts

__all__ = ["HistoryEntry", "MixtureEntries", "input_entries"]


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


class MixtureEntries(Hook):
    """Adds each source's examples and epochs of a mixture to the history of every epoch.

    ``input/examples/<name>``: the examples of source ``name`` among the epoch's
    (``weights=``); ``input/epochs/<name>``: the source's own epochs completed by the
    epoch's end. Both follow from the mixture's order by arithmetic: epoch ``e`` of the
    loop reads global positions ``[e * E, e * E + steps * batch_size)`` (``E``: the
    mixture's epoch, one pass an epoch).

    Args:
        state: The mixture's state (``MixtureState.to_bytes``).
        batch_size: The global batch size.
    """

    needs_every_step = False

    def __init__(self, state: bytes, batch_size: int) -> None:
        from tfr_hooks.tfrecord.pipelines.mixture import MixtureState

        self.state = MixtureState.from_bytes(state)
        self.batch_size = batch_size
        last = self.state.stretches[-1]
        self.epoch_size = sum(last.sizes)
        self.sizes = dict(zip(last.names, last.sizes, strict=True))

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Add the epoch's examples and completed epochs of each source."""
        start = epoch * self.epoch_size
        read = min(self.loop.epoch_steps * self.batch_size, self.epoch_size)
        before = self.state.draws_before(start)
        after = self.state.draws_before(start + read)
        for name, size in self.sizes.items():
            self.loop.history_entries[f"{MIXTURE_EXAMPLES}{name}"] = after[name] - before[name]
            self.loop.history_entries[f"{MIXTURE_EPOCHS}{name}"] = after[name] // size

    def __repr__(self) -> str:
        return f"MixtureEntries({self.state!r}, batch_size={self.batch_size})"


def input_entries(facts: ReadFacts) -> list[Hook]:
    """The hooks of the history entries a read's ``facts`` add to a run, for both loops.

    :data:`~tfr_hooks.input_report.CORRUPT_RECORDS` (the damaged records the reader
    skips, :attr:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts.corrupt_count`) when the reader
    looked for them (``max_corrupt_records`` above 0); none otherwise.
    A mixture read one pass an epoch (``weights=``, ``num_epochs=1``) adds
    :class:`MixtureEntries`.
    """
    count = facts.corrupt_count
    entries: list[Hook] = [] if count is None else [HistoryEntry(CORRUPT_RECORDS, count)]
    if facts.mixture is not None and facts.num_epochs == 1 and facts.batch_size:
        entries.append(MixtureEntries(facts.mixture, facts.batch_size))
    return entries
