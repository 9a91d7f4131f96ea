"""A per-call trace of the timed calls, for finding where small calls' time goes (off by
default: ``EvalConfig.call_trace``).

For each timed call the judge keeps the runner's figure, host time and page faults in the call,
its own clock, the CPU the runner's process and the judge last ran on (``/proc/PID/stat``, read
by the judge after the call, outside every clock), the runner's CPU time and the judge's wall
time over the whole call cycle since the previous row (checks, inputs, staging, call, report:
``runner_cpu_ms`` from ``/proc/PID/task/*/schedstat``, ``cycle_ms``) and, over the whole phase,
the hypervisor's steal ticks per CPU (``/proc/stat``). Informational only: nothing here enters
a score or a verdict, and the runner is not asked for anything (its own figures are already in
its ``done`` reply).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from engine.grading.judge.breakdown import sane_ms

MAX_ROWS = 200


def cpu_of(pid: int | str) -> int | None:
    """The CPU ``pid`` last ran on (field 39 of ``/proc/PID/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    with contextlib.suppress(IndexError, ValueError):
        return int(fields[36])  # field 39 counted from 1, after pid and (comm)
    return None


def cpu_time_ns(pid: int | str) -> int | None:
    """CPU time of every thread of ``pid`` in ns (``schedstat``), or None where unreadable."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def steal_ticks() -> dict[int, int]:
    """Steal ticks per CPU since boot (``/proc/stat``; empty where unreadable)."""
    out: dict[int, int] = {}
    try:
        with open("/proc/stat") as fh:
            lines = fh.readlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) > 8 and parts[0].startswith("cpu") and parts[0] != "cpu":
            with contextlib.suppress(ValueError):
                out[int(parts[0][3:])] = int(parts[8])
    return out


class CallTrace:
    """The rows of one side's timed calls (the runner given by its outermost pid)."""

    def __init__(self, runner_pid: int) -> None:
        from engine.grading.judge.runner_proc import process_tree

        tree = process_tree(runner_pid)
        self.runner_pid = tree[-1] if tree else runner_pid  # the jailed python is the leaf
        self.rows: list[dict[str, Any]] = []
        self.steal_start = steal_ticks()
        self.last_cpu_ns = cpu_time_ns(self.runner_pid)
        self.last_wall = time.perf_counter()

    def add(self, reply: dict[str, Any], judge_ms: float) -> None:
        if len(self.rows) >= MAX_ROWS:
            return
        cpu_ns, wall = cpu_time_ns(self.runner_pid), time.perf_counter()
        runner_cpu_ms = None
        if cpu_ns is not None and self.last_cpu_ns is not None:
            runner_cpu_ms = round((cpu_ns - self.last_cpu_ns) / 1e6, 4)
        cycle_ms = round((wall - self.last_wall) * 1e3, 4)
        self.last_cpu_ns, self.last_wall = cpu_ns, wall
        self.rows.append(
            {
                "ms": sane_ms(reply.get("ms")),
                "host_ms": sane_ms(reply.get("host_ms")),
                "judge_ms": round(judge_ms, 4),
                "runner_cpu": cpu_of(self.runner_pid),
                "judge_cpu": cpu_of("self"),
                "faults": reply["faults"] if type(reply.get("faults")) is int else None,
                "runner_cpu_ms": runner_cpu_ms,
                "cycle_ms": cycle_ms,
            }
        )

    def summary(self) -> dict[str, Any]:
        end = steal_ticks()
        steal = {c: end[c] - self.steal_start.get(c, end[c]) for c in end}
        return {
            "rows": self.rows,
            "steal_ticks": {str(c): n for c, n in steal.items() if n},
            "cpus": os.cpu_count(),
        }
