"""The paper's paired ratio (Equation 2) and per-comparison classification.

For a comparison i with baseline (target solo) and treatment (skill-conditioned target):
both pass → ρ = t_base / t_treat on raw runtimes; fail → pass (rescue) 4; pass → fail
(break) 1/4; joint failure or a skipped treatment 1. ρ > 1 is help, ρ < 1 harm, 1 neutral.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.grading.admission import runtime_defect

RESCUE = 4.0
BREAK = 0.25
SPEEDUP_CAP = 100.0
TIER_THRESHOLD = 2.0


@dataclass(frozen=True)
class ArmResult:
    """The final outcome of one attempt as the analysis needs it."""

    passed: bool
    runtime_ms: float | None = None  # end-to-end median of the implementation when passing
    ref_runtime_ms: float | None = None  # eager reference median

    @property
    def timed(self) -> bool:
        """Whether the runtime is a finite positive number (a passing arm without one is
        no result: ``engine/grading/admission.py``)."""
        return runtime_defect(self.runtime_ms) is None

    @property
    def speedup(self) -> float | None:
        """Eager median / implementation median, capped at 100× (None unless passing)."""
        if not self.passed or not self.runtime_ms or not self.ref_runtime_ms:
            return None
        return min(self.ref_runtime_ms / self.runtime_ms, SPEEDUP_CAP)


def rho(baseline: ArmResult, treatment: ArmResult | None) -> float:
    """Equation 2. ``treatment`` None means a skipped treatment (inherits the baseline)."""
    if treatment is None:
        return 1.0
    if baseline.passed and treatment.passed:
        base_ms, treat_ms = baseline.runtime_ms, treatment.runtime_ms
        if base_ms is None or treat_ms is None or not (baseline.timed and treatment.timed):
            raise ValueError("a passing arm needs a finite positive runtime")  # callers skip
        return base_ms / treat_ms
    if treatment.passed:
        return RESCUE
    if baseline.passed:
        return BREAK
    return 1.0


def verdict(value: float) -> str:
    """help (ρ > 1), harm (ρ < 1) or neutral."""
    if value > 1.0:
        return "help"
    if value < 1.0:
        return "harm"
    return "neutral"


def tier(result: ArmResult) -> int:
    """Outcome tier: 0 failed, 1 passing below 2×, 2 passing at 2× or better."""
    if not result.passed:
        return 0
    s = result.speedup
    return 2 if s is not None and s >= TIER_THRESHOLD else 1


TIER_NAMES = ("failed", "<2x", ">=2x")
