"""Scripted call durations for ``steps_per_execution="auto"``: the same values on any machine.

The loop's calls are real; only the seconds the tuner is handed are the test's. A test that
asserts what the tuner chose from wall-clock time fails on a loaded machine (the tuner
rightly settles at 1 when longer calls cost more a step), so such tests script the cost.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tfr_hooks import tuning
from tfr_hooks.tuning import StepsTuner

__all__ = ["FAST", "Scripted", "linear", "scripted_timing"]


def linear(overhead: float, step: float) -> Callable[[int], float]:
    """A call of ``k`` steps costs ``overhead + k * step`` seconds."""
    return lambda k: overhead + k * step


#: A cheap step: the rule's value is 512 (``choose(0.002, 0.0005)``).
FAST = linear(0.002, 0.0005)


class Scripted(StepsTuner):
    """A tuner that sees each call last ``cost(k)`` seconds instead of its wall-clock time.

    The loop's calls are real; what they cost is the test's, so the values the loop runs
    with do not depend on the machine or its load (the rule is tested on its own).
    ``cost`` may be changed between calls (a step that becomes dearer).
    """

    def __init__(self, cost: Callable[[int], float]) -> None:
        super().__init__()
        self.cost = cost

    def observe(self, steps: int, limit: int, secs: float) -> int:
        return super().observe(steps, limit, self.cost(steps))


def scripted_timing(monkeypatch: pytest.MonkeyPatch, cost: Callable[[int], float] = FAST) -> None:
    """Every ``"auto"`` loop built from now on (training and validation tuners) sees ``cost``.

    What holds the value at 1 (a hook that needs every step, a multi-worker strategy) is
    untouched: only the durations are scripted.
    """
    monkeypatch.setattr(tuning, "StepsTuner", lambda: Scripted(cost))
