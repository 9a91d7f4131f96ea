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
from pathlib import Path
from random import SystemRandom
from typing import Any

from engine.grading.admission import INFRA_JUDGE_CRASH, INFRA_OOM
from engine.grading.api import Feedback, Finding, GradeRequest
from engine.grading.options import GPU_COUNTS, PREVIEW_COUNTS, EvalConfig, job_options
from engine.grading.parent.supervise import HOST_ANCHOR, ChildOutcome, run_subprocess
from engine.grading.rules.static import check_source, first_reason
from engine.grading.verdict import (
    BadRequest,
    Crashed,
    InfrastructureError,
    OverLimit,
    Rejected,
    decide,
)


def resolve_problem(key: str) -> str | None:
    """The problem id for ``key`` (id, number or slug), or None if unknown."""
    from problems.registry import resolve_id

    return resolve_id(key)


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
        "workdir": workdir,
        "problem_path": config.problem_paths.get(request.problem_id),
        "dsl_checks": device == "cuda" if config.dsl_checks is None else config.dsl_checks,
        **job_options(config),
    }


def static_feedback(request: GradeRequest, findings: list[Finding]) -> Feedback:
    lines = "; ".join(f"line {f.line}: {f.message}" if f.line else f.message for f in findings)
    rejected = Rejected(first_reason(findings) or "rule", f"static check failed: {lines}")
    return Feedback.decided(request, rejected, findings=findings)


def request_problem(request: GradeRequest, extra: Iterable[str] = ()) -> Feedback | None:
    """A usage-level failure for an unknown problem or DSL, else None."""
    from engine.grading.api import DSLS

    if request.dsl not in DSLS:
        return Feedback.decided(request, BadRequest(f"unknown DSL {request.dsl!r} (one of {DSLS})"))
    if resolve_problem(request.problem_id) is None and request.problem_id not in set(extra):
        return Feedback.decided(request, BadRequest(f"unknown problem {request.problem_id!r}"))
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
                    ("cpu_placement", data.get("cpu_placement")),  # judge/placement.py
                    ("compile_cache", data.get("compile_cache")),  # judge/compile_cache.py
                    ("draw_fallbacks", data.get("draw_fallbacks")),  # judge/output_checks.py
                )
                if v
            },
            # booleans: the judge forked ahead; the runner forked from the slot's template
            **{k: data[k] for k in ("judge_started_ahead", "runner_from_template") if k in data},
        },
        impl_event_median_ms=data.get("impl_event_median_ms"),
        eager_event_median_ms=data.get("eager_event_median_ms"),
        jailed=data.get("jailed"),
    )
    if outcome.result is None:
        fb.verdict, fb.reason, fb.message = decide(missing_result(outcome))  # type: ignore[assignment]
    if device == "cpu" and fb.verdict == "pass":
        fb.verdict = "preview"  # never a scored pass without a GPU
    return fb


def screen_request(request: GradeRequest, config: EvalConfig) -> Feedback | None:
    """Every backend's opening: a usage error (unknown problem or DSL) or a static-rule
    failure as feedback, else None (the request goes on to a judge)."""
    bad = request_problem(request, config.problem_paths)
    if bad is not None:
        return bad
    findings = check_source(request.source)
    return static_feedback(request, findings) if findings else None


def missing_result(outcome: ChildOutcome) -> OverLimit | Crashed | InfrastructureError:
    """What a grading child that gave no result is evidence of: a limit that stopped it, or a
    crash (the submission's when its code had run by then, else ours)."""
    phase = outcome.last_phase or "start"
    if outcome.memory_killed and phase == HOST_ANCHOR:  # the judge's own memory
        return InfrastructureError(
            "the judge's float64 anchor on the host passed its memory limit", reason=INFRA_OOM
        )
    if outcome.memory_killed:
        return OverLimit("memory", phase)
    if outcome.timed_out and phase == HOST_ANCHOR:
        return InfrastructureError(
            "the judge's float64 anchor on the host ran past its allowance (judge_extra_s)",
            reason=INFRA_JUDGE_CRASH,
        )
    if outcome.timed_out:
        return OverLimit("timeout", phase)
    submission_ran = phase not in ("start", "eager", "eager_timing", "eager_done")
    message = f"the grading child exited ({outcome.exit_code}) without a result during {phase}"
    return Crashed(message, submission_ran)


def grade_in_subprocess(
    request: GradeRequest, config: EvalConfig | None = None, device: str | None = None
) -> Feedback:
    """Grade one request in a fresh child process (blocking); used by ``mkb grade``."""
    config = config or EvalConfig()
    opening = screen_request(request, config)
    if opening is not None:
        return opening
    device = device or resolve_device(request.device)
    workdir = tempfile.mkdtemp(prefix="mkb-grade-")
    try:
        job = make_job(request, device, config, workdir)
        outcome = run_subprocess(job, config.limits(device), workdir, config.env)
        return feedback_from(request, outcome, device)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
