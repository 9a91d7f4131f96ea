"""One attempt as the analysis sees it (:class:`ScoredAttempt`), on its own so the store
readers that fill it (``noise_store``, ``spans``) and ``outcomes``, which calls them, import it
without a circle."""

from __future__ import annotations

from dataclasses import dataclass

from engine.analysis.paired import SPEEDUP_CAP
from engine.grading.admission import runtime_defect
from problems.sol import share_of_sol


@dataclass(frozen=True)
class ScoredAttempt:
    """One attempt as the analysis sees it: its arm, verdict, times and usage."""

    model: str
    problem: str
    family: str
    dsl: str
    arm: str  # "solo" | "skill"
    replicate: int
    passed: bool
    runtime_ms: float | None
    ref_runtime_ms: float | None
    skill_blank: bool = False
    flags: tuple[str, ...] = ()
    tokens: int = 0
    cost_usd: float = 0.0
    agent_seconds: float = 0.0
    preview: bool = False
    sol_ms: float | None = None
    repeats_ms: tuple[float, ...] = ()  # passing repeated finals' runtimes (median: runtime_ms)
    host: str = ""  # the grading host (machine · device), for the A/A band of its problem
    # the runners' GPU spans per call (median over the passing repeats; informational)
    span_ms: float | None = None
    ref_span_ms: float | None = None
    span_repeats_ms: tuple[float, ...] = ()
    interventions: tuple[str, ...] = ()  # an operator's stop, retry, extend (storage/controls)

    @property
    def pct_of_sol(self) -> float | None:
        """SOL as a share of the passing implementation's runtime, in percent."""
        return share_of_sol(self.sol_ms, self.runtime_ms) if self.passed else None

    @property
    def speedup(self) -> float | None:
        """Eager / implementation median, capped at 100× (None unless passing with times)."""
        runtime, ref = self.runtime_ms, self.ref_runtime_ms
        if not self.passed or runtime is None or ref is None:
            return None
        if runtime_defect(runtime) or runtime_defect(ref):
            return None
        return min(ref / runtime, SPEEDUP_CAP)
