"""A store written before ``ungraded`` existed, in the situation of the 2026-12-07 H100 run
(every grading of p51's finals ended ``judge error: OutOfMemoryError``; the attempts were
stored ``fail``/``crash`` and both comparisons ``neutral``): a read-only analysis counts them
as ungraded (the grader's fault), never as failures, and migration m009 stores them
``ungraded``/``infra.oom`` with their comparisons unresolved. A submission that crashed on
its own (a graded ``fail``/``crash``) stays a failure."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlite_utils import Database

from app.cli import main
from storage import queries, writes
from storage.db import connect, open_db
from storage.migrations import migrations

OOM = (
    "judge error: OutOfMemoryError: CUDA out of memory. Tried to allocate 15.82 GiB. GPU 0 has "
    "a total capacity of 79.18 GiB of which 12.31 GiB is free."
)
ARMS = (("solo_cute", "cute"), ("solo_tirx", "tirx"), ("cute2tirx_skill", "tirx"),
        ("tirx2cute_skill", "cute"))
DIRECTIONS = (("cute->tirx", "solo_cute", "solo_tirx", "cute2tirx_skill"),
              ("tirx->cute", "solo_tirx", "solo_cute", "tirx2cute_skill"))


def _final(db: Database, aid: int, feedbacks: list[dict[str, object]]) -> None:
    sub = writes.add_submission(db, aid, 1, f"# final {aid}\n", purpose="final")
    for feedback in feedbacks:
        writes.finish_grading_job(db, writes.start_grading_job(db, sub, "local"), feedback)


def build_legacy(path: Path) -> None:
    """p51 graded by an out-of-memory judge (3 tries each), p02 passing, p28 with one
    submission that crashed on its own (a graded failure), at the schema before m009."""
    db = connect(path)
    migrations.apply(db, stop_before="m009_add_ungraded_outcome")
    with db.atomic():
        writes.create_experiment(db, "sol", "solutions", grading_backend="local")
        for problem in ("p51", "p02", "p28"):
            ids = {}
            for arm, dsl in ARMS:
                aid = writes.ensure_attempt(db, "sol", f"{problem}|{arm}", model="ref",
                                            problem_id=problem, family="f", dsl=dsl, arm=arm)
                ids[arm] = aid
                writes.add_skill(db, "# skill\n- measure\n", attempt_id=aid)
                if problem == "p51":
                    _final(db, aid, [{"verdict": "error", "reason": "crash", "message": OOM}] * 3)
                    outcome, reason, impl = "fail", "crash", None
                elif problem == "p28" and arm == "solo_tirx":
                    _final(db, aid, [{"verdict": "fail", "reason": "crash", "message": "boom"}])
                    outcome, reason, impl = "fail", "crash", None
                else:
                    _final(db, aid, [{"verdict": "pass", "impl_median_ms": 1.0 + aid / 100,
                                      "eager_median_ms": 2.0}])
                    outcome, reason, impl = "pass", None, 1.0 + aid / 100
                writes.update_attempt(db, aid, state="finished", outcome=outcome, reason=reason,
                                      impl_median_ms=impl, eager_median_ms=impl and 2.0, tries=1)
            for direction, src, base, treat in DIRECTIONS:
                writes.upsert_comparison(
                    db, "sol", model="ref", problem_id=problem, family="f", direction=direction,
                    replicate=1, round=1, source_attempt_id=ids[src],
                    baseline_attempt_id=ids[base], treatment_attempt_id=ids[treat], resolved=1,
                    skipped=0, rho=1.0, verdict="neutral")
    db.conn.close()


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    path = tmp_path / "legacy.sqlite"
    build_legacy(path)
    return path


def test_a_read_only_analysis_counts_the_graders_failures_apart(
    legacy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--db", str(legacy), "--json", "--draws", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["no_result"]["ungraded_by_reason"] == {"infra.oom": 4}
    assert sum(a["n"] for a in report["arms"]) == 8  # p02 and p28: none of p51's
    assert sum(a["n"] - a["passed"] for a in report["arms"]) == 1  # p28's own crash only
    assert "p51" not in {c["problem"] for c in report["comparisons"]}


def test_migration_stores_them_ungraded_with_their_comparisons_unresolved(legacy: Path) -> None:
    db = open_db(legacy)  # applies m009
    try:
        attempts = {a.plan_key: a for a in queries.attempts_for_experiment(db, "sol")}
        comps = queries.comparisons(db, "sol")
        p51 = {(a.outcome, a.reason) for k, a in attempts.items() if k.startswith("p51")}
        assert p51 == {("ungraded", "infra.oom")}
        assert (attempts["p28|solo_tirx"].outcome, attempts["p28|solo_tirx"].reason) == (
            "fail",
            "crash",
        )
        assert {(c.problem_id, c.resolved, c.verdict) for c in comps if c.problem_id == "p51"} == {
            ("p51", 0, None)
        }
        assert all(c.resolved for c in comps if c.problem_id != "p51")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute("UPDATE attempts SET outcome='bogus' WHERE plan_key='p02|solo_cute'")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.conn.close()
