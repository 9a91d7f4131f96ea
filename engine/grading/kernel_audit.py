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

import re
from collections.abc import Callable, Iterable
from typing import Any

MODES = ("report", "enforce", "off")
MODES_HELP = (
    "profiler cross-check of DSL launches on a GPU: report (default) records it, enforce also "
    "fails unconfirmed launches (dsl.launch_unconfirmed), off skips it"
)
MAX_NAMES = 16
CONTROL_NAME_HINTS = ("fill", "add", "elementwise", "vectorized")
GLOBAL_FUNCTION = re.compile(
    r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\("
)


def cuda_kernel_names(source: str) -> set[str]:
    """``__global__`` function names in generated CUDA C (how TIRx names its kernels)."""
    return set(GLOBAL_FUNCTION.findall(source))


def profiled_kernel_names(call: Callable[[], Any]) -> tuple[list[str], bool] | None:
    """GPU kernel names seen while ``call`` runs (plus a control kernel), and whether the
    control was seen. None when the profiler cannot run here."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except Exception:  # noqa: BLE001 - no profiler on this host
        return None
    if not torch.cuda.is_available():
        return None
    marker = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    raised: BaseException | None = None
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            marker.add_(1.0)  # the control kernel
            torch.cuda.synchronize()
            try:
                call()
                torch.cuda.synchronize()
            except BaseException as exc:  # noqa: BLE001 - the call's own failure, re-raised
                raised = exc
    except Exception:  # noqa: BLE001 - CUPTI unavailable or busy
        if raised is None:
            return None
    if raised is not None:
        raise raised
    names = [
        str(e.name)
        for e in prof.events()
        if str(getattr(e, "device_type", "")).endswith("CUDA")
    ]
    control_seen = bool(names) and any(h in n.lower() for n in names for h in CONTROL_NAME_HINTS)
    return names, control_seen


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
