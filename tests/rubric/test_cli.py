"""`mkb annotate`, `mkb label` and `mkb rubric` through the real dispatcher."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.cli import main
from engine.rubric import subjects
from engine.standins.scripted_llm import SCENARIO_DIR, Scenario, ScriptedLLMServer
from storage import queries
from storage.db import open_db

ANNOTATOR_DIR = SCENARIO_DIR / "annotators"


def server(*names: str) -> ScriptedLLMServer:
    scenarios = [Scenario.load(ANNOTATOR_DIR / f"{name}.toml") for name in names]
    return ScriptedLLMServer({s.name: s for s in scenarios})


@pytest.mark.slow
async def test_annotate_then_report(experiment_db: tuple[Path, str], capsys,  # type: ignore[no-untyped-def]
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path, experiment = experiment_db
    monkeypatch.setenv("SCRIPTED_KEY", "secret")
    async with server("skill_a", "skill_b", "cause", "refuse") as llm:
        common = ["annotate", "--db", str(path), "--api-base", llm.base_url,
                  "--api-key-env", "SCRIPTED_KEY"]
        rc = await asyncio.to_thread(main, [*common, "--what", "skills", "--annotator",
                                            "openai/ann-skill-a", "openai/ann-skill-b"])
        assert rc == 0
        out = capsys.readouterr().out
        assert f"experiment {experiment}:" in out and "0 failed" in out
        rc = await asyncio.to_thread(main, [*common, "--what", "causes", "--annotator",
                                            "openai/ann-cause", "openai/ann-refuse"])
        assert rc == 1  # the refusing annotator's items failed; the run still finished
        out = capsys.readouterr().out
        assert "FAILED: invalid reply" in out and "<- openai/ann-cause: ok" in out
    assert all(r.authorization == "Bearer secret" for r in llm.requests)

    assert main(["rubric", "report", "--db", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    db = open_db(path, readonly=True)
    n_skills = len(subjects.skill_subjects(db, experiment))
    n_harmed = len(subjects.cause_subjects(db, experiment))
    db.conn.close()
    usage = {(u["task"], u["annotator"]): u["labels"] for u in data["usage"]}
    assert usage[("skill", "openai/ann-skill-a")] == 11 * n_skills
    assert usage[("cause", "openai/ann-cause")] == n_harmed
    assert data["failures"] == n_harmed
    kappas = {(a["category"]): a for a in data["agreement"] if a["task"] == "skill"}
    assert kappas["verified reformulation"]["agree"] == 0
    assert kappas["measured evidence"]["agree"] == n_skills
    friction = [r for r in data["causes"] if r["cause"] == "toolchain friction"]
    assert sum(r["count"] for r in friction) == n_harmed

    assert main(["rubric", "report", "--db", str(path)]) == 0
    text = capsys.readouterr().out
    assert "agreement (Cohen's kappa)" in text and "toolchain friction" in text
    assert main(["rubric", "disagreements", "--db", str(path), "--task", "skill"]) == 0
    assert f"{2 * n_skills} disagreements" in capsys.readouterr().out


def test_label_command(experiment_db: tuple[Path, str], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path, experiment = experiment_db
    db = open_db(path, readonly=True)
    skill = subjects.skill_subjects(db, experiment)[0].subject_id
    attempt = subjects.uptake_subjects(db, experiment)[0].subject_id
    comparison = subjects.cause_subjects(db, experiment)[0].subject_id
    db.conn.close()
    base = ["label", "--db", str(path), "--annotator", "pat"]
    assert main([*base, "--task", "skill", "--subject", str(skill), "--category",
                 "agenda handoff", "--value", "present", "--evidence", "next: tune"]) == 0
    rows = tmp_path / "labels.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [
        {"task": "uptake", "subject_id": attempt, "value": "ignored"},
        {"task": "uptake", "subject_id": attempt, "category": "propagation", "value": "no"},
        {"task": "cause", "subject_id": comparison, "value": "search truncation"}]) + "\n")
    assert main([*base, "--jsonl", str(rows)]) == 0
    assert "recorded 3 labels by pat" in capsys.readouterr().out
    db = open_db(path, readonly=True)
    got = {(x.task, x.subject_id, x.category, x.value, x.annotator_kind)
           for x in queries.labels(db)}
    db.conn.close()
    assert got == {("skill", skill, "agenda handoff", "present", "human"),
                   ("uptake", attempt, "uptake", "ignored", "human"),
                   ("uptake", attempt, "propagation", "no", "human"),
                   ("cause", comparison, "cause", "search truncation", "human")}

    assert main([*base, "--task", "uptake", "--subject", str(attempt), "--value",
                 "mostly"]) == 2
    assert "'mostly' is not a value of uptake/uptake" in capsys.readouterr().err
    assert main([*base, "--task", "cause", "--subject", "999999", "--value",
                 "search truncation"]) == 2
    assert "no comparison 999999" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "skill", "subject_id": 1, "category": "vibes", "value": "x"}\n')
    assert main([*base, "--jsonl", str(bad)]) == 2
    assert f"{bad}:1: unknown skill category" in capsys.readouterr().err


def test_usage_errors_and_rubric_check(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["annotate", "--db", str(tmp_path / "x.sqlite")]) == 2
    assert "--annotator" in capsys.readouterr().err
    assert main(["annotate", "--db", str(tmp_path / "x.sqlite"), "--annotator", "m"]) == 2
    assert "no experiment" in capsys.readouterr().err
    broken = tmp_path / "r.toml"
    broken.write_text("[[categories]]\nkey = 'A'\n")
    assert main(["rubric", "check", str(broken)]) == 1
    assert "invalid:" in capsys.readouterr().out
    assert main(["rubric", "show", "--rubric", str(broken)]) == 2
    assert main(["rubric", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["categories"]) == 11 and shown["causes"][0]["name"] == "rule violation"
