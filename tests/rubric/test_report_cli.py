"""`mkb rubric report` names its experiment; the uptake-lift line counts the cells it lists;
`mkb analyze` prints the rubric views of the experiment it analyses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from engine.rubric import subjects
from engine.rubric.model import default_rubric
from engine.rubric.views import uptake_lift_summary
from storage import queries, writes
from storage.db import open_db

RUBRIC = default_rubric()


def label_uptake(path: Path, experiment: str, *, only_model: str | None = None) -> None:
    """Rate every treatment attempt (of one model when given) with an uptake rating."""
    db = open_db(path)
    models = {a.id: a.model for a in queries.attempts_for_experiment(db, experiment)}
    for s in subjects.uptake_subjects(db, experiment):
        if only_model is None or models[s.subject_id] == only_model:
            writes.add_label(
                db,
                task="uptake",
                subject_type="attempt",
                subject_id=s.subject_id,
                category="uptake",
                value=RUBRIC.uptake_names[s.subject_id % 3],
                annotator="m",
                annotator_kind="llm",
            )
    db.conn.close()


def uptake_lift_block(text: str) -> tuple[str, list[str]]:
    """The uptake-vs-lift title line and the cell rows listed under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("uptake vs lift"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(line)
    return lines[start], rows


def test_report_fills_the_experiment(
    experiment_db: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, experiment = experiment_db
    assert main(["rubric", "report", "--db", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["experiment"] == experiment and data["experiment_name"] == "rubric"
    assert main(["rubric", "report", "--db", str(path)]) == 0
    assert f"experiment rubric (id {experiment})" in capsys.readouterr().out.splitlines()[0]
    assert main(["rubric", "report", "--db", str(path), "--all-experiments", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["experiment"] is None


def test_uptake_lift_line_without_ratings(
    experiment_db: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = experiment_db
    assert main(["rubric", "report", "--db", str(path)]) == 0
    title, cells = uptake_lift_block(capsys.readouterr().out)
    assert cells and "over 0 cells" not in title
    assert f"none of the {len(cells)} model x family cells has uptake ratings" in title


def test_uptake_lift_line_counts_rated_of_listed_cells(
    experiment_db: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, experiment = experiment_db
    label_uptake(path, experiment, only_model="sim/a")
    assert main(["rubric", "report", "--db", str(path), "--json"]) == 0
    lift = json.loads(capsys.readouterr().out)["uptake_lift"]
    rated = sum(c["rated"] > 0 for c in lift["cells"])
    assert 0 < rated == lift["n_cells"] < len(lift["cells"])
    assert main(["rubric", "report", "--db", str(path)]) == 0
    title, cells = uptake_lift_block(capsys.readouterr().out)
    assert len(cells) == len(lift["cells"])
    assert f"over the {rated} of {len(cells)} model x family cells with uptake ratings" in title


def test_uptake_lift_summary_edges() -> None:
    cell = {"model": "m", "family": "f", "n": 1, "rated": 1, "followed_fully": 1.0, "delta_gm": 0.1}
    assert "no model x family cell" in uptake_lift_summary(
        {"cells": [], "n_cells": 0, "spearman": None}
    )
    two = uptake_lift_summary({"cells": [cell, cell], "n_cells": 2, "spearman": None})
    assert "Spearman - (undefined" in two and "over the 2 of 2" in two
    three = uptake_lift_summary({"cells": [cell] * 4, "n_cells": 3, "spearman": 0.5})
    assert "Spearman +0.500 over the 3 of 4" in three


def test_analyze_prints_the_rubric_views(
    experiment_db: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, experiment = experiment_db
    label_uptake(path, experiment)
    db = open_db(path, readonly=True)
    n_rated = len(subjects.uptake_subjects(db, experiment))
    db.conn.close()
    assert main(["analyze", "--db", str(path), "--draws", "20"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"Experiment rubric (id {experiment})"
    rubric_part = out[out.index("\nRubric views\n") :]
    assert f"experiment rubric (id {experiment})" in rubric_part
    title, cells = uptake_lift_block(rubric_part)
    assert "Spearman" in title and f"of {len(cells)} model x family cells" in title
    assert "uptake by transfer outcome" in rubric_part
    assert main(["analyze", "--db", str(path), "--draws", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rubric"]["experiment"] == experiment
    assert data["rubric"]["usage"][0]["labels"] == n_rated
