"""One function decides the verdict from the evidence: each kind of evidence, its reason code
and its message, and the judge's own outcomes going through it."""

from __future__ import annotations

import json
import os

import pytest

from engine.grading.judge.job import evidence_of, run_job
from engine.grading.judge.runner_proc import RunnerDied, RunnerMemory, RunnerTimeout
from engine.grading.verdict import (
    PREVIEW_MESSAGE,
    BadRequest,
    Crashed,
    InfrastructureError,
    OverLimit,
    Passed,
    Rejected,
    decide,
)


def test_a_pass_is_scored_only_on_a_gpu() -> None:
    assert decide(Passed(cuda=True)) == ("pass", None, "scored pass")
    verdict, reason, message = decide(Passed(cuda=False))
    assert (verdict, reason) == ("preview", None)
    assert message == PREVIEW_MESSAGE and message.startswith("CPU PREVIEW:")


def test_a_rejection_fails_with_its_code_and_detail() -> None:
    evidence = Rejected("correctness.tolerance", "draw 2: out: error 1e-1 exceeds 3e-3")
    decision = decide(evidence)
    assert decision.verdict == "fail" and decision.reason == "correctness.tolerance"
    assert decision == ("fail", "correctness.tolerance", "draw 2: out: error 1e-1 exceeds 3e-3")


def test_our_own_failures_are_errors_never_a_pass() -> None:
    assert decide(InfrastructureError("the runner did not start: gone")) == (
        "error",
        "crash",
        "the runner did not start: gone",
    )
    assert decide(KeyError("p99")) == ("error", "crash", "judge error: KeyError: 'p99'")
    assert decide(BadRequest("unknown problem 'p99'")) == (
        "error",
        "usage",
        "unknown problem 'p99'",
    )


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (OverLimit("timeout"), ("fail", "timeout", "time limit exceeded")),
        (OverLimit("timeout", "timing"), ("fail", "timeout", "time limit exceeded during timing")),
        (OverLimit("memory"), ("fail", "memory", "killed for exceeding the memory limit")),
        (
            OverLimit("memory", "import"),
            ("fail", "memory", "killed for exceeding the memory limit during import"),
        ),
    ],
)
def test_a_limit_fails_the_submission(evidence: OverLimit, expected: tuple) -> None:
    assert decide(evidence) == expected


def test_a_death_is_the_submissions_only_once_it_ran() -> None:
    assert decide(Crashed("the runner died: gone", submission_ran=True)) == (
        "fail",
        "crash",
        "the runner died: gone",
    )
    assert decide(Crashed("the runner died: gone", submission_ran=False))[0] == "error"


def test_bad_evidence_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="OverLimit.limit"):
        OverLimit("cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="evidence"):
        decide("pass")  # type: ignore[arg-type]


def test_the_runners_ends_are_named_as_evidence() -> None:
    assert evidence_of(RunnerTimeout("late"), True) == OverLimit("timeout")
    assert evidence_of(RunnerMemory("big"), True) == OverLimit("memory")
    assert evidence_of(RunnerDied("gone"), False) == Crashed("the runner died: gone", False)
    rejected = Rejected("crash", "solve() raised: boom")
    assert evidence_of(rejected, True) is rejected


def _judged(job: dict) -> dict:
    read_fd, write_fd = os.pipe()
    try:
        run_job(job, write_fd)
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd) as lines:
        messages = [json.loads(line) for line in lines]
    assert all(m["nonce"] == job["nonce"] for m in messages)
    assert [m["kind"] for m in messages] == ["result"]
    return messages[0]["data"]


@pytest.mark.slow  # the judge's imports (torch, the catalog): seconds
def test_a_judge_that_cannot_start_reports_an_error_with_its_traceback() -> None:
    result = _judged({"nonce": "n" * 32, "problem_id": "p_no_such_problem", "device": "cpu"})
    assert result["verdict"] == "error" and result["reason"] == "crash"
    assert result["message"].startswith("judge error: ")
    assert "p_no_such_problem" in result["error"]
