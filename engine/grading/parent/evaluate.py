"""Parent-side orchestration of one evaluation: static rules, the job, the feedback.

Nothing here imports torch: the parent only reads source, draws seeds, starts or forks the
child and turns what came back into a :class:`~engine.grading.api.Feedback`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from random import SystemRandom
from typing import Any

from engine.grading.api import Feedback, Finding, GradeRequest
from engine.grading.judge import kernel_audit
from engine.grading.parent.supervise import ChildOutcome, Limits, run_subprocess
from engine.grading.rules.static import check_source, first_reason

PROBLEMS_ROOT = Path(__file__).resolve().parents[3] / "problems"
FAMILY_FOLDERS = ("attention", "kv_cache", "mlp_norm", "moe", "quantization", "linear_attention")

# (correctness draws, warmup calls, timed calls, rechecks)
GPU_COUNTS = (5, 10, 50, 3)
PREVIEW_COUNTS = (5, 2, 10, 3)


@dataclass
class EvalConfig:
    """Knobs of one evaluation; defaults follow the contract."""

    timeout_s: float = 600.0
    eager_timeout_s: float = 600.0
    memory_limit_mb: int | None = None  # None: 16 GiB in CPU preview, 64 GiB host RSS on GPU
    scale: str | None = None  # None: "full" on GPU, "smoke" in CPU preview
    counts: tuple[int, int, int, int] | None = None  # None: GPU_COUNTS / PREVIEW_COUNTS
    env: dict[str, str] = field(default_factory=dict)  # extra child environment
    problem_paths: dict[str, str] = field(default_factory=dict)  # id → file (tests, drafts)
    dsl_checks: bool | None = None  # None: on GPU only; True also on CPU (tests, stand-in DSL)
    # Profiler cross-check of DSL launches: "report" records it, "enforce" also rejects an
    # unconfirmed launch (dsl.launch_unconfirmed), "off" skips the extra profiled call.
    kernel_audit: str = "report"
    # Run submissions without the bubblewrap jail (recorded on the feedback); never the default.
    unsafe_no_jail: bool = False
    # submission runners each warm slot keeps started ahead (each imports torch and the DSLs
    # in seconds; back-to-back evaluations on a GPU want several)
    spare_runners: int = 2
    # Busy-poll this long in each runner after staging a call's inputs, before answering, so
    # its core is awake when the call comes (outside every clock; both runners alike). Off
    # until a GPU run shows it helps (docs/grading.md, "Session 7"); at most 50 ms.
    stage_warmup_ms: float = 0.0
    # Keep a per-call trace of the timed calls (figures, the CPUs the runner and the judge
    # ran on, steal ticks) in ``clock.call_trace``: diagnostics, off by default.
    call_trace: bool = False
    # Precede each warm-up and timed call, on both sides, with an untimed call on the previous
    # call's inputs (outputs dropped), so the call is timed with its code and data in the
    # caches rather than evicted by the judge's checks in between. Never for problems with
    # in-place outputs (their previous inputs were written). Off until a GPU run shows it
    # helps (docs/grading.md, "Warm calls").
    warm_calls: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.stage_warmup_ms <= 50.0:
            raise ValueError(f"stage_warmup_ms must be within 0..50, not {self.stage_warmup_ms}")
        if self.kernel_audit not in kernel_audit.MODES:
            raise ValueError(
                f"kernel_audit must be one of {kernel_audit.MODES}, not {self.kernel_audit!r}"
            )

    def limits(self, device: str) -> Limits:
        memory = self.memory_limit_mb
        if memory is None:
            memory = 16 * 1024 if device == "cpu" else 64 * 1024
        return Limits(self.timeout_s, self.eager_timeout_s, memory)


def problem_ids() -> dict[str, str]:
    """Map of id and slug → id for the catalog's files (read from file names, no import)."""
    known: dict[str, str] = {}
    for folder in FAMILY_FOLDERS:
        for path in (PROBLEMS_ROOT / folder).glob("p[0-9][0-9]_*.py"):
            pid, _, slug = path.stem.partition("_")
            known[pid] = pid
            known[slug] = pid
    return known


