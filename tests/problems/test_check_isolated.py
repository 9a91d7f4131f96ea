"""The validator's one-child-per-problem mode reports what the in-process run reports."""

from __future__ import annotations

from problems.check import select
from problems.check_isolated import check_in_child, child_command
from problems.check_report import CheckOptions


def test_child_report_matches_the_in_process_report() -> None:
    from problems.check import check_problem

    problem = select(["p28"]).problems[0]
    opts = CheckOptions(device="cpu", scale="smoke", draws=2, seed=7)
    child = check_in_child(problem, opts)
    here = check_problem(problem, opts)
    assert child.passed and here.passed
    assert [c.as_dict() for c in child.checks] == [c.as_dict() for c in here.checks]
    assert child.path == str(problem.path)


def test_a_child_that_cannot_report_becomes_the_problems_error(tmp_path) -> None:
    problem = select(["p28"]).problems[0]
    opts = CheckOptions(device="no-such-device", scale="smoke", draws=2)
    report = check_in_child(problem, opts)
    assert not report.passed
    assert "child process exited 2" in (report.error or "")
    assert "--in-process" in child_command(problem, opts)
