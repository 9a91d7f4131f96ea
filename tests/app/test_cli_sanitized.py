"""CLI exports of stored text (`mkb analyze` text / JSON / CSV, `mkb rubric report` and
`disagreements`) carry no terminal control sequences from agent- or annotator-written text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli import main
from storage import writes
from storage.db import open_db

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
HOSTILE = "\x1b[2J\x1b]0;PWNED\x07\x1b]52;c;aGVsbG8=\x1b\\\x9b31m"
ARMS = (
    ("solo_cute", "cute"),
    ("solo_tirx", "tirx"),
    ("cute2tirx_skill", "tirx"),
    ("tirx2cute_skill", "cute"),
)


def hostile_store(path: Path) -> Path:
    """One finished experiment whose model name, family, final-evaluation flags and labels
    carry terminal escapes (as a compromised agent, grader or annotator could write)."""
    db = open_db(path)
    model = f"evil{HOSTILE}-model"
    with db.atomic():
        writes.create_experiment(db, "x", "x", preview=True)
        ids = {}
        for arm, dsl in ARMS:
            aid = writes.ensure_attempt(
                db,
                "x",
                f"k|{arm}",
                model=model,
                problem_id="p28",
                family=f"MLP & Norm{HOSTILE}",
                dsl=dsl,
                arm=arm,
                replicate=1,
            )
            sub = writes.add_submission(db, aid, 1, "impl", purpose="final")
            job = writes.start_grading_job(db, sub, "simulated")
            writes.finish_grading_job(
                db,
                job,
                {
                    "verdict": "preview",
                    "speedup": 2.0,
                    "impl_median_ms": 0.5,
                    "eager_median_ms": 1.0,
                    "flags": [f"sol.faster_than_sol{HOSTILE}"],
                },
            )
            writes.update_attempt(
                db,
                aid,
                state="finished",
                outcome="preview",
                impl_median_ms=0.5,
                eager_median_ms=1.0,
                speedup=2.0,
            )
            writes.add_skill(db, f"skill {HOSTILE}", attempt_id=aid)
            ids[arm] = aid
        writes.upsert_comparison(
            db,
            "x",
            model=model,
            problem_id="p28",
            family="MLP & Norm",
            direction="cute->tirx",
            replicate=1,
            round=1,
            source_attempt_id=ids["solo_cute"],
            baseline_attempt_id=ids["solo_tirx"],
            treatment_attempt_id=ids["cute2tirx_skill"],
            resolved=1,
            skipped=0,
            rho=1.0,
            verdict="neutral",
        )
        for annotator, value in ((f"llm-a{HOSTILE}", "present"), ("llm-b", "absent")):
            writes.add_label(
                db,
                task="skill",
                subject_type="skill",
                subject_id=1,
                category="measured evidence",
                value=value,
                evidence=f"quote {HOSTILE}",
                annotator=annotator,
                annotator_kind="llm",
            )
    db.conn.close()
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--draws", "10"],
        ["analyze", "--draws", "10", "--json"],
        ["rubric", "report"],
        ["rubric", "report", "--json"],
        ["rubric", "disagreements"],
    ],
)
def test_cli_output_has_no_control_sequences(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = hostile_store(tmp_path / "x.sqlite")
    assert main([*args, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "evil" in out or "llm-a" in out
    assert not CONTROL.findall(out.replace("\n", "").replace("\t", ""))
    assert "\\u001b" not in out.lower() and "\\u009b" not in out.lower()  # JSON escapes too


def test_analyze_csv_has_no_control_sequences(tmp_path: Path) -> None:
    db = hostile_store(tmp_path / "x.sqlite")
    out = tmp_path / "csv"
    assert main(["analyze", "--draws", "10", "--db", str(db), "--csv", str(out)]) == 0
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(out.glob("*.csv")))
    assert "evil" in text
    assert not CONTROL.findall(text.replace("\r\n", "").replace("\n", ""))
