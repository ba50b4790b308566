"""The suite's watchdog (tests/_watchdog.py): a test blocked where pytest-timeout's signal
cannot reach it ends its process, with every thread's stack, instead of hanging the run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def _run(tmp_path: Path, body: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(TESTS)!r})
            from _watchdog import pytest_runtest_protocol
            """
        )
    )
    (tmp_path / "test_blocked.py").write_text(textwrap.dedent(body))
    start = time.monotonic()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"),
            *("-o", "timeout=2", "-q", *args, str(tmp_path)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - start


# the signal pytest-timeout sends is blocked, as it is in effect while a thread holds the
# interpreter inside TensorFlow's C++: only the watchdog's thread of C can end the test
BLOCKED = """
    import signal
    import time

    def test_blocked_where_no_signal_reaches():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(300)
"""


@pytest.mark.slow
def test_a_test_blocked_past_its_timeout_ends_its_process_with_the_stacks(tmp_path: Path):
    done, seconds = _run(tmp_path, BLOCKED)
    # timeout 2 s: the watchdog ends it at 2 * 1.2 + 5 = 7.4 s, not after the 300 s sleep
    assert done.returncode != 0
    assert seconds < 100, seconds
    assert "test_blocked_where_no_signal_reaches" in done.stderr, done.stderr[-2000:]
    assert "Timeout" in done.stderr


@pytest.mark.slow
def test_under_xdist_the_run_reports_the_crash_and_goes_on(tmp_path: Path):
    done, _ = _run(
        tmp_path,
        BLOCKED
        + """
    def test_after_it():
        assert True
""",
        "-n",
        "1",
    )
    assert "test_blocked_where_no_signal_reaches" in done.stdout, done.stdout[-2000:]
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]


def test_the_watchdog_waits_for_the_tests_own_timeout(pytestconfig: pytest.Config):
    class Item:
        def __init__(self, marker: pytest.Mark | None) -> None:
            self.config = pytestconfig
            self.marker = marker

        def get_closest_marker(self, name: str) -> pytest.Mark | None:
            return self.marker

    configured = float(pytestconfig.getoption("timeout") or pytestconfig.getini("timeout"))
    from _watchdog import watchdog_seconds

    assert watchdog_seconds(Item(None)) == pytest.approx(configured * 1.2 + 5)  # type: ignore[arg-type]
    mark = pytest.mark.timeout(600).mark
    assert watchdog_seconds(Item(mark)) == pytest.approx(725)  # type: ignore[arg-type]
    mark = pytest.mark.timeout(timeout=10, method="thread").mark
    assert watchdog_seconds(Item(mark)) == pytest.approx(17)  # type: ignore[arg-type]
