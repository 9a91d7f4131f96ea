"""Feedback as the agent reads it in its terminal."""

from __future__ import annotations

from engine.grading.api import Feedback

VERDICT_WORDS = {
    "pass": "PASS",
    "fail": "FAIL",
    "preview": "PREVIEW (CPU only, no GPU: never a scored pass; CPU times are not GPU times)",
    "error": "GRADER ERROR (infrastructure; this submission was not counted)",
}


FLAG_WORDS = {
    "sol.faster_than_sol": "faster than the speed of light, which is impossible: the result is "
    "marked for review (a grading bug or a cheat)",
    "kernel_audit.unconfirmed": "the profiler saw none of the DSL's compiled kernels run",
    "timing.judge_floor": "the runner's own timing figure was below what the judge's clock "
    "allows, so the time was taken from the judge's clock instead",
    "timing.mismatch": "the runner's own timing figure disagreed with the judge's clock "
    "(CPU preview: recorded, not enforced)",
}


def agent_ok(feedback: Feedback) -> bool:
    """Whether ``submit`` should exit 0: a pass, or a preview whose outputs were correct."""
    return feedback.verdict == "pass" or (feedback.verdict == "preview" and not feedback.reason)


def format_feedback(feedback: Feedback, n: int, limit: int) -> str:
    """A compact multi-line report of one grading."""
    lines = [f"=== Feedback for submission {n} of {limit} ==="]
    lines.append(f"verdict: {VERDICT_WORDS.get(feedback.verdict, feedback.verdict)}")
    if feedback.device:
        lines.append(f"device: {feedback.device}")
    if feedback.reason:
        lines.append(f"reason: {feedback.reason}")
    if feedback.message:
        lines.append(f"message: {feedback.message}")
    if feedback.import_ok is False and feedback.import_error:
        lines.append(f"import error: {feedback.import_error}")
    for finding in feedback.findings:
        where = f" (line {finding.line})" if finding.line else ""
        lines.append(f"rule {finding.code}{where}: {finding.message}")
    for i, draw in enumerate(feedback.draws, 1):
        lines.append(_draw_line(i, draw))
    if feedback.impl_median_ms is not None:
        lines.append(f"your median: {feedback.impl_median_ms:.4f} ms")
    if feedback.eager_median_ms is not None:
        lines.append(f"eager reference median: {feedback.eager_median_ms:.4f} ms")
    if feedback.speedup is not None:
        lines.append(f"speedup: {feedback.speedup:.2f}x")
    if feedback.sol_ms is not None:
        share = feedback.pct_of_sol
        lines.append(f"speed of light on this GPU: {feedback.sol_ms:.4f} ms"
                     + (f" (your median reaches {share:.1f}% of it)" if share else ""))
    for flag in feedback.flags:
        lines.append(f"flag: {FLAG_WORDS.get(flag, flag)}")
    if feedback.dsl_launches_per_call is not None:
        lines.append(f"DSL launches per call: {feedback.dsl_launches_per_call:g}")
    if feedback.bypass:
        lines.append(f"bypass test: {feedback.bypass}")
    if feedback.kernel_audit:
        lines.append(f"kernel audit (profiler): {feedback.kernel_audit.get('status')}")
    if feedback.log_tail:
        lines.append("log tail:\n" + feedback.log_tail[-2000:])
    return "\n".join(lines)


def _draw_line(i: int, draw: dict) -> str:
    """One correctness draw: ``correctness 1: ok`` or the failing outputs' details."""
    label = f"{draw.get('kind', 'draw')} {int(draw.get('index', i - 1)) + 1}"
    if draw.get("passed"):
        return f"{label}: ok"
    details = [draw.get("structure") or draw.get("detail") or ""]
    for out in draw.get("outputs") or []:
        if not out.get("passed"):
            name = out.get("name") or f"output {out.get('index')}"
            details.append(f"{name}: {out.get('detail') or 'failed'}")
    return f"{label}: FAILED {'; '.join(d for d in details if d)}".rstrip()
