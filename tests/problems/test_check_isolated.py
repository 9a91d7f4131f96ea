"""The validator's one-child-per-problem mode reports what the in-process run reports."""

from __future__ import annotations

import pytest

from problems.check import select
from problems.check_isolated import check_in_child, child_command
from problems.check_report import CheckOptions


@pytest.mark.slow
def test_child_report_matches_the_in_process_report() -> None:
    from problems.check import check_problem

    problem = select(["p28"]).problems[0]
    opts = CheckOptions(device="cpu", scale="smoke", draws=2, seed=7)
    child = check_in_child(problem, opts)
    here = check_problem(problem, opts)
    assert child.passed and here.passed
    assert [c.as_dict() for c in child.checks] == [c.as_dict() for c in here.checks]
    assert child.path == str(problem.path)


@pytest.mark.slow
def test_a_child_that_cannot_report_becomes_the_problems_error(tmp_path) -> None:
    problem = select(["p28"]).problems[0]
    opts = CheckOptions(device="no-such-device", scale="smoke", draws=2)
    report = check_in_child(problem, opts)
    assert not report.passed
    assert "child process exited 2" in (report.error or "")
    assert "--in-process" in child_command(problem, opts)


def test_children_run_side_by_side_and_a_starved_one_runs_again_alone() -> None:
    import threading

    from problems.check_isolated import check_in_children
    from problems.check_report import ProblemReport

    problems = select(["p28", "p36", "p25"]).problems
    opts = CheckOptions(device="cpu", scale="smoke", draws=2)
    running: list[int] = []
    calls: list[tuple[str, int]] = []
    lock = threading.Lock()
    gate = threading.Barrier(2, timeout=5)

    def child(problem, _opts) -> ProblemReport:
        with lock:
            running.append(1)
            calls.append((problem.id, len(running)))
        first = [c[0] for c in calls].count(problem.id) == 1
        if problem.id in ("p28", "p36") and first:
            gate.wait()  # these two really run at once
        with lock:
            running.pop()
        starved = problem.id == "p36" and sum(c[0] == "p36" for c in calls) == 1
        error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" if starved else None
        return ProblemReport(problem.id, problem.slug, str(problem.path), error=error)

    order = [p.id for p in problems]
    reports = check_in_children(problems, opts, jobs=2, child=child)
    assert [r.id for r in reports] == order  # the caller's order, not completion order
    assert all(r.passed for r in reports)
    assert [c[0] for c in calls].count("p36") == 2  # checked again after running out of memory
    assert calls[-1] == ("p36", 1)  # ... alone


@pytest.mark.slow
def test_jobs_on_the_command_line_check_each_problem_in_a_child(capsys) -> None:
    from problems.check import main

    assert main(["p28", "p36", "--jobs", "2", "--draws", "2"]) == 0
    out = capsys.readouterr().out
    assert "2/2 problems passed" in out
    assert main(["p28", "--jobs", "0"]) == 2
