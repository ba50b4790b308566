"""What the engine tells about each call of a loop's step, and who listens: call observers.

The engine times every call of a runner's step once (its hooks' ``before_run`` and
``after_run``, or a validation call's batch events, included) and hands a :class:`Call`
to each *call observer*: the epoch's clock (:class:`~tfr_hooks.input_report.EpochClock`,
for the input report) and any hook of the run with an ``observe_call`` method, such as
``steps_per_execution="auto"``'s tuner (:class:`~tfr_hooks.tuning.AutoSteps`). A feature
that needs the calls' durations is such a hook: the engine gets no parameter for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = ["Call", "CallObserver", "call_observers"]


class Call(NamedTuple):
    """One call of a loop's step, as the engine timed it (a tuple: cheap to make per call).

    Attributes:
        steps: The steps the call ran (0: the data had run out).
        limit: The most steps the loop let it run (``steps_per_execution``, or fewer at
            the epoch's end).
        secs: Its wall time, hooks included.
        examples: The examples its steps consumed.
        input_wait: The seconds its steps waited for input, or ``None`` when the runner
            does not measure it.
        validation: Whether it was a validation call.
    """

    steps: int
    limit: int
    secs: float
    examples: int = 0
    input_wait: float | None = None
    validation: bool = False


@runtime_checkable
class CallObserver(Protocol):
    """Anything that takes each :class:`Call` of a run (after the call's hook events)."""

    def observe_call(self, call: Call) -> None:
        """Take one call."""


def call_observers(hooks: Iterable[Any]) -> Sequence[CallObserver]:
    """The hooks of ``hooks`` that observe calls, in order."""
    return [hook for hook in hooks if isinstance(hook, CallObserver)]
