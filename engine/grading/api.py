"""The one interface every grading backend implements, and the records it exchanges.

Kept free of torch so the engine, the sandbox side and the TUI can import it cheaply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from engine.grading.verdict import Evidence, decide
from problems.sol import share_of_sol

Verdict = Literal["pass", "fail", "preview", "error"]
DSLS: tuple[str, ...] = ("cute", "tirx")
MAX_SOURCE_BYTES = 300 * 1024


@dataclass(frozen=True)
class GradeRequest:
    """One evaluation: a submission's source for a problem in a DSL."""

    problem_id: str
    dsl: str
    source: str
    device: str = "auto"  # "auto" (GPU when present, else CPU preview), "cuda" or "cpu"
    request_id: str = ""  # caller's id (e.g. the submission id), echoed in the feedback
    purpose: str = "submission"  # "submission" or "final"
    # the grading slot to run on (a ``Feedback.host``, "hostname:gpu0"); "" = any. A paired
    # job pins its gradings so; a backend that cannot honour it grades anywhere, and the
    # feedback's ``host`` says where (engine/paired_repeats.py)
    slot: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeRequest:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Finding:
    """A static-rule finding on the submitted source."""

    code: str  # stable reason code, e.g. "rule.other_language"
    message: str
    line: int | None = None


def graded_in_preview(verdict: str | None, device: str | None) -> bool:
    """Whether a grading was a CPU preview: a "preview" verdict, or any verdict of a grading
    on a CPU (a kernel failing there fails, but was never scored on its GPU)."""
    return verdict == "preview" or str(device or "").startswith("cpu")


@dataclass
class Feedback:
    """What a grading returns: the verdict, a stable reason code and the evidence.

    ``verdict`` is "pass" only for a scored pass on a GPU; CPU preview runs say "preview"
    (never a scored pass); "error" means the grading infrastructure failed (retryable),
    "fail" that the submission failed the contract (``reason`` says why).
    """

    verdict: Verdict
    reason: str | None = None  # stable code: correctness.tolerance, rule.cuda_graph, timeout...
    message: str = ""
    request_id: str = ""
    problem_id: str = ""
    dsl: str = ""
    device: str = ""  # e.g. "NVIDIA H200" or "cpu (preview)"
    import_ok: bool | None = None
    import_error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    draws: list[dict[str, Any]] = field(default_factory=list)  # per draw: per-output checks
    impl_median_ms: float | None = None
    impl_iqr_ms: float | None = None
    eager_median_ms: float | None = None
    eager_iqr_ms: float | None = None
    speedup: float | None = None  # eager / impl, capped at 100
    dsl_launches_per_call: float | None = None
    bypass: str | None = None  # "outputs_failed" (good), "still_valid" (bad), "skipped: ..."
    kernel_audit: dict[str, Any] | None = None  # profiler cross-check (kernel_audit.py)
    sol_ms: float | None = None  # speed of light on the grading GPU (problems/sol.py)
    # marks for exclusion rules: "sol.faster_than_sol" (impossible: a grading bug or a cheat),
    # "kernel_audit.unconfirmed" (report mode), "timing.judge_floor" (the runner's figure was
    # under the judge's floor, the score came from the judge's clock), "timing.mismatch" (CPU
    # preview only; on a GPU it is a rejection); they never change the verdict
    flags: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)  # phase → wall seconds
    log_tail: str = ""
    # the judge's clock: calibrated no-op round trips of the submission's and the eager
    # runner, the bound on (judge clock − runner figure), and the runners' own CUDA-event
    # (or perf_counter) medians, shown for information; scores use the judge's clock
    clock: dict[str, Any] = field(default_factory=dict)
    impl_event_median_ms: float | None = None
    eager_event_median_ms: float | None = None
    jailed: bool | None = None  # the runner ran in the bubblewrap jail (False: --unsafe-no-jail)
    # the machine and slot that graded it ("hostname:gpu0"), set by the grader that ran it and
    # carried through http, fleet and Ray: A/A bands are kept per grading host
    host: str = ""

    @property
    def scored_pass(self) -> bool:
        return self.verdict == "pass"

    @property
    def in_preview(self) -> bool:
        return graded_in_preview(self.verdict, self.device)

    @property
    def pct_of_sol(self) -> float | None:
        """SOL time as a share of the implementation's median time, in percent."""
        return share_of_sol(self.sol_ms, self.impl_median_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Feedback:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["findings"] = [
            f if isinstance(f, Finding) else Finding(**f) for f in known.get("findings", [])
        ]
        return cls(**known)

    @classmethod
    def decided(cls, request: GradeRequest, evidence: Evidence, **fields: Any) -> Feedback:
        """The feedback for ``request`` whose verdict, reason and message
        :func:`engine.grading.verdict.decide` draws from ``evidence`` (the one place verdicts
        are decided); ``fields``: the rest of the evidence to show."""
        verdict, reason, message = decide(evidence)
        return cls(
            verdict,  # type: ignore[arg-type]
            reason,
            message,
            request.request_id,
            request.problem_id,
            request.dsl,
            **fields,
        )


class GradingBackend(Protocol):
    """Grades submissions; implementations: local, http, harbor."""

    name: str

    async def grade(self, request: GradeRequest) -> Feedback:
        """Evaluate one submission. Infrastructure failures return verdict "error"."""
        ...

    async def close(self) -> None:
        """Release workers, sessions and child processes."""
        ...
