"""The paired targets of several runs of record, read on their rounds pooled.

A run of record reads a paired target from 18 rounds (6 before 2026-12-07),
whose 90% interval of the median spans most targets' margins on a shared 2-core
machine (``bench_targets.median_interval``). Runs of the same code add rounds: this
prints, for each paired target of the given ``latest.json`` files, the rounds of all
of them, their median and its interval, and whether the pooled rounds decide it (met,
missed) or still cross the threshold. Pool only runs whose code the target measures
is the same in; it reads the files only (no TensorFlow).

Run:
    python bench/pooled_rounds.py bench/results/latest.json OTHER/latest.json [...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import load_results
from bench_targets import check_targets, median_interval

__all__ = ["PooledTarget", "main", "pool"]


class PooledTarget:
    """One paired target's rounds over several runs, read as one reading."""

    def __init__(self, model: str, target: str, comparison: str, threshold: float) -> None:
        self.model, self.target, self.comparison = model, target, comparison
        self.threshold = threshold
        self.rounds: list[float] = []
        self.runs = 0

    @property
    def median(self) -> float:
        """The pooled rounds' median."""
        return statistics.median(self.rounds)

    @property
    def verdict(self) -> str:
        """``met`` or ``missed`` when the interval lies on one side, else ``crosses``."""
        interval = median_interval(self.rounds)
        low, high = interval if interval is not None else (self.median, self.median)
        if low >= self.threshold:
            return "met"
        if high < self.threshold:
            return "missed"
        return "crosses"


def pool(paths: Sequence[str]) -> list[PooledTarget]:
    """The paired targets of the results files ``paths``, their rounds pooled."""
    pooled: dict[tuple[str, str, str], PooledTarget] = {}
    for path in paths:
        tables, _ = load_results(path)
        for t in check_targets(tables):
            if not t.rounds:
                continue  # a ratio of medians or a same-run share: no rounds to pool
            key = (t.model, t.target, t.comparison)
            entry = pooled.setdefault(key, PooledTarget(*key, t.threshold))
            entry.rounds.extend(t.rounds)
            entry.runs += 1
    return list(pooled.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="latest.json files written by bench/run.py")
    args = parser.parse_args(argv)
    print("| model | target | ratio | runs | rounds | median | 90% interval | needed | pooled |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for p in pool(args.results):
        low, high = median_interval(p.rounds) or (p.median, p.median)
        print(
            f"| {p.model} | {p.target} | `{p.comparison}` | {p.runs} | {len(p.rounds)} | "
            f"{p.median:.3f} | {low:.3f}-{high:.3f} | >= {p.threshold:.2f} | {p.verdict} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
