"""`mkb analyze`: --outcomes and --db agree; malformed input names the line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from app.cli import main
from engine.analysis.outcomes import from_store, to_jsonl
from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
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

[grading]
gpu = "b200"
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
    assert "Lift by model x direction x family" in capsys.readouterr().out
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


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated (CPU preview) experiment ``ana`` in a store, built once."""
    import asyncio

    path = tmp_path_factory.mktemp("analyze") / "a.sqlite"

    async def build() -> None:
        with Store(path) as store:
            await Engine(
                store, parse_config(CONFIG), SimulatedRunner(submissions=1), SimulatedBackend()
            ).run()

    asyncio.run(build())
    return path


TUI_TABLES = (
    "Pass rate and speedup per arm",  # the Lift screen's Solo tab, and the skill arms
    "Lift by model x direction x family",  # Lift tab
    "Tiers: source tier vs the target's solo tier",  # Tiers tab
    "Tiers: solo tier x source tier",
    "labels by task and annotator",  # Rubric screen tabs
    "skill-category prevalence",
    "uptake by transfer outcome",
    "primary failure causes",
    "uptake vs lift",
    "agreement (Cohen's kappa)",
)


def test_text_names_the_experiment_and_prints_every_tui_table(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.analysis.text import PREVIEW_TAG

    assert main(["analyze", "--db", str(store_path), "--draws", "50"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Experiment ana (id ana)"
    assert lines[1].startswith("Grading: PREVIEW") and "not comparable" in lines[1]
    # a PREVIEW names the GPU agents compiled for, never as the one it was graded on
    assert lines[2] == (
        "Target NVIDIA B200 (Blackwell, sm_100a) (what agents compiled for); "
        "graded in CPU preview"
    )
    for heading in TUI_TABLES:
        [title] = [line for line in lines if line.startswith(heading)]
        if heading not in ("labels by task and annotator", "agreement (Cohen's kappa)"):
            assert title.endswith(PREVIEW_TAG), title  # figures from CPU preview grading
    header = next(i for i, line in enumerate(lines) if line.startswith("Lift by model"))
    assert lines[header + 1].split() == [
        "model",
        "direction",
        "family",
        "N",
        "problems",
        "dGM",
        "95%",
        "CI",
        "T",
        "H",
    ]
    families = {line.split()[2] for line in lines[header + 2 : header + 9]}
    assert "all" in families and len(families) > 1  # per-family rows, not only "all"
    assert "solo" in out and "skill" in out


def test_json_has_experiment_arms_intervals_and_rubric(
    store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.analysis import metrics, stats

    assert main(["analyze", "--db", str(store_path), "--json", "--draws", "50"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["experiment"] == {
        "id": "ana",
        "name": "ana",
        "gpu": "NVIDIA B200 (Blackwell, sm_100a)",
    }
    assert "not comparable" in data["label"]
    assert {(a["model"], a["arm"], a["dsl"]) for a in data["arms"]} == {
        (m, arm, dsl)
        for m in ("sim/a", "sim/b")
        for arm in ("solo", "skill")
        for dsl in ("cute", "tirx")
    }
    assert data["rubric"]["experiment"] == "ana" and data["rubric"]["preview"] is True

    db = open_db(store_path, readonly=True)
    comps = metrics.comparisons(from_store(db, "ana").rows)
    db.conn.close()
    for row in data["lift"]:
        cell = [
            c
            for c in comps
            if c.model == row["model"]
            and c.direction == row["direction"]
            and row["family"] in ("all", c.family)
        ]
        boot = stats.bootstrap_delta_gm(cell, 2_000, 0)
        assert (row["n"], row["problems"]) == (len(cell), len({c.problem for c in cell}))
        assert (row["ci_low"], row["ci_high"]) == (boot["low"], boot["high"])
        assert row["ci_low"] <= row["delta_gm"] <= row["ci_high"]

    assert main(["analyze", "--db", str(store_path), "--csv", str(tmp_path), "--draws", "50"]) == 0
    with (tmp_path / "lift.csv").open(newline="") as fh:
        lift_csv = list(csv.DictReader(fh))
    assert len(lift_csv) == len(data["lift"])
    assert {r["grading"] for r in lift_csv} == {"PREVIEW (CPU grading, not scored, not comparable)"}
    assert (tmp_path / "arms.csv").exists()


def test_scored_outcomes_carry_no_preview_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.analysis.synthetic import synthetic

    file = tmp_path / "o.jsonl"
    file.write_text(to_jsonl(synthetic(models=1, problems=6, seed=1)))
    assert main(["analyze", "--outcomes", str(file), "--draws", "50"]) == 0
    out = capsys.readouterr().out
    assert "PREVIEW" not in out and "Grading: scored" in out
    assert out.startswith("Experiment: none named")
    assert "Rubric views" not in out  # labels live in the store only
