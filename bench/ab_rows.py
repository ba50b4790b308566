"""Rows of the benchmark run on two checkouts, alternating in one shell: an A/B of a change.

Each round runs ``bench/run.py --only ROWS --repeats 1`` of checkout A, then of B (every
other round B first), each into its own output folder, so both sides see the same machine
at nearly the same time. The table gives each row's median and spread on each side, and
B's median over A's; a row whose spreads do not overlap is marked.

Run:
    git worktree add /tmp/before <commit>
    python bench/ab_rows.py --a /tmp/before --b . --rounds 5 --out bench/results/ab.md
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["INPUT_ROWS", "main"]

logger = logging.getLogger(__name__)

#: the input-alone rows: what a change to the readers can move
INPUT_ROWS = (
    "input_queue",
    "input_dataset",
    "input_tf2",
    "input_memory",
    "input_memory_tf2",
    "input_packed",
    "input_packed_tf2",
)


def _run_side(checkout: Path, rows: str, model: str, out: Path, data: Path, timeout: float) -> None:
    command = [
        sys.executable,
        str(checkout / "bench" / "run.py"),
        "--models",
        model,
        "--only",
        rows,
        "--repeats",
        "1",
        "--out",
        str(out),
        "--data-dir",
        str(data),
    ]
    logger.info("%s", " ".join(command))
    subprocess.run(command, cwd=checkout, check=True, timeout=timeout, capture_output=True)


def _rates(out: Path) -> dict[str, float]:
    runs = json.loads((out / "latest.json").read_text())["runs"]
    return {
        key.split("|")[0]: result["examples_per_sec"]
        for key, results in runs.items()
        for result in results
        if result.get("ok")
    }


def _table(rows: list[str], a: dict[str, list[float]], b: dict[str, list[float]]) -> str:
    lines = [
        "| row | A: ex/s (spread) | B: ex/s (spread) | B/A |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        if not a.get(row) or not b.get(row):
            continue
        ma, mb = statistics.median(a[row]), statistics.median(b[row])
        apart = max(a[row]) < min(b[row]) or max(b[row]) < min(a[row])
        lines.append(
            f"| `{row}` | {ma:,.0f} ({min(a[row]):,.0f}-{max(a[row]):,.0f}) | "
            f"{mb:,.0f} ({min(b[row]):,.0f}-{max(b[row]):,.0f}) | "
            f"{mb / ma:.2f}{' (spreads apart)' if apart else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Run the rounds and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (before)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (after)")
    parser.add_argument("--rows", default=",".join(INPUT_ROWS))
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ab_rows"))
    parser.add_argument("--out", type=Path, help="where to write the table (markdown)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per side")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = args.rows.split(",")
    found: dict[str, dict[str, list[float]]] = {"a": {}, "b": {}}
    data = args.work / "data"
    for round_ in range(args.rounds):
        sides = [("a", args.a), ("b", args.b)]
        for side, checkout in sides if round_ % 2 == 0 else sides[::-1]:
            out = args.work / f"{side}{round_}"
            _run_side(checkout.resolve(), args.rows, args.model, out, data, args.timeout)
            for row, rate in _rates(out).items():
                found[side].setdefault(row, []).append(rate)
    commits = [
        subprocess.run(
            ["git", "-C", str(c), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        for c in (args.a, args.b)
    ]
    text = (
        f"A = {commits[0]}, B = {commits[1]}; {args.rounds} alternating rounds, model "
        f"{args.model}, one run a side a round (`python bench/ab_rows.py --a ... --b ... "
        f"--rounds {args.rounds}`).\n\n" + _table(rows, found["a"], found["b"]) + "\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
