"""`mkb noise`: usage errors name the argument; in CPU preview the real grader grades a
reference solution in fresh child processes, every figure is labelled PREVIEW, and the
gradings are stored as one series."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from storage.db import open_db

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "problems/solutions/p28_cute.py"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeats", "1"], "--repeats must be within 2..20"),
        (["--gap-s", "-1"], "--gap-s must be a number"),
        (["--dsl", "cuda"], "--dsl must be one of"),
        (["--device", "tpu"], "--device must be auto, cpu or cuda"),
    ],
)
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["noise", "p28", str(SOLUTION), "--dsl", "cute", *args]
    if "--dsl" in args:
        argv = ["noise", "p28", str(SOLUTION), *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_problem_and_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["noise", "p99", str(SOLUTION), "--dsl", "cute"]) == 2
    assert "unknown problem 'p99'" in capsys.readouterr().err
    assert main(["noise", "p28", "nope.py", "--dsl", "cute"]) == 2
    assert "no such file: nope.py" in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_preview_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "noise.sqlite"
    argv = [
        "noise",
        "p28",
        "--dsl",
        "cute",
        str(SOLUTION),
        "--repeats",
        "2",
        "--gap-s",
        "0",
        "--device",
        "cpu",
        "--db",
        str(db),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("[1/2] ") and lines[1].startswith("[2/2] ")
    figures = [line for line in lines if " ms" in line]
    assert figures and all("PREVIEW" in line for line in figures)
    assert "eager reference: 2 timed" in out and "cpu (preview)" in out
    conn = open_db(db, readonly=True)
    rows = conn.execute(
        "SELECT series, repeat, kind, state, problem_id, dsl, eager_median_ms FROM timing_repeats"
    ).fetchall()
    conn.conn.close()
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        (1, "noise", "done", "p28", "cute"),
        (2, "noise", "done", "p28", "cute"),
    ]
    assert len({r[0] for r in rows}) == 1 and all(r[6] > 0 for r in rows)
