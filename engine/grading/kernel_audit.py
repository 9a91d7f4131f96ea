"""The profiler cross-check of DSL launches: did the hooked launches really run DSL kernels?

The launch hooks (:mod:`engine.grading.dsl_hooks`) count host calls into the DSL runtimes; a
host call can be counted without a GPU kernel ever running. This check profiles one call with
``torch.profiler`` (CUPTI) and looks for the kernels the DSLs compiled in this process among
the GPU kernels that ran. A tiny torch kernel runs inside the same profiled region as a
control, so a profiler that records nothing reads as "unavailable", never as a cheat.

Statuses: ``confirmed`` (a compiled DSL kernel ran), ``unconfirmed`` (hooks counted launches,
the profiler works, and no compiled DSL kernel ran), ``names_unknown`` (no kernel names were
collected for this DSL, so only the kernel count is reported), ``unavailable`` (no working
profiler, e.g. CPU preview). Only ``unconfirmed`` can reject, and only when the evaluation
enforces the check (``kernel_audit = "enforce"``).

Imports torch only, inside the functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.grading.dsl_hooks import cuda_kernel_names, profiled_kernel_names

__all__ = ["MODES", "cross_check", "cuda_kernel_names", "profiled_kernel_names"]

MODES = ("report", "enforce", "off")
MODES_HELP = (
    "profiler cross-check of DSL launches on a GPU: report (default) records it, enforce also "
    "fails unconfirmed launches (dsl.launch_unconfirmed), off skips it"
)
MAX_NAMES = 16


def _matches(observed: str, compiled: str) -> bool:
    """The profiler may print a symbol with its signature; the compiled name must appear."""
    return compiled in observed


def cross_check(
    compiled: Iterable[str],
    observed: list[str] | None,
    control_seen: bool,
    hooked_launches: int,
) -> dict[str, Any]:
    """Decide the audit status from compiled DSL kernel names and profiled kernel names."""
    compiled_names = sorted(set(compiled))
    report: dict[str, Any] = {
        "hooked_launches": hooked_launches,
        "compiled_kernels": compiled_names[:MAX_NAMES],
        "observed_kernels": sorted(set(observed or []))[:MAX_NAMES],
        "dsl_kernel_runs": 0,
    }
    if observed is None or not control_seen:
        return {**report, "status": "unavailable"}
    runs = sum(1 for name in observed if any(_matches(name, c) for c in compiled_names))
    report["dsl_kernel_runs"] = runs
    if not compiled_names:
        return {**report, "status": "names_unknown"}
    if hooked_launches > 0 and runs == 0:
        return {**report, "status": "unconfirmed"}
    return {**report, "status": "confirmed"}
