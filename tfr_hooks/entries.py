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
    epoch's end. Both follow from the mixture's order by arithmetic. With the read's
    position (:class:`~tfr_hooks.tfrecord.pipelines.mixture_position.MixturePosition`,
    any ``num_epochs``), an epoch of the loop that starts a pass ``p`` starts at global
    position ``p * span + offset`` (``span``: the positions of a pass), one that goes on
    in the pass (``steps_per_epoch``) where the last epoch ended, and it reads
    ``steps * batch_size`` positions, in the stretches of weights the position reads
    (a run whose weights changed at a checkpoint counts each source in both). Without a
    position (``num_epochs=1`` only), epoch ``e`` starts at ``e * E`` (``E``: the
    mixture's epoch).

    Args:
        state: The mixture's state (``MixtureState.to_bytes``), when the read has no
            position.
        batch_size: The global batch size.
        position: The read's position, when it has one (its state wins over ``state``).
    """

    needs_every_step = False

    def __init__(self, state: bytes | None, batch_size: int, position: Any = None) -> None:
        from tfr_hooks.tfrecord.pipelines.mixture import MixtureState

        self.position = position
        if position is not None:
            self.state = position.mixture
        elif state is not None:
            self.state = MixtureState.from_bytes(state)
        else:
            raise ValueError("Expected a mixture's state or position. Received: state=None")
        self.batch_size = batch_size
        self._pass: int | None = None
        self._start = 0

    def begin(self) -> None:
        """Forget the pass of an earlier run."""
        self._pass, self._start = None, 0

    def epoch_begin(self, epoch: int) -> None:
        """Note where the epoch starts: its pass's start, or where the last epoch ended."""
        position = self.position
        if position is None:
            span = sum(self.state.stretches[-1].sizes)
            self._pass, self._start = epoch, epoch * span
            return
        passes = position.state(self.loop.session)["epoch"]  # the next pass's number
        if passes - 1 != self._pass:  # the data started a pass
            self._pass = passes - 1
            self._start = self._pass * position.span + position.offset

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        """Add the epoch's examples and completed epochs of each source."""
        state = self.state if self.position is None else self.position.mixture
        if self.position is None:
            span, offset = sum(state.stretches[-1].sizes), 0
        else:
            span, offset = self.position.span, self.position.offset
        pass_end = (self._pass or 0) * span + offset + span
        end = min(self._start + self.loop.epoch_steps * self.batch_size, pass_end)
        before = state.draws_before(max(self._start, 0))
        after = state.draws_before(max(end, 0))
        sizes = {n: z for s in state.stretches for n, z in zip(s.names, s.sizes, strict=True)}
        for name, draws in after.items():
            examples = draws - before.get(name, 0)
            self.loop.history_entries[f"{MIXTURE_EXAMPLES}{name}"] = examples
            self.loop.history_entries[f"{MIXTURE_EPOCHS}{name}"] = draws // sizes[name]
        self._start = end

    def __repr__(self) -> str:
        return f"MixtureEntries({self.state!r}, batch_size={self.batch_size})"


def input_entries(facts: ReadFacts, position: Any = None) -> list[Hook]:
    """The hooks of the history entries a read's ``facts`` add to a run, for both loops.

    :data:`~tfr_hooks.input_report.CORRUPT_RECORDS` (the damaged records the reader
    skips, :attr:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts.corrupt_count`) when the reader
    looked for them (``max_corrupt_records`` above 0); none otherwise.
    A mixture read (``weights=``) adds :class:`MixtureEntries`: with its ``position``
    (any ``num_epochs``), or without one when it reads one pass an epoch
    (``num_epochs=1``).
    """
    count = facts.corrupt_count
    entries: list[Hook] = [] if count is None else [HistoryEntry(CORRUPT_RECORDS, count)]
    if facts.mixture is None or not facts.batch_size:
        return entries
    from tfr_hooks.tfrecord.pipelines.mixture_position import MixturePosition

    if isinstance(position, MixturePosition):
        entries.append(MixtureEntries(None, facts.batch_size, position))
    elif facts.num_epochs == 1:
        entries.append(MixtureEntries(facts.mixture, facts.batch_size))
    return entries
