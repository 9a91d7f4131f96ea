"""Feedback as the agent reads it after `submit`."""

from __future__ import annotations

from engine.attempts.feedback_text import agent_ok, format_feedback
from engine.grading.api import Feedback, Finding


def test_a_failure_names_the_reason_rule_and_failing_output() -> None:
    feedback = Feedback(
        verdict="fail",
        reason="correctness.tolerance",
        findings=[Finding("rule.other_language", "imports triton", line=3)],
        draws=[
            {"kind": "correctness", "index": 0, "passed": True, "outputs": []},
            {
                "kind": "correctness",
                "index": 1,
                "passed": False,
                "outputs": [{"index": 0, "passed": False, "name": "out", "detail": "NaN"}],
            },
        ],
        log_tail="x" * 5000,
    )
    text = format_feedback(feedback, 2, 10)
    lines = text.splitlines()
    assert lines[0] == "=== Feedback for submission 2 of 10 ===" and lines[1] == "verdict: FAIL"
    assert "rule rule.other_language (line 3): imports triton" in lines
    assert "correctness 1: ok" in lines and "correctness 2: FAILED out: NaN" in lines
    assert len(text) < 2600  # the log tail is cut to its last 2,000 characters
    assert not agent_ok(feedback)


def test_pass_and_preview_report_times_and_exit_status() -> None:
    passed = Feedback(verdict="pass", impl_median_ms=0.08, eager_median_ms=1.2, speedup=15.0)
    text = format_feedback(passed, 1, 10)
    assert "your median: 0.0800 ms" in text and "speedup: 15.00x" in text
    assert agent_ok(passed)
    preview = Feedback(verdict="preview", device="cpu (preview)")
    assert "never a scored pass" in format_feedback(preview, 1, 10) and agent_ok(preview)
    assert not agent_ok(Feedback(verdict="preview", reason="correctness.tolerance"))
    assert not agent_ok(Feedback(verdict="error", reason="infra.timeout"))


def test_gpu_checks_are_reported() -> None:
    feedback = Feedback(verdict="pass", dsl_launches_per_call=2.0, bypass="outputs_failed",
                        kernel_audit={"status": "confirmed"}, speedup=1.5)
    lines = format_feedback(feedback, 1, 10).splitlines()
    assert "DSL launches per call: 2" in lines and "bypass test: outputs_failed" in lines
    assert "kernel audit (profiler): confirmed" in lines


def test_speed_of_light_and_flags_are_reported() -> None:
    feedback = Feedback(verdict="pass", impl_median_ms=0.2, sol_ms=0.05,
                        flags=["sol.faster_than_sol"])
    lines = format_feedback(feedback, 1, 10).splitlines()
    assert "speed of light on this GPU: 0.0500 ms (your median reaches 25.0% of it)" in lines
    assert any(line.startswith("flag: faster than the speed of light") for line in lines)
