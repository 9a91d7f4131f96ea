"""Where the test suite's CPU goes: each test's CPU seconds, its whole process tree included
(warm parents, judges, jailed runners), from one cpuacct cgroup per pytest-xdist worker.

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p pytest_cpu -n 2 --dist loadgroup \
        -m "not serial" -q -p no:cacheprovider          # rows go to $MKB_TEST_CPU_OUT
    .venv/bin/python benchmarks/pytest_cpu.py OUT.jsonl   # the summary per test file

A pytest plugin (``-p pytest_cpu``, with ``benchmarks`` on ``PYTHONPATH``): each worker moves
itself into ``/sys/fs/cgroup/cpuacct/mkb-test-<worker>`` (cgroup v1; needs root) and writes one
JSON line per test — its node id, CPU seconds and wall seconds — to ``$MKB_TEST_CPU_OUT``
(default ``/tmp/mkb-test-cpu.jsonl``; ``$MKB_TEST_CPU_GROUP`` replaces the groups'
``mkb-test`` prefix, so two suites measured at once never share one). A process a test leaves
behind is charged to the tests that follow it on that worker. Run as a script, it prints the
per-file totals.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct")
OUT = Path(os.environ.get("MKB_TEST_CPU_OUT", "/tmp/mkb-test-cpu.jsonl"))
_group: list[Path] = []


def pytest_configure(config: Any) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    # a prefix of its own per run, so two suites measured at once never share a group
    prefix = os.environ.get("MKB_TEST_CPU_GROUP", "mkb-test")
    group = ROOT / f"{prefix}-{worker}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        raise pytest.UsageError(f"pytest_cpu needs a writable cgroup v1 cpuacct ({exc})") from exc
    _group.append(group)


def _cpu_s() -> float:
    return int((_group[0] / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    cpu, wall = _cpu_s(), time.perf_counter()
    yield
    row = {
        "id": item.nodeid,
        "cpu_s": round(_cpu_s() - cpu, 2),
        "wall_s": round(time.perf_counter() - wall, 2),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "end": round(time.time(), 2),  # with wall_s: when each worker was busy
    }
    with OUT.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def summarize(rows: list[dict[str, Any]], top: int = 25) -> str:
    per_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        totals = per_file[row["id"].split("::")[0]]
        totals[0] += row["cpu_s"]
        totals[1] += row["wall_s"]
        totals[2] += 1
    total = sum(t[0] for t in per_file.values())
    lines = [f"{len(rows)} tests, {total:.0f} s of CPU", "   cpu s   wall s  tests  file"]
    for name, (cpu, wall, n) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {int(n):6d}  {name}")
    lines += _workers(rows)
    return "\n".join(lines)


def _workers(rows: list[dict[str, Any]]) -> list[str]:
    """Each worker's busy time and when it ran out of tests (the tail the others waited)."""
    if not rows or "end" not in rows[0]:
        return []
    start = min(r["end"] - r["wall_s"] for r in rows)
    lines = ["worker  busy s  last test ended at s"]
    for worker in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == worker]
        busy = sum(r["wall_s"] for r in mine)
        lines.append(f"{worker:6s} {busy:7.0f} {max(r['end'] for r in mine) - start:8.0f}")
    return lines


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    print(summarize([json.loads(line) for line in source.read_text().splitlines() if line]))
