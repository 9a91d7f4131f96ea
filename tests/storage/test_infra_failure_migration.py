"""A store written before m011 holds an attempt whose sandbox failed after its tries as
``fail``/``infrastructure``: counted as the agent's failure, its comparisons resolved. A
read-only analysis now counts it as no result (``infra.sandbox``), and m011 stores it
``ungraded`` with its comparisons unresolved; the agent's own failure stays a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from storage import queries, writes
from storage.db import connect, open_db
from storage.migrations import migrations

ARMS = (("solo_cute", "cute"), ("solo_tirx", "tirx"), ("cute2tirx_skill", "tirx"),
        ("tirx2cute_skill", "cute"))
DIRECTIONS = (("cute->tirx", "solo_cute", "solo_tirx", "cute2tirx_skill"),
              ("tirx->cute", "solo_tirx", "solo_cute", "tirx2cute_skill"))
# (problem, arm) -> (state, outcome, reason, error)
ENDS = {
    ("p02", "solo_tirx"): ("failed", "fail", "infrastructure", "SandboxError: bwrap died"),
    ("p28", "solo_tirx"): ("failed", "fail", "infrastructure", "scenario: endpoint down"),
    ("p36", "solo_tirx"): ("finished", "fail", "crash", None),  # the agent's own failure
}


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    path = tmp_path / "legacy.sqlite"
    db = connect(path)
    migrations.apply(db, stop_before="m011_ungraded_infrastructure_failures")
    with db.atomic():
        writes.create_experiment(db, "x", "x", grading_backend="local")
        for problem in ("p02", "p28", "p36", "p52"):
            ids = {}
            for arm, dsl in ARMS:
                aid = writes.ensure_attempt(db, "x", f"{problem}|{arm}", model="m",
                                            problem_id=problem, family="f", dsl=dsl, arm=arm)
                ids[arm] = aid
                state, outcome, reason, error = ENDS.get(
                    (problem, arm), ("finished", "pass", None, None))
                impl = 1.0 + aid / 100 if outcome == "pass" else None
                writes.update_attempt(db, aid, state=state, outcome=outcome, reason=reason,
                                      error=error, impl_median_ms=impl,
                                      eager_median_ms=impl and 2.0, tries=3)
            for direction, src, base, treat in DIRECTIONS:
                writes.upsert_comparison(
                    db, "x", model="m", problem_id=problem, family="f", direction=direction,
                    replicate=1, round=1, source_attempt_id=ids[src],
                    baseline_attempt_id=ids[base], treatment_attempt_id=ids[treat], resolved=1,
                    skipped=0, rho=1.0, verdict="neutral")
    db.conn.close()
    return path


def test_a_read_only_analysis_counts_our_failures_apart(
    legacy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--db", str(legacy), "--json", "--draws", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["no_result"]["ungraded_by_reason"] == {
        "infra.sandbox": 1, "infra.model_endpoint": 1}
    assert sum(a["n"] - a["passed"] for a in report["arms"]) == 1  # p36's own crash only


def test_migration_stores_them_ungraded_with_their_comparisons_unresolved(legacy: Path) -> None:
    db = open_db(legacy)  # applies m011
    try:
        attempts = {a.plan_key: a for a in queries.attempts_for_experiment(db, "x")}
        ends = {k: (a.outcome, a.reason) for k, a in attempts.items() if "solo_tirx" in k}
        assert ends == {
            "p02|solo_tirx": ("ungraded", "infra.sandbox"),
            "p28|solo_tirx": ("ungraded", "infra.model_endpoint"),
            "p36|solo_tirx": ("fail", "crash"),
            "p52|solo_tirx": ("pass", None),
        }
        unresolved = {(c.problem_id, c.direction) for c in queries.comparisons(db, "x")
                      if not c.resolved}
        # the arm is the baseline of cute->tirx; it is only the source of tirx->cute, whose
        # treatment ran and was graded
        assert unresolved == {("p02", "cute->tirx"), ("p28", "cute->tirx")}
    finally:
        db.conn.close()
