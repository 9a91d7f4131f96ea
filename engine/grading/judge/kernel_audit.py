"""The profiler cross-check of DSL launches: did the hooked launches really run DSL kernels?

The launch hooks (:mod:`engine.grading.runner.dsl_hooks`) count host calls into the DSL runtimes; a
host call can be counted without a GPU kernel ever running. This check profiles one call with
``torch.profiler`` (CUPTI) and looks for the kernels the DSLs compiled in this process among
the GPU kernels that ran. A tiny torch kernel runs inside the same profiled region as a
control, so a profiler that records nothing reads as "unavailable", never as a cheat.

Statuses: ``confirmed`` (a compiled DSL kernel ran), ``unconfirmed`` (hooks counted launches,
the profiler works, and no compiled DSL kernel ran), ``names_unknown`` (no kernel names were
collected for this DSL, so only the kernel count is reported), ``unavailable`` (no working
profiler, e.g. CPU preview). Only ``unconfirmed`` can reject, and only when the evaluation
enforces the check (``kernel_audit = "enforce"``).

The same profile splits the call's device time (:func:`work_split`): the compiled DSL
kernels, library GEMMs (cuBLAS/cuBLASLt, which any problem may call), and everything else
(eager PyTorch kernels, copies, sets). Where the audit is confirmed, the DSL kernels must take
at least :data:`MIN_DSL_SHARE` of the DSL-plus-other time, or the evaluation fails
``dsl.eager_work``: a submission that computes its output with PyTorch and launches a DSL
kernel only as a token (or as a probe that notices the bypass call) does not pass.

Imports torch only, inside the functions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from engine.grading.runner.dsl_hooks import cuda_kernel_names, profiled_kernel_names

__all__ = [
    "MIN_DSL_SHARE",
    "MODES",
    "cross_check",
    "cuda_kernel_names",
    "eager_work",
    "profiled_kernel_names",
    "work_split",
]

MODES = ("report", "enforce", "off")
MODES_HELP = (
    "profiler cross-check of DSL launches on a GPU: report (default) records it, enforce also "
    "fails unconfirmed launches (dsl.launch_unconfirmed), off skips it"
)
MAX_NAMES = 16
MIN_DSL_SHARE = 0.25  # of the DSL-plus-other device time; library GEMMs count on neither side
LIBRARY_HINTS = ("gemm", "nvjet", "cublas", "xmma")  # cuBLAS/cuBLASLt kernel names, lower case
MAX_EVENT_US = 3.6e9


def _matches(observed: str, compiled: str) -> bool:
    """The observed kernel is the compiled symbol itself: exactly, or followed by a signature
    or template arguments (``main_kernel(float*, ...)``), optionally after ``void``. A name
    merely containing it (``at::native::elementwise_kernel<...>`` for a DSL kernel named
    ``elementwise_kernel``) does not match."""
    if observed.startswith("void "):
        observed = observed[5:]
    return observed == compiled or (
        observed.startswith(compiled) and observed[len(compiled) : len(compiled) + 1] in "(<"
    )


def _is_library(name: str) -> bool:
    lowered = name.lower()
    return any(hint in lowered for hint in LIBRARY_HINTS) and not re.match(
        r"(void )?at::native::", name
    )


def work_split(
    compiled: Iterable[str], observed: list[str], durations: list[Any] | None
) -> dict[str, Any] | None:
    """Device microseconds of one profiled call by kind: ``dsl`` (compiled DSL kernels),
    ``library`` (cuBLAS GEMMs), ``other``; and the DSL share of DSL plus other. The first
    event is the control kernel and is left out. None when the durations are unusable."""
    if not isinstance(durations, list) or len(durations) != len(observed):
        return None
    compiled_names = set(compiled)
    totals = {"dsl": 0.0, "library": 0.0, "other": 0.0}
    for name, us in list(zip(observed, durations, strict=True))[1:]:
        if isinstance(us, bool) or not isinstance(us, (int, float)):
            return None
        if not math.isfinite(us) or not 0.0 <= us <= MAX_EVENT_US:
            return None
        if any(_matches(name, c) for c in compiled_names):
            totals["dsl"] += us
        elif _is_library(name):
            totals["library"] += us
        else:
            totals["other"] += us
    judged = totals["dsl"] + totals["other"]
    return {
        **{f"{kind}_us": round(us, 3) for kind, us in totals.items()},
        "dsl_share": round(totals["dsl"] / judged, 4) if judged > 0 else None,
    }


def eager_work(audit: dict[str, Any]) -> bool:
    """A confirmed audit whose DSL kernels took less than ``MIN_DSL_SHARE`` of the work."""
    share = (audit.get("work") or {}).get("dsl_share")
    return audit.get("status") == "confirmed" and share is not None and share < MIN_DSL_SHARE


def cross_check(
    compiled: Iterable[str],
    observed: list[str] | None,
    control_seen: bool,
    hooked_launches: int,
    durations: list[Any] | None = None,
) -> dict[str, Any]:
    """Decide the audit status from compiled DSL kernel names and profiled kernel names; with
    the kernels' durations, also the split of the call's device time (``work``)."""
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
    if durations is not None:
        report["work"] = work_split(compiled_names, observed, durations)
    if not compiled_names:
        return {**report, "status": "names_unknown"}
    if hooked_launches > 0 and runs == 0:
        return {**report, "status": "unconfirmed"}
    return {**report, "status": "confirmed"}
