"""Pure render helpers: filters, elapsed clocks, plain-text safety, feedback, diffs."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from rich.console import Console
from rich.text import Text

from screens import render
from storage.queries import AttemptRow, StepRow, SubmissionRow


def plain(renderable: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def attempt(**changes: object) -> AttemptRow:
    base = AttemptRow(
        id=7, experiment_id="e", plan_key="k", model="m", problem_id="p28", family="MLP & Norm",
        dsl="cute", arm="solo_cute", replicate=1, round=0, variant="", source_attempt_id=None,
        attached_skill_id=None, state="running", outcome=None, reason=None, speedup=None,
        impl_median_ms=None, eager_median_ms=None, best_speedup=2.5, submissions_used=3,
        tries=1, budget_s=2400.0, task_hash="", skill_hash="", tokens_in=0, tokens_out=0,
        cost_usd=0.0, agent_seconds=0.0, error=None,
        started_at="2026-01-01T11:50:00+00:00", ended_at=None, created_at="", updated_at="")
    return dataclasses.replace(base, **changes)


def test_elapsed_uses_the_given_clock_and_budget() -> None:
    now = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    assert render.elapsed_text(attempt(), now) == "10:05 / 40:00"
    done = attempt(ended_at="2026-01-01T13:00:00+00:00", budget_s=600)
    assert render.elapsed_text(done, now) == "1:10:00 / 10:00"
    assert render.elapsed_text(attempt(started_at=None), now) == "- / 40:00"


def test_attempt_cells_follow_the_column_order() -> None:
    cells = render.attempt_cells(attempt(), datetime(2026, 1, 1, 12, tzinfo=UTC))
    assert len(cells) == len(render.ATTEMPT_COLUMNS)
    assert [c.plain for c in cells] == ["7", "m", "p28", "cute", "solo_cute", "running",
                                        "10:00 / 40:00", "3", "-", "2.50x"]


def test_agent_text_with_markup_is_rendered_literally() -> None:
    step = StepRow(id=1, attempt_id=1, try_number=1, step_index=0, source="agent",
                   analysis="[bold]x[/bold] and [/]", plan="", keystrokes="ls [red]\n",
                   terminal_output="[/]", message="", tokens_in=0, tokens_out=0, created_at="")
    out = plain(render.step_renderable(step))
    assert "[bold]x[/bold] and [/]" in out
    assert "ls [red]" in out and "terminal: [/]" in out


def test_submission_feedback_shows_error_against_allowance() -> None:
    import json

    fb = {"verdict": "fail", "reason": "correctness.tolerance", "import_ok": True,
          "findings": [{"code": "rule.other_language", "message": "triton [x]", "line": 3}],
          "draws": [{"kind": "draw", "index": 1, "passed": False, "structure": "",
                     "outputs": [{"index": 0, "name": "out", "kind": "float", "passed": False,
                                  "max_error": 0.25, "allowance": 0.001,
                                  "reference_error": 0.0003, "detail": ""}]}],
          "timings_s": {"import": 2.0}, "bypass": "outputs_failed",
          "kernel_audit": {"status": "confirmed", "dsl_kernel_runs": 1},
          "sol_ms": 0.05, "impl_median_ms": 0.2, "flags": ["sol.faster_than_sol"]}
    sub = SubmissionRow(id=1, attempt_id=1, try_number=1, purpose="submission", n=2, source="",
                        source_hash="", state="done", verdict="fail",
                        reason="correctness.tolerance", speedup=None, impl_median_ms=None,
                        eager_median_ms=None, feedback_json=json.dumps(fb), submitted_at="",
                        graded_at="")
    out = plain(render.submission_renderable(sub))
    assert "#2 submission" in out and "fail" in out
    assert "error 0.25 > allowance 0.001" in out
    assert "reason: correctness.tolerance" in out
    assert "rule rule.other_language: triton [x] (line 3)" in out
    assert "import: ok" in out and "import 2.0s" in out
    assert "bypass outputs_failed" in out and "kernel audit confirmed" in out
    assert "25.0% of SOL" in out and "flag sol.faster_than_sol" in out


def test_diff_marks_changed_lines_only() -> None:
    left, right = render.diff_texts("a\nb\nc", "a\nB\nc\nd")
    assert left.plain == "a\nb\nc\n" and right.plain == "a\nB\nc\nd\n"
    styled = {right.plain[s.start:s.end].strip() for s in right.spans if s.style == "green"}
    assert styled == {"B", "d"}
    assert {left.plain[s.start:s.end].strip() for s in left.spans} == {"b"}
    assert isinstance(left, Text)
