"""`mkb grade` end to end in fresh child processes (the path a GPU host uses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.grading.options import PREVIEW_COUNTS

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"


def mkb(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "grade", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_honest_preview_exits_zero_and_says_preview() -> None:
    proc = mkb("p28", "--dsl", "cute", str(FIXTURES / "honest" / "p28_plain.py"), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("PREVIEW")
    assert "NOT a scored pass" in proc.stdout
    assert "bypass test: skipped: no GPU" in proc.stdout


@pytest.mark.slow
def test_repeat_grades_in_fresh_children_and_summarizes_the_spread() -> None:
    honest = str(FIXTURES / "honest" / "p28_plain.py")
    proc = mkb(
        "p28", "--dsl", "cute", honest, "--device", "cpu", "--repeat", "2", "--json", "--call-trace"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    gradings, summary = out["gradings"], out["summary"]
    assert [g["verdict"] for g in gradings] == ["preview", "preview"]
    assert summary["gradings"] == 2 and summary["all_passed"] is True
    speedups = [g["speedup"] for g in gradings]
    assert summary["speedups"] == [round(s, 4) for s in speedups]
    assert summary["speedup_min"] <= summary["speedup_median"] <= summary["speedup_max"]
    # each grading ran in its own child and carries its own trace of every timed call
    assert gradings[0]["request_id"] == gradings[1]["request_id"] == "p28_plain.py"
    for grading in gradings:
        for side in ("eager", "submission"):
            rows = grading["clock"]["call_trace"][side]["rows"]
            assert len(rows) == PREVIEW_COUNTS[2]
            assert all(r["runner_cpu"] is not None and r["judge_cpu"] is not None for r in rows)
            assert all(r["ms"] is not None and r["judge_ms"] >= r["ms"] > 0 for r in rows)


@pytest.mark.slow
def test_forged_stdout_cheat_fails_in_a_fresh_worker_with_json() -> None:
    proc = mkb(
        "p28",
        "--dsl",
        "tirx",
        str(FIXTURES / "cheats" / "forged_stdout.py"),
        "--device",
        "cpu",
        "--json",
    )
    assert proc.returncode == 1, proc.stderr
    feedback = json.loads(proc.stdout)
    assert feedback["verdict"] == "fail"
    assert feedback["reason"] == "correctness.tolerance"
    assert '"verdict": "pass"' in feedback["log_tail"]  # the forged line went to the log only
    # a cold judge starts the submission's runner beside the reference runner and waits for
    # it before the eager timing, so taking it after the eager phase costs nothing
    steps = feedback["timings_s"]
    assert "runner_wait" in steps and steps["runner_start"] < 0.5, steps


def test_static_failure_exits_one_with_line() -> None:
    path = FIXTURES / "cheats" / "triton_kernel.py"
    line = path.read_text().splitlines().index("import triton") + 1
    proc = mkb("p28", "--dsl", "cute", str(path))
    assert proc.returncode == 1
    assert f"[rule.other_language] line {line}: triton" in proc.stdout, proc.stdout
    assert "bypass test" not in proc.stdout  # never imported, nothing else to report


@pytest.mark.parametrize(
    "args",
    [
        ("p99", "--dsl", "cute", "x.py"),
        ("no_such_problem", "--dsl", "cute", "x.py"),
        ("p28", "--dsl", "triton", str(FIXTURES / "honest" / "p28_plain.py")),
        ("p28", "--dsl", "cute", "missing_file.py"),
        ("p28", "--dsl", "cute", str(FIXTURES / "honest" / "p28_plain.py"), "--device", "tpu"),
        ("p28", "--dsl", "cute", str(FIXTURES / "honest" / "p28_plain.py"), "--repeat", "0"),
        ("p28", "--dsl", "cute", str(FIXTURES / "honest" / "p28_plain.py"), "--repeat", "21"),
    ],
)
def test_usage_errors_exit_two(args: tuple[str, ...]) -> None:
    proc = mkb(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "mkb: error:" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("modules", "forbidden"),
    [
        # the `mkb grade` parent: no torch either (it only reads, spawns and waits)
        (
            ("app.commands.grade", "engine.grading.parent.evaluate"),
            ("torch", "aiohttp", "textual", "harbor", "sqlite_utils"),
        ),
        # the judge path on a GPU host: torch, numpy and the DSLs only
        (
            (
                "engine.grading.judge.job",
                "engine.grading.parent.zygote",
                "engine.grading.judge.wire",
                "engine.grading.judge.runner_proc",
                "engine.grading.runner.dsl_hooks",
                "engine.grading.judge.timing",
                "problems.registry",
            ),
            ("aiohttp", "textual", "harbor", "sqlite_utils", "scipy"),
        ),
    ],
)
def test_grading_paths_import_only_what_they_need(
    modules: tuple[str, ...], forbidden: tuple[str, ...]
) -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"print([m for m in {forbidden!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
