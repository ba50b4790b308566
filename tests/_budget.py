"""The fast run's budget: ``tox -e fast`` fails when its tests cost more than it allows.

The README and CONTRIBUTING.md promise that ``tox -e fast`` runs in under 2 minutes on a
quiet 2-core machine, set-up included. This plugin keeps that promise checked: each pytest-xdist
worker reports the CPU seconds its process spent (importing TensorFlow, collecting, running its
tests), and the controller divides their sum by the number of workers. That is the run's wall
time on a quiet machine with one core a worker, and unlike the wall time it does not grow when
other work loads the machine. Over ``TFR_HOOKS_FAST_BUDGET`` seconds (set by tox's ``fast``
environment), the run fails and lists its slowest tests, the ones to mark ``slow`` or lighten.

Without the variable (CI, a single file, a debugging run) nothing is checked.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

__all__ = ["BUDGET_VARIABLE", "cpu_seconds", "over_budget"]

BUDGET_VARIABLE = "TFR_HOOKS_FAST_BUDGET"
_SLOWEST = 15


def cpu_seconds() -> float:
    """The CPU seconds this process and its waited-for children have spent so far."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def over_budget(worker_seconds: list[float], budget: float) -> float | None:
    """The estimated wall time of a run when it passes ``budget``, else ``None``.

    Args:
        worker_seconds: The CPU seconds each worker process spent.
        budget: The seconds the run may take, one core a worker.

    Returns:
        The sum of the workers' CPU seconds over their number, when it exceeds ``budget``.
    """
    if not worker_seconds:
        return None
    estimate = sum(worker_seconds) / len(worker_seconds)
    return estimate if estimate > budget else None


class FastBudget:
    """Collects each worker's CPU seconds and fails the session over its budget."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.worker_seconds: list[float] = []
        self.durations: dict[str, float] = {}

    @pytest.hookimpl
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        if "cpu_seconds" in output:
            self.worker_seconds.append(float(output["cpu_seconds"]))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        estimate = over_budget(self.worker_seconds, self.budget)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not self.worker_seconds:
            return
        spent = sum(self.worker_seconds) / len(self.worker_seconds)
        reporter.ensure_newline()
        reporter.write_line(
            f"fast-run budget: {spent:.0f} s of CPU a worker ({len(self.worker_seconds)} "
            f"workers), budget {self.budget:.0f} s ({BUDGET_VARIABLE})"
        )
        if estimate is None:
            return
        slowest = sorted(self.durations.items(), key=lambda item: -item[1])[:_SLOWEST]
        reporter.write_line(
            f"the fast run is over its budget: {estimate:.0f} s > {self.budget:.0f} s; mark the "
            "slowest tests `slow` or lighten them (CONTRIBUTING.md, Test markers). Slowest:",
            red=True,
        )
        for nodeid, seconds in slowest:
            reporter.write_line(f"  {seconds:6.1f} s  {nodeid}")
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def configure(config: pytest.Config) -> None:
    """Registers the budget on the controller, and the CPU report on each xdist worker."""
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(_WorkerReport(), "tfr_hooks_worker_cpu")
        return
    budget = os.environ.get(BUDGET_VARIABLE, "")
    if budget and float(budget) > 0:
        config.pluginmanager.register(FastBudget(float(budget)), "tfr_hooks_fast_budget")


class _WorkerReport:
    """Puts this worker's CPU seconds in what pytest-xdist sends its controller at the end."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        session.config.workeroutput["cpu_seconds"] = cpu_seconds()  # type: ignore[attr-defined]