def resolve_problem(key: str) -> str | None:
    """The problem id for ``key`` (id, number or slug), or None if unknown."""
    k = key.strip()
    if k.isdigit():
        k = f"p{int(k):02d}"
    return problem_ids().get(k)


def gpu_count() -> int:
    """GPUs visible to this process, found without initialising CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    gpus_dir = Path("/proc/driver/nvidia/gpus")
    count = len(list(gpus_dir.iterdir())) if gpus_dir.is_dir() else 0
    if count == 0 and shutil.which("nvidia-smi"):
        import subprocess

        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            count = 0
    if visible is not None and count:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def resolve_device(requested: str, gpus: int | None = None) -> str:
    """ "cuda" or "cpu" for a request's ``device`` ("auto", "cuda", "cpu")."""
    if requested not in ("auto", "cuda", "cpu"):
        raise ValueError(f"unknown device {requested!r} (auto, cuda or cpu)")
    if requested == "auto":
        return "cuda" if (gpu_count() if gpus is None else gpus) > 0 else "cpu"
    return requested


def draw_seeds(counts: tuple[int, int, int, int]) -> tuple[dict[str, Any], list[int]]:
    """Fresh unpredictable seeds per call and the timed calls to recheck."""
    rng = SystemRandom()
    correctness, warmup, timed, rechecks = counts

    def seeds(n: int) -> list[int]:
        return [rng.getrandbits(63) for _ in range(n)]

    drawn = {
        "correctness": seeds(correctness),
        "warmup": seeds(warmup),
        "timed": seeds(timed),
        "bypass": rng.getrandbits(63),
    }
    recheck = sorted(rng.sample(range(timed), min(rechecks, timed)))
    return drawn, recheck


def make_job(request: GradeRequest, device: str, config: EvalConfig, workdir: str) -> dict:
    counts = config.counts or (GPU_COUNTS if device == "cuda" else PREVIEW_COUNTS)
    seeds, recheck = draw_seeds(counts)
    limits = config.limits(device)
    return {
        "problem_id": resolve_problem(request.problem_id) or request.problem_id,
        "dsl": request.dsl,
        "source": request.source,
        "device": device,
        "scale": config.scale or ("full" if device == "cuda" else "smoke"),
        "nonce": secrets.token_hex(16),
        "seeds": seeds,
        "recheck": recheck,
        "memory_limit_mb": limits.memory_limit_mb if device == "cpu" else None,
        "rss_limit_mb": limits.memory_limit_mb,
        "timeout_s": limits.timeout_s,
        "eager_timeout_s": limits.eager_timeout_s,
        "unsafe_no_jail": config.unsafe_no_jail,
        "workdir": workdir,
        "problem_path": config.problem_paths.get(request.problem_id),
        "dsl_checks": device == "cuda" if config.dsl_checks is None else config.dsl_checks,
        "kernel_audit": config.kernel_audit,
        "stage_warmup_ms": config.stage_warmup_ms,
        "call_trace": config.call_trace,
        "warm_calls": config.warm_calls,
    }


def static_feedback(request: GradeRequest, findings: list[Finding]) -> Feedback:
    reason = first_reason(findings)
    lines = "; ".join(f"line {f.line}: {f.message}" if f.line else f.message for f in findings)
    return Feedback(
        verdict="fail",
        reason=reason,
        message=f"static check failed: {lines}",
        request_id=request.request_id,
        problem_id=request.problem_id,
        dsl=request.dsl,
        findings=findings,
    )


def request_problem(request: GradeRequest, extra: Iterable[str] = ()) -> Feedback | None:
    """A usage-level failure for an unknown problem or DSL, else None."""
    from engine.grading.api import DSLS

    extra = set(extra)
    if request.dsl not in DSLS:
        return Feedback(
            "error",
            "usage",
            f"unknown DSL {request.dsl!r} (one of {DSLS})",
            request.request_id,
            request.problem_id,
            request.dsl,
        )
    if resolve_problem(request.problem_id) is None and request.problem_id not in extra:
        return Feedback(
            "error",
            "usage",
            f"unknown problem {request.problem_id!r}",
            request.request_id,
            request.problem_id,
            request.dsl,
        )
    return None


