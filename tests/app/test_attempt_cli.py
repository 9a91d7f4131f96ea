"""`mkb attempt …` on a real store, and what exclusions and interventions do to `mkb analyze`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.cli import main
from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage.db import immediate, open_db
from storage.store import Store

CONFIG = """
[experiment]
name = "cli"
problems = ["p28"]
replicates = 2
agent = "simulated"
grading = "simulated"

[[models]]
name = "sim/a"
"""


@pytest.fixture
def run_db(tmp_path: Path) -> Path:
    path = tmp_path / "cli.sqlite"

    async def run() -> None:
        with Store(path) as store:
            runner = SimulatedRunner(submissions=1, blank_skill_rate=0.0)
            await Engine(store, parse_config(CONFIG), runner, SimulatedBackend()).run()

    asyncio.run(run())
    return path


def _analysis(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert main(["analyze", "--db", str(db), "--json", "--draws", "10", *extra]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _solo(db: Path) -> queries.AttemptRow:
    conn = open_db(db)
    rows = queries.attempts_for_experiment(conn, "cli")
    conn.conn.close()
    return next(r for r in rows if r.arm == "solo_cute" and r.replicate == 1)


def test_exclude_changes_analyze_and_include_restores_it(
    run_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _analysis(run_db, capsys)
    assert before["exclusion"]["excluded"] == 0
    solo = _solo(run_db)
    assert main(["attempt", "exclude", str(solo.id), "--reason", "found a hole",
                 "--db", str(run_db)]) == 0
    assert "excluded from the analysis" in capsys.readouterr().out
    after = _analysis(run_db, capsys)
    assert after["exclusion"]["excluded"] == 1
    assert after["exclusion"]["excluded_reasons"] == {"found a hole": 1}
    assert after["exclusion"]["excluded_attempts"][0]["attempt_id"] == solo.id
    # the solo cute attempt of replicate 1 feeds both directions' comparisons of it
    assert after["coverage"]["comparisons"] == before["coverage"]["comparisons"] - 2
    capsys.readouterr()
    assert main(["analyze", "--db", str(run_db)]) == 0
    assert "Excluded by operators: 1 attempts (1 × found a hole)" in capsys.readouterr().out
    assert main(["attempt", "include", str(solo.id), "--reason", "harmless",
                 "--db", str(run_db)]) == 0
    assert _analysis(run_db, capsys)["coverage"] == before["coverage"]


def test_engine_actions_without_an_engine_and_bad_input(
    run_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    solo = _solo(run_db)
    assert main(["attempt", "stop", str(solo.id), "--db", str(run_db)]) == 1
    assert "no engine holds this run" in capsys.readouterr().out
    assert main(["attempt", "exclude", str(solo.id), "--db", str(run_db)]) == 2
    assert "needs a reason" in capsys.readouterr().err
    assert main(["attempt", "retry", "99999", "--db", str(run_db)]) == 2
    assert "no attempt 99999" in capsys.readouterr().err
    assert main(["attempt", "extend", str(solo.id), "--db", str(run_db)]) == 2
    assert "--submissions" in capsys.readouterr().err
    assert main(["attempt", "note", str(solo.id), "\x1b[31mred\x1b[0m note",
                 "--db", str(run_db)]) == 0
    shown = capsys.readouterr().out
    assert "noted" in shown and "\x1b" not in shown


def test_intervened_comparisons_are_flagged_and_can_be_left_out(
    run_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    solo = _solo(run_db)
    db = open_db(run_db)
    with immediate(db):  # what an engine writes when it applied an operator's extend
        db.execute(
            "INSERT INTO control_commands (experiment_id, attempt_id, action, actor, state, "
            "created_at, applied_at) VALUES ('cli', ?, 'extend', 'op', 'applied', 'x', 'x')",
            [solo.id],
        )
    db.conn.close()
    report = _analysis(run_db, capsys)
    flagged = [c for c in report["comparisons"] if c["intervened"]]
    assert len(flagged) == 2 and all(c["intervened"] == ["extend"] for c in flagged)
    assert all(c["model"] == "sim/a" and c["replicate"] == 1 for c in flagged)
    without = _analysis(run_db, capsys, "--without-intervened")
    assert without["exclusion"]["without_intervened"] is True
    assert len(without["comparisons"]) == len(report["comparisons"]) - 2
