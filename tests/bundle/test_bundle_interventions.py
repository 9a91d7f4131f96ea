"""Notes, exclusions and interventions travel in a bundle: export → restore keeps them."""

from __future__ import annotations

from pathlib import Path

from app.cli import main
from engine.analysis.outcomes import from_store
from engine.bundle.content import load_bundle
from engine.bundle.report import _intervention_line, intervention_lines
from engine.bundle.restore import restore
from storage import controls, queries
from storage.db import immediate, open_db


def _by_key(db: object, experiment_id: str) -> dict[int, str]:
    return {a.id: a.plan_key for a in queries.attempts_for_experiment(db, experiment_id)}


def test_export_then_restore_keeps_notes_exclusions_and_interventions(
    graded_db: Path, tmp_path: Path
) -> None:
    db = open_db(graded_db)
    first, second = queries.attempts_for_experiment(db, "bt")[:2]
    with immediate(db):
        controls.submit(db, "bt", "note", actor="alice", attempt_id=first.id,
                        args={"text": "looped on one compile error"})
        controls.submit(db, "bt", "exclude", actor="alice", attempt_id=first.id,
                        reason="found a hole in the task")
        db.execute(  # an engine's applied stop
            "INSERT INTO control_commands (experiment_id, attempt_id, action, reason, actor, "
            "state, outcome, created_at, applied_at) VALUES ('bt', ?, 'stop', 'hung', 'bob', "
            "'applied', 'the attempt was stopped while running', 'x', 'x')", [second.id])
    before = [(c.action, _by_key(db, "bt")[c.attempt_id or 0], c.reason, c.actor, c.state,
               c.outcome, c.args) for c in controls.for_experiment(db, "bt")]
    db.conn.close()
    out = tmp_path / "bt.mkb"
    assert main(["bundle", "export", "bt", "--db", str(graded_db), "--out", str(out)]) == 0
    bundle = load_bundle(out)
    assert len(bundle.interventions) == 3

    target = open_db(tmp_path / "copy.sqlite")
    with immediate(target):
        restore(target, bundle, "copy", origin="bundle:x", name="copy", regrade=False)
    keys = _by_key(target, "copy")
    after = [(c.action, keys[c.attempt_id or 0], c.reason, c.actor, c.state, c.outcome, c.args)
             for c in controls.for_experiment(target, "copy")]
    assert after == before
    excluded = from_store(target, "copy").excluded
    assert [(keys[e["attempt_id"]], e["reason"]) for e in excluded] == [
        (first.plan_key, "found a hole in the task")]
    target.conn.close()


def test_a_regrade_report_lists_the_bundles_interventions(
    graded_db: Path, tmp_path: Path
) -> None:
    db = open_db(graded_db)
    first = queries.attempts_for_experiment(db, "bt")[0]
    with immediate(db):
        controls.submit(db, "bt", "exclude", actor="alice", attempt_id=first.id,
                        reason="found a hole")
    db.conn.close()
    out = tmp_path / "bt.mkb"
    assert main(["bundle", "export", "bt", "--db", str(graded_db), "--out", str(out)]) == 0
    bundle = load_bundle(out)
    lines = intervention_lines(
        {"interventions": [_intervention_line(c) for c in bundle.interventions]})
    assert lines == [
        "Operators' interventions in the bundle (1):",
        f"  exclude attempt {first.id} by alice (found a hole): applied "
        "(excluded from the analysis)",
    ]
