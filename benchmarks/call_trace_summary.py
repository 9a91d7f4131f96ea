"""Summarize the per-call traces that ``grading_steps_gpu.py --call-trace`` recorded.

    python3 benchmarks/call_trace_summary.py STEPS.jsonl [PAIRS.json]

One line per evaluation and side: the speedup, the runner's host-time median and quartiles,
the CPUs the runner and the judge ran on (the most common of each, and how often they moved),
the host-time median per runner CPU, and the steal ticks over the phase. With the output of
``cpu_pairs.py``, each judge/runner CPU pair's measured slowdown is shown beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 4:
        m = statistics.median(values)
        return m, m, m
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


def pair_slowdown(pairs: dict[str, Any] | None, a: int | None, b: int | None) -> float | None:
    if not pairs or a is None or b is None or a == b:
        return None
    for p in pairs.get("pairs", []):
        if {p["a"], p["b"]} == {a, b}:
            return float(min(p["ra"], p["rb"]))
    return None


def side_line(side: str, trace: dict[str, Any], pairs: dict[str, Any] | None) -> str:
    rows = trace.get("rows") or []
    host = [r["host_ms"] * 1e3 for r in rows if r.get("host_ms") is not None]
    if not host:
        return f"  {side}: no rows"
    q1, med, q3 = quartiles(host)
    runner = Counter(r.get("runner_cpu") for r in rows)
    judge = Counter(r.get("judge_cpu") for r in rows)
    per_cpu: dict[Any, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("host_ms") is not None:
            per_cpu[r.get("runner_cpu")].append(r["host_ms"] * 1e3)
    by_cpu = {c: round(statistics.median(v), 1) for c, v in sorted(per_cpu.items(), key=str)}
    main_runner, main_judge = runner.most_common(1)[0][0], judge.most_common(1)[0][0]
    same = sum(1 for r in rows if r.get("runner_cpu") == r.get("judge_cpu"))
    slow = pair_slowdown(pairs, main_runner, main_judge)
    return (
        f"  {side}: host µs q1/med/q3 {q1:.1f}/{med:.1f}/{q3:.1f}; runner cpu {main_runner}"
        f" ({len(runner)} cpus), judge cpu {main_judge} ({len(judge)} cpus), same cpu"
        f" {same}/{len(rows)}; pair rate {slow}; host by runner cpu {by_cpu};"
        f" steal {trace.get('steal_ticks')}"
    )


def main(argv: list[str]) -> int:
    steps = Path(argv[0])
    pairs = json.loads(Path(argv[1]).read_text()) if len(argv) > 1 else None
    for line in steps.read_text().splitlines():
        row = json.loads(line)
        if "file" not in row:
            continue
        print(f"{row['file']} {row['verdict']} {row.get('speedup') or 0:.2f}x", flush=True)
        for side, trace in (row.get("call_trace") or {}).items():
            print(side_line(side, trace, pairs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
