"""`mkb analyze`: --outcomes and --db agree; malformed input names the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from engine.analysis.outcomes import from_store, to_jsonl
from engine.config import parse_config
from engine.scheduler import Engine
from engine.simulated import SimulatedBackend, SimulatedRunner
from storage.db import open_db
from storage.store import Store

CONFIG = """
[experiment]
name = "ana"
problems = ["p28"]
replicates = 4

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"
"""


async def test_outcomes_file_and_database_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "a.sqlite"
    with Store(db_path) as store:
        await Engine(store, parse_config(CONFIG), SimulatedRunner(submissions=1),
                     SimulatedBackend()).run()
    db = open_db(db_path, readonly=True)
    outcomes = from_store(db, "ana")
    db.conn.close()
    assert outcomes.preview and len(outcomes.rows) > 0
    file = tmp_path / "outcomes.jsonl"
    file.write_text(to_jsonl(outcomes))

    assert main(["analyze", "--db", str(db_path), "--json", "--draws", "200"]) == 0
    from_db = json.loads(capsys.readouterr().out)
    assert main(["analyze", "--outcomes", str(file), "--json", "--draws", "200"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert from_db["preview"] is True and from_file["preview"] is False
    for key in ("solo", "lift", "tiers", "tests", "ladder", "comparisons"):
        assert from_db[key] == from_file[key], key
    assert {r["direction"] for r in from_db["lift"]} == {"cute->tirx", "tirx->cute"}
    assert from_db["lift"][0]["n"] > 0


def test_text_csv_and_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.analysis.synthetic import synthetic

    file = tmp_path / "o.jsonl"
    file.write_text(to_jsonl(synthetic(models=2, problems=12, seed=3)))
    assert main(["analyze", "--outcomes", str(file), "--draws", "100"]) == 0
    assert "Lift (all)" in capsys.readouterr().out
    assert main(["analyze", "--outcomes", str(file), "--csv", str(tmp_path / "csv"),
                 "--figures", str(tmp_path / "fig"), "--draws", "100"]) == 0
    lift_csv = (tmp_path / "csv" / "lift.csv").read_text().splitlines()
    assert lift_csv[0].startswith("model,direction,family,n,delta_gm")
    assert len(lift_csv) > 4
    pngs = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    assert pngs == ["help_harm_by_standing.png", "lift_by_model.png", "per_problem_lift.png",
                    "solo_speedups.png"]
    assert all((tmp_path / "fig" / n).read_bytes()[:4] == b"\x89PNG" for n in pngs)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"model": "m"}', "missing key"),
        ('{"model": "m", "problem": "p", "dsl": "cuda", "arm": "solo", "replicate": 1, '
         '"passed": true, "runtime_ms": 1}', "dsl must be"),
        ('{"model": "m", "problem": "p", "dsl": "cute", "arm": "solo", "replicate": 1, '
         '"passed": true, "runtime_ms": null}', "needs runtime_ms"),
        ('{"model": "m", "problem": "p", "dsl": "cute", "arm": "solo", "replicate": "1", '
         '"passed": false}', "replicate must be"),
        ('{"model": "m", "problem": "p", "dsl": "cute", "arm": "solo", "replicate": 1, '
         '"passed": true, "runtime_ms": -2}', "positive"),
    ],
)
def test_malformed_rows_name_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    good = ('{"model": "m", "problem": "p", "dsl": "cute", "arm": "solo", "replicate": 1, '
            '"passed": false}')
    file = tmp_path / "bad.jsonl"
    file.write_text(good + "\n\n" + line + "\n")
    assert main(["analyze", "--outcomes", str(file)]) == 2
    err = capsys.readouterr().err
    assert f"{file}:3" in err and message in err