def feedback_from(request: GradeRequest, outcome: ChildOutcome, device: str) -> Feedback:
    """Turn a child's outcome into feedback; a missing result becomes timeout/memory/crash."""
    data = dict(outcome.result or {})
    timings = dict(data.get("timings_s") or {})
    timings["child_total"] = outcome.elapsed_s
    fb = Feedback(
        verdict=data.get("verdict", "fail"),
        reason=data.get("reason"),
        message=data.get("message", ""),
        request_id=request.request_id,
        problem_id=request.problem_id,
        dsl=request.dsl,
        device=data.get("device", "cpu (preview)" if device == "cpu" else "cuda"),
        import_ok=data.get("import_ok"),
        import_error=data.get("import_error") or data.get("error"),
        findings=[],
        draws=list(data.get("draws") or []),
        impl_median_ms=data.get("impl_median_ms"),
        impl_iqr_ms=data.get("impl_iqr_ms"),
        eager_median_ms=data.get("eager_median_ms"),
        eager_iqr_ms=data.get("eager_iqr_ms"),
        speedup=data.get("speedup"),
        dsl_launches_per_call=data.get("dsl_launches_per_call"),
        bypass=data.get("bypass") or ("skipped: no GPU" if device == "cpu" else None),
        kernel_audit=data.get("kernel_audit"),
        sol_ms=data.get("sol_ms"),
        flags=list(data.get("flags") or []),
        timings_s=timings,
        log_tail=outcome.log_tail,
        clock={
            **{
                k: v
                for k, v in (
                    ("submission", data.get("clock")),
                    ("eager", data.get("eager_clock")),
                    ("breakdown", data.get("breakdown")),  # the runners' host/device split
                    ("call_trace", data.get("call_trace")),  # diagnostics, when asked for
                    ("warm_calls", data.get("warm_calls")),  # how many ran per side
                )
                if v
            },
            **(
                {"judge_started_ahead": data["judge_started_ahead"]}
                if "judge_started_ahead" in data
                else {}
            ),
        },
        impl_event_median_ms=data.get("impl_event_median_ms"),
        eager_event_median_ms=data.get("eager_event_median_ms"),
        jailed=data.get("jailed"),
    )
    if outcome.result is None:
        phase = outcome.last_phase or "start"
        if outcome.memory_killed:
            fb.verdict, fb.reason = "fail", "memory"
            fb.message = f"killed for exceeding the memory limit during {phase}"
        elif outcome.timed_out:
            fb.verdict, fb.reason = "fail", "timeout"
            fb.message = f"time limit exceeded during {phase}"
        else:
            fb.reason = "crash"
            submission_ran = phase not in ("start", "eager", "eager_timing", "eager_done")
            fb.verdict = "fail" if submission_ran else "error"
            fb.message = (
                f"the grading child exited ({outcome.exit_code}) without a result during {phase}"
            )
    if device == "cpu" and fb.verdict == "pass":
        fb.verdict = "preview"  # never a scored pass without a GPU
    return fb


def grade_in_subprocess(
    request: GradeRequest, config: EvalConfig | None = None, device: str | None = None
) -> Feedback:
    """Grade one request in a fresh child process (blocking); used by ``mkb grade``."""
    config = config or EvalConfig()
    bad = request_problem(request, config.problem_paths)
    if bad is not None:
        return bad
    findings = check_source(request.source)
    if findings:
        return static_feedback(request, findings)
    device = device or resolve_device(request.device)
    workdir = tempfile.mkdtemp(prefix="mkb-grade-")
    try:
        job = make_job(request, device, config, workdir)
        outcome = run_subprocess(job, config.limits(device), workdir, config.env)
        return feedback_from(request, outcome, device)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
