"""`mkb import mkb-run`: a public MetaKernelBench result store (built in its own layout) as
an experiment whose analysis reproduces the run's own snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import run_fixtures

from app.cli import main
from storage import provenance, queries
from storage.db import open_db

EXP = "mkb-run-openrouter-acme-kernel-model-1"


def _import(run: Path, db: Path, *extra: str) -> int:
    return main(["import", "mkb-run", str(run), "--db", str(db), *extra])


def test_the_import_reproduces_the_runs_snapshot_in_mkb_analyze(
    mkb_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "store.sqlite"
    assert _import(mkb_run_dir, db_path) == 0
    printed = capsys.readouterr().out
    assert "reproduced exactly" in printed and "attempts 15" in printed
    assert main(["analyze", "--db", str(db_path), "--json", "--draws", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    snapshot = json.loads((mkb_run_dir / "results.json").read_text())["overall"]
    ladder = {row["subset"]: row for row in report["ladder"]}
    pairs = [
        (snapshot, ladder["all"]),
        (snapshot["with_skill"], ladder["source_wrote_skill"]),
        (snapshot["by_source_verdict"]["passed"], ladder["source_passed"]),
        (snapshot["by_source_verdict"]["failed"], ladder["source_failed"]),
    ]
    for theirs, ours in pairs:
        for part, mine in (("base", "base"), ("skill", "skill"), ("lift", "difference")):
            for key, value in theirs[part].items():
                if key == "S":  # a mean of five rates, summed in another order
                    assert ours[mine][key] == pytest.approx(value, abs=1e-9)
                else:
                    assert ours[mine][key] == value, (part, key)
    assert ladder["all"]["n"] == snapshot["n_resolved"] == 6
    assert report["experiment"]["name"] == "openrouter/acme/kernel-model-1 [mkb-run import]"
    db = open_db(db_path, readonly=True)
    exp = queries.experiment(db, EXP)
    stored = provenance.latest_report(db, EXP, "import")
    db.conn.close()
    assert exp is not None and exp.origin == f"mkb-run:{mkb_run_dir.resolve()}"
    assert stored is not None and stored.payload["reproduction"]["reproduced"]
    assert stored.payload["reproduction"]["checked"] > 500


def test_every_record_lands_where_the_analysis_and_the_tui_read_it(
    mkb_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "store.sqlite"
    assert _import(mkb_run_dir, db_path) == 0
    db = open_db(db_path, readonly=True)
    attempts = {
        (a.problem_id, a.replicate, a.arm): a for a in queries.attempts_for_experiment(db, EXP)
    }
    assert len(attempts) == 15 and {a.family for a in attempts.values()} == {
        "Attention",
        "MLP & Norm",
    }
    skipped, errored = attempts[("p01", 2, "cute2tirx_skill")], attempts[("p28", 1, "solo_tirx")]
    assert (skipped.state, skipped.outcome) == ("skipped", "skipped")
    assert errored.state == "interrupted" and "EnvironmentStartTimeoutError" in errored.error
    failed, passed = attempts[("p01", 1, "solo_tirx")], attempts[("p01", 1, "solo_cute")]
    assert (failed.outcome, failed.reason) == ("fail", "mkb-run.incorrect")
    assert (passed.outcome, passed.speedup, passed.impl_median_ms, passed.eager_median_ms) == (
        "pass",
        2.0,
        0.5,
        1.0,
    )
    assert passed.tokens_in == 1000 and passed.cost_usd == pytest.approx(0.01)
    steps = queries.steps(db, passed.id)
    assert [s.keystrokes for s in steps] == ["", "cat problem.py\n"]
    assert queries.latest_skill(db, passed.id).text.startswith("- measured")  # type: ignore
    assert queries.implementation(db, passed.id).startswith("def solve")  # type: ignore
    treatment = attempts[("p01", 1, "cute2tirx_skill")]
    assert treatment.source_attempt_id == passed.id and treatment.attached_skill_id is not None
    subs = queries.submissions(db, attempts[("p28", 2, "solo_cute")].id)
    assert [(s.purpose, s.n, s.verdict) for s in subs] == [
        ("submission", 1, "pass"),
        ("final", 1, "pass"),
    ]
    derived = queries.submissions(db, attempts[("p28", 1, "cute2tirx_skill")].id)[-1]
    assert derived.feedback["times_derived"] is True  # type: ignore[index]
    comps = queries.comparisons(db, EXP)
    assert len(comps) == 7 and sum(c.skipped for c in comps) == 1
    db.conn.close()


def test_records_it_does_not_understand_are_reported_never_dropped(
    mkb_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = next(mkb_run_dir.glob("problems/01_*/*_r1_solo_cutedsl")) / "record.json"
    data = json.loads(record.read_text())
    data["rewards"]["sol_fraction"] = 0.4
    data["grader_version"] = 7
    record.write_text(json.dumps(data))
    (mkb_run_dir / "problems" / "99_no_such_problem").mkdir()
    (mkb_run_dir / "README.txt").write_text("notes")
    assert _import(mkb_run_dir, tmp_path / "store.sqlite", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    unknown = {Path(u["path"]).name: u["why"] for u in report["unknown"]}
    assert "notes.txt" in unknown and "README.txt" in unknown
    assert "record.json#rewards.sol_fraction" in unknown
    assert "record.json#grader_version" in unknown
    assert any("99_no_such_problem" in note for note in report["notes"])
    aside = report["set_aside"]
    assert aside["archived (superseded) trial"]["count"] == 1
    assert aside["submission not counted by the run (limit reached)"]["count"] == 1


def test_a_snapshot_the_import_does_not_reproduce_fails_naming_the_figure(
    mkb_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mkb_run_dir / "results.json"
    snapshot = json.loads(path.read_text())
    snapshot["overall"]["by_direction"]["cutedsl2tirx"]["skill"]["R@2"] += 0.25
    path.write_text(json.dumps(snapshot))
    assert _import(mkb_run_dir, tmp_path / "store.sqlite") == 1
    text = capsys.readouterr().out
    assert "DIFFERS" in text and "by_direction.cutedsl2tirx.skill.R@2: differs by 0.25" in text


def test_a_second_import_needs_another_id(
    mkb_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "store.sqlite"
    assert _import(mkb_run_dir, db_path) == 0
    assert _import(mkb_run_dir, db_path) == 2
    assert "give another --id" in capsys.readouterr().err
    assert _import(mkb_run_dir, db_path, "--id", "second") == 0
    assert main(["import", "mkb-run", str(run_fixtures.MODEL), "--db", str(db_path)]) == 2
