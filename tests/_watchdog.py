"""No test hangs the run: a test still running well past its timeout ends its process.

pytest-timeout's signal (``timeout_method = signal``, the default) ends a test that hangs
in Python, and lets it fail as any other test. A test blocked in TensorFlow's C++ (a read,
or a server's stop, that never returns to the interpreter or holds its lock) never runs
the signal's handler, and would hang the whole run until CI's limit. Past
:func:`watchdog_seconds` a thread of C (``faulthandler``, which needs no interpreter
lock) prints every thread's stack to stderr and ends the process with status 1:
pytest-xdist reports the test as crashed and starts another worker, and the run goes on.
conftest.py registers the hook.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["pytest_runtest_protocol", "watchdog_seconds"]


def watchdog_seconds(item: pytest.Item) -> float | None:
    """When the watchdog ends a test's process: its timeout, a fifth more and 5 s.

    The timeout is the test's ``pytest.mark.timeout``, else ``--timeout``, else the
    ``timeout`` setting; ``None`` when it has none (0).
    """
    marker = item.get_closest_marker("timeout")
    timeout: Any = None
    if marker is not None:
        timeout = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if timeout is None:
        timeout = item.config.getoption("timeout", None)
    if timeout is None:
        timeout = item.config.getini("timeout")
    seconds = float(timeout or 0)
    return seconds * 1.2 + 5 if seconds > 0 else None


_stderr: list[int] = []


def _real_stderr(config: pytest.Config) -> int:
    """A copy of the process's own stderr: pytest captures file descriptor 2 in a test.

    Taken once, with pytest's capture set aside: the stacks must reach the terminal (or
    the xdist controller), not a capture file that dies with the process.
    """
    if not _stderr:
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is None:
            _stderr.append(os.dup(2))
        else:
            with capture.global_and_fixture_disabled():
                _stderr.append(os.dup(2))
    return _stderr[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Arm the watchdog for the test's setup, call and teardown; disarm it after."""
    seconds = watchdog_seconds(item)
    if seconds is not None:
        faulthandler.dump_traceback_later(seconds, exit=True, file=_real_stderr(item.config))
    try:
        yield
    finally:
        if seconds is not None:
            faulthandler.cancel_dump_traceback_later()
