"""The table of ``docs/solutions.md`` from one GPU batch: the solutions measured outside the
grader (``solutions_profile.py``) beside the grader's own speedups (``gpu_validation.py``).

    python3 benchmarks/solutions_table.py PROFILE.jsonl GRADING.jsonl

A grader speedup is compared with the plain-process one: ``Δ`` is their ratio less one.
Several grader rows for one file (repeats) show the median.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def grader_speedups(rows: list[dict[str, Any]]) -> dict[str, tuple[float | None, str]]:
    """File name → (median speedup of passing rows, verdicts seen)."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_file.setdefault(Path(row["file"]).name, []).append(row)
    out: dict[str, tuple[float | None, str]] = {}
    for name, group in by_file.items():
        passed = [r["speedup"] for r in group if r["verdict"] == "pass" and r["speedup"]]
        verdicts = ",".join(sorted({r["reason"] or r["verdict"] for r in group}))
        out[name] = (statistics.median(passed) if passed else None, verdicts)
    return out


def _us(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def table(profile: list[dict[str, Any]], grading: list[dict[str, Any]]) -> str:
    graded = grader_speedups(grading)
    lines = [
        "| solution | host µs | device µs | end-to-end µs | eager e2e µs | SOL µs | % of SOL "
        "| speedup (plain) | speedup (grader) | Δ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in profile:
        if "error" in row:
            lines.append(f"| {row['file']} | error: {row['error'][:80]} |||||||||")
            continue
        sub, eager = row["solution"], row["eager"]
        grader, verdicts = graded.get(Path(row["file"]).name, (None, "not graded"))
        delta = "–" if grader is None else f"{100 * (grader / row['speedup'] - 1):+.0f} %"
        shown = f"{grader:.2f}×" if grader is not None else verdicts
        lines.append(
            f"| {row['file'].removesuffix('.py')} | {_us(sub['host_us'])} | "
            f"{_us(sub['device_us'])} | {_us(sub['e2e_us'])} | {_us(eager['e2e_us'])} | "
            f"{row['sol_us']:,.1f} | {row['pct_sol']:.1f} | {row['speedup']:.2f}× | {shown} | "
            f"{delta} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(load(Path(args[0])), load(Path(args[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
