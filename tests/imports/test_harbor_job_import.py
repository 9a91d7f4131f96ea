"""`mkb import harbor-job`: a Harbor job directory (written by Harbor's own models) as an
experiment: arms from attached instructions, replicates in start order, what is not a
MetaKernelBench trial reported."""

from __future__ import annotations

import json
from pathlib import Path

import job_fixtures
import pytest

from app.cli import main
from storage import queries
from storage.db import open_db

EXP = "harbor-job-openrouter-acme-kernel-model-1"


def test_a_harbor_job_becomes_an_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = job_fixtures.build_job(tmp_path / "jobs" / "mkb-job")
    db_path = tmp_path / "store.sqlite"
    assert main(["import", "harbor-job", str(job), "--db", str(db_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["imported"]["attempts"] == 9 and report["experiment_id"] == EXP
    unknown = {
        Path(u["path"]).parent.name if u["path"].endswith(".json") else Path(u["path"]).name: u[
            "why"
        ]
        for u in report["unknown"]
    }
    assert any("hello-world" in name for name in unknown)  # not a MetaKernelBench task
    assert report["set_aside"]["trial without result.json (not finished)"]["count"] == 1
    db = open_db(db_path, readonly=True)
    rows = {(a.arm, a.replicate): a for a in queries.attempts_for_experiment(db, EXP)}
    assert sorted(rows) == [
        ("cute2tirx_skill", 1),
        ("cute2tirx_skill", 2),
        ("solo_cute", 1),
        ("solo_cute", 2),
        ("solo_cute", 3),
        ("solo_tirx", 1),
        ("solo_tirx", 2),
        ("tirx2cute_skill", 1),
        ("tirx2cute_skill", 2),
    ]
    assert (rows[("solo_cute", 1)].outcome, rows[("solo_cute", 1)].speedup) == ("pass", 2.0)
    assert rows[("solo_cute", 2)].outcome == "fail"
    assert rows[("solo_cute", 3)].state == "interrupted"  # EnvironmentStartTimeoutError
    timed_out = rows[("tirx2cute_skill", 1)]  # timed out, and its kernel was still graded
    assert (timed_out.state, timed_out.outcome, timed_out.speedup) == ("finished", "pass", 1.0)
    assert rows[("cute2tirx_skill", 1)].impl_median_ms == 0.25
    assert rows[("solo_tirx", 1)].tokens_in == 2000 and rows[("solo_tirx", 1)].agent_seconds == 150
    assert len(queries.steps(db, rows[("solo_tirx", 1)].id)) == 2
    comps = queries.comparisons(db, EXP)
    assert len(comps) == 4 and all(c.resolved and c.rho is not None for c in comps)
    exp = queries.experiment(db, EXP)
    db.conn.close()
    assert exp is not None and exp.origin.startswith("harbor-job:")
    assert main(["analyze", "--db", str(db_path), "--experiment", EXP, "--draws", "100"]) == 0
    assert "[harbor-job import]" in capsys.readouterr().out


def test_not_a_job_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert (
        main(["import", "harbor-job", str(tmp_path / "empty"), "--db", str(tmp_path / "s.sqlite")])
        == 2
    )
    assert "not a Harbor job directory" in capsys.readouterr().err
