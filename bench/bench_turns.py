"""Rows of one worker process taking turns, an epoch each (no TensorFlow here).

A group of rows (``bench_configs.GROUPS``) runs in one process, each row in a thread of
its own, and only one row runs at a time: a row runs until its clock marks an epoch's
end, then passes the turn to the next row of the group and waits for its own turn to
come back. The rows' epochs thus alternate within seconds of each other, in one process,
so a ratio of two rows' epochs of the same round is a paired reading: a slow phase of a
shared machine, or the few percent by which worker processes differ, falls on both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Turns", "current", "run_group"]

#: The longest a row waits for its turn (seconds): a row's epoch and its build.
TURN_TIMEOUT = 1800.0

_local = threading.local()


class Turns:
    """Whose turn it is among the named rows; the order is cyclic, finished rows skipped."""

    def __init__(self, names: Sequence[str]) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"Expected distinct row names. Received: names={list(names)!r}")
        self._order = list(names)
        self._done: set[str] = set()
        self._at = 0
        self._cond = threading.Condition()

    def _advance(self) -> None:
        n = len(self._order)
        for step in range(1, n + 1):
            if self._order[(self._at + step) % n] not in self._done:
                self._at = (self._at + step) % n
                return

    def wait(self, name: str) -> None:
        """Block until it is ``name``'s turn."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._order[self._at] == name, TURN_TIMEOUT):
                raise TimeoutError(f"Waited {TURN_TIMEOUT:.0f} s for the turn of row {name!r}")

    def pass_on(self, name: str) -> None:
        """``name`` ended an epoch: give the turn to the next row, then wait for its own."""
        with self._cond:
            self._advance()
            self._cond.notify_all()
        self.wait(name)

    def finish(self, name: str) -> None:
        """``name`` is done (or failed): it is skipped from now on."""
        with self._cond:
            self._done.add(name)
            if self._order[self._at] == name:
                self._advance()
            self._cond.notify_all()


def current() -> Callable[[], None] | None:
    """In a row of a group: a function that passes the turn on and waits for it; else None."""
    turn = getattr(_local, "turn", None)
    if turn is None:
        return None
    turns, name = turn
    return lambda: turns.pass_on(name)


def run_group(
    names: Sequence[str], run_one: Callable[[str], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Run ``run_one(name)`` for each row in its own thread, the rows taking turns.

    Returns each row's result; a row that raised has ``{"ok": False, "error": ...}``.
    The first row in ``names`` starts; its build and warm-up epoch are its first turn.
    """
    turns = Turns(names)
    results: dict[str, dict[str, Any]] = {}

    def body(name: str) -> None:
        _local.turn = (turns, name)
        try:
            turns.wait(name)
            results[name] = {"ok": True, **run_one(name)}
        except BaseException as exc:
            import traceback

            results[name] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        finally:
            turns.finish(name)

    threads = [threading.Thread(target=body, args=(n,), name=f"row-{n}") for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TURN_TIMEOUT * len(names))
    for name in names:
        results.setdefault(name, {"ok": False, "error": "the row's thread did not finish"})
    return results
