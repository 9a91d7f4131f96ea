"""A grading the grader failed is no result: an out-of-memory judge is tried once and its
attempt stored ``ungraded`` (``infra.oom``), a transient error is tried again, a pass without a
valid runtime is a ``timing.invalid`` failure; their comparisons stay unresolved and the
analysis counts them apart from failures. Through the real scheduler, store and CLI, with the
simulated agent and grader (no GPU here: the judge's OOM is raised as torch names it)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from app.cli import main
from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage.db import open_db
from storage.store import Store

CONFIG = """
[experiment]
name = "faulty"
problems = ["p28", "p36", "p02"]
agent = "simulated"
grading = "simulated"
max_submissions = 0

[agent]
blank_skill_rate = 0.0
final_runtime_ms = 1.0

[grading]
final_repeats = 2

[[models]]
name = "sim/a"
"""
OOM_MESSAGE = "CUDA out of memory. Tried to allocate 15.82 GiB (79.18 GiB card)"


class OutOfMemoryError(RuntimeError):
    """What torch raises when the judge's own allocation fails (torch.OutOfMemoryError)."""


class FaultyGrader:
    """The simulated grader with a faulty judge for the finals: out of memory on p28, a lost
    worker on the first try of each p36 final and a NaN runtime in its repeated final, a pass
    with a zero runtime on p02."""

    name = "faulty"

    def __init__(self) -> None:
        self.inner = SimulatedBackend()
        self.calls: Counter[tuple[str, str]] = Counter()

    async def grade(self, request: GradeRequest) -> Feedback:
        key = (request.problem_id, request.request_id)
        self.calls[key] += 1
        if request.problem_id == "p28":
            return Feedback.decided(request, OutOfMemoryError(OOM_MESSAGE))
        first_final = request.request_id.endswith("-final") and self.calls[key] == 1
        if request.problem_id == "p36" and first_final:
            return Feedback("error", "crash", "grading worker died: connection reset by peer")
        feedback = await self.inner.grade(request)
        if request.problem_id == "p36" and request.request_id.endswith("-r2"):
            return dataclasses.replace(feedback, impl_median_ms=float("nan"))
        if request.problem_id == "p02":
            return dataclasses.replace(feedback, impl_median_ms=0.0)
        return feedback

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, FaultyGrader]:
    path = tmp_path_factory.mktemp("faulty") / "faulty.sqlite"
    grader = FaultyGrader()
    config = parse_config(CONFIG)
    with Store(path) as store:
        import asyncio

        summary = asyncio.run(
            Engine(store, config, SimulatedRunner(0, 0.0, final_runtime_ms=1.0), grader).run()
        )
    return path, summary, grader


def _rows(path: Path) -> tuple[list[queries.AttemptRow], list[queries.ComparisonRow]]:
    db = open_db(path, readonly=True)
    try:
        return (
            queries.attempts_for_experiment(db, "faulty"),
            queries.comparisons(db, "faulty"),
        )
    finally:
        db.conn.close()


def test_an_out_of_memory_judge_is_tried_once_and_leaves_the_attempt_ungraded(
    faulty_run: tuple[Path, object, FaultyGrader],
) -> None:
    path, summary, grader = faulty_run
    attempts, comps = _rows(path)
    p28 = [a for a in attempts if a.problem_id == "p28"]
    assert len(p28) == 4
    assert {(a.state, a.outcome, a.reason) for a in p28} == {("finished", "ungraded", "infra.oom")}
    assert all(n == 1 for (p, _), n in grader.calls.items() if p == "p28")  # one try only
    assert all(not c.resolved and c.rho is None for c in comps if c.problem_id == "p28")
    assert summary.ungraded == {"infra.oom": 4, "timing.invalid": 4}  # type: ignore[attr-defined]


def test_a_transient_grader_error_is_tried_again(
    faulty_run: tuple[Path, object, FaultyGrader],
) -> None:
    path, _, grader = faulty_run
    attempts, comps = _rows(path)
    p36 = [a for a in attempts if a.problem_id == "p36"]
    assert {a.outcome for a in p36} == {"preview"}
    finals = [n for (p, r), n in grader.calls.items() if p == "p36" and r.endswith("-final")]
    assert finals == [2, 2, 2, 2]
    # the repeated finals' NaN runtimes were refused (timing.invalid), not in the median
    assert all(a.impl_median_ms is not None and 0.5 < a.impl_median_ms < 2.0 for a in p36)
    assert all(c.resolved for c in comps if c.problem_id == "p36")


def test_a_pass_without_a_valid_runtime_is_a_failed_grading_never_a_pass(
    faulty_run: tuple[Path, object, FaultyGrader],
) -> None:
    path, _, _ = faulty_run
    attempts, comps = _rows(path)
    p02 = [a for a in attempts if a.problem_id == "p02"]
    assert {(a.outcome, a.reason) for a in p02} == {("ungraded", "timing.invalid")}
    db = open_db(path, readonly=True)
    try:
        graded = db.execute(
            "SELECT s.verdict, s.reason, count(g.id) FROM submissions s JOIN attempts a ON "
            "a.id = s.attempt_id JOIN grading_jobs g ON g.submission_id = s.id "
            "WHERE a.problem_id = 'p02' GROUP BY s.id"
        ).fetchall()
    finally:
        db.conn.close()
    assert graded == [("fail", "timing.invalid", 1)] * 4  # stored so, and not retried
    assert all(not c.resolved for c in comps if c.problem_id == "p02")


def test_mkb_analyze_counts_ungraded_attempts_apart_from_failures(
    faulty_run: tuple[Path, object, FaultyGrader], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = faulty_run
    assert main(["analyze", "--db", str(path), "--draws", "50"]) == 0
    assert (
        "Ungraded (grader's fault, not counted as failures): 8, by reason: infra.oom 4, "
        "timing.invalid 4" in capsys.readouterr().out
    )
    assert main(["analyze", "--db", str(path), "--json", "--draws", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["no_result"]["ungraded_by_reason"] == {"infra.oom": 4, "timing.invalid": 4}
    assert report["no_result"]["repeats_by_reason"] == {"timing.invalid": 4}  # p36's NaN repeats
    assert sum(a["n"] for a in report["arms"]) == 4  # p36's four: none of p28's or p02's
    assert sum(a["passed"] for a in report["arms"]) == 4  # no failure counted
    assert {c["problem"] for c in report["comparisons"]} == {"p36"}
