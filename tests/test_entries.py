"""tfr_hooks.entries: a feature's history entries come from its own hook at epoch_end."""

from __future__ import annotations

from typing import Any

import tfr_hooks
from test_engine_lifecycle import FakeRunner
from tfr_hooks.engine import run_loop
from tfr_hooks.entries import HistoryEntry, input_entries
from tfr_hooks.hooks import HookList
from tfr_hooks.input_report import CORRUPT_RECORDS, EXAMPLES_PER_SEC, WAIT_SHARE
from tfr_hooks.runners import StepResult
from tfr_hooks.tfrecord import CorruptRecord
from tfr_hooks.tfrecord.pipelines.contract import ReadFacts


class Waiting(FakeRunner):
    """Reports a wait of 0 for each step it runs (so the engine adds its input keys)."""

    def run_step(self, hook_args: Any, limit: int) -> StepResult:
        result = super().run_step(hook_args, limit)
        result.input_wait = 0.0 if result.steps else None
        return result


class SeenLogs(tfr_hooks.Hook):
    def __init__(self) -> None:
        self.logs: list[set[str]] = []

    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self.logs.append(set(logs))


def test_an_entry_joins_the_history_after_the_engine_s_keys_and_never_the_hooks_logs() -> None:
    seen = SeenLogs()
    hooks = HookList([HistoryEntry(CORRUPT_RECORDS, 3), seen])
    history = run_loop(Waiting(val=None), hooks, tfr_hooks.LoopState(), epochs=2)
    assert list(history) == ["loss", WAIT_SHARE, EXAMPLES_PER_SEC, CORRUPT_RECORDS]
    assert history[CORRUPT_RECORDS] == [3, 3]
    assert all(type(v) is int for v in history[CORRUPT_RECORDS])  # as the feature gave it
    assert seen.logs == [{"loss"}, {"loss"}]


class FirstEpochOnly(tfr_hooks.Hook):
    def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        if epoch == 0:
            self.loop.history_entries["input/once"] = 1.0


def test_the_entries_are_each_epoch_s_own() -> None:
    history = run_loop(
        FakeRunner(val=None), HookList([FirstEpochOnly()]), tfr_hooks.LoopState(), epochs=2
    )
    assert history["input/once"] == [1.0]


def test_the_engine_itself_writes_no_corrupt_count() -> None:
    history = run_loop(FakeRunner(val=None), HookList([]), tfr_hooks.LoopState(), epochs=1)
    assert CORRUPT_RECORDS not in history


def test_a_read_that_looked_for_damaged_records_adds_their_count() -> None:
    damaged = (CorruptRecord("a.tfrecord", 3, "bad"), CorruptRecord("b.tfrecord", 0, "bad"))
    assert input_entries(ReadFacts()) == []  # it did not look (max_corrupt_records=0)
    (entry,) = input_entries(ReadFacts(corrupt_records=damaged))
    assert isinstance(entry, HistoryEntry) and (entry.key, entry.value) == (CORRUPT_RECORDS, 2)
    (clean,) = input_entries(ReadFacts(corrupt_records=()))
    assert clean.value == 0
