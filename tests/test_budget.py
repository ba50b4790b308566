"""The fast run's budget check (tests/_budget.py): the arithmetic and a real pytest run over it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _budget import BUDGET_VARIABLE, cpu_seconds, over_budget


def test_the_estimate_is_the_workers_cpu_over_their_number():
    assert over_budget([100.0, 80.0], 95.0) is None
    assert over_budget([100.0, 100.0], 95.0) == pytest.approx(100.0)
    assert over_budget([], 1.0) is None


def test_cpu_seconds_grow_with_work():
    before = cpu_seconds()
    total = 0
    for i in range(3_000_000):
        total += i * i
    assert total > 0
    assert cpu_seconds() > before


def _run(tmp_path: Path, budget: str) -> subprocess.CompletedProcess[str]:
    tests = Path(__file__).parent
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(tests)!r})
            from _budget import configure

            def pytest_configure(config):
                configure(config)
            """
        )
    )
    (tmp_path / "test_spin.py").write_text(
        textwrap.dedent(
            """
            import time

            def test_spin():
                end = time.process_time() + 1.0
                while time.process_time() < end:
                    pass
            """
        )
    )
    env = {**os.environ, BUDGET_VARIABLE: budget}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "no:randomly", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # two pytest processes with an xdist worker each
def test_a_run_over_its_budget_fails_and_names_its_slowest_tests(tmp_path):
    over = _run(tmp_path, "0.5")
    assert over.returncode == 1, over.stdout + over.stderr
    assert "over its budget" in over.stdout
    assert "test_spin.py::test_spin" in over.stdout
    within = _run(tmp_path, "600")
    assert within.returncode == 0, within.stdout + within.stderr
    assert "fast-run budget" in within.stdout
