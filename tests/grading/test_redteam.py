"""The red-team suite: every cheating submission is rejected with the right reason code in
CPU preview, and honest submissions come back as a preview with every runnable check passed."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
CHEATS = sorted((FIXTURES / "cheats").glob("*.py"))
HONEST = sorted((FIXTURES / "honest").glob("*.py"))
INERT = sorted((FIXTURES / "inert").glob("*.py"))


def read_expectations(path: Path) -> tuple[str, str]:
    """(expected reason, problem id) from a cheat file's ``# expect:`` / ``# problem:`` lines."""
    expect, problem = "", "p28"
    for line in path.read_text().splitlines()[:3]:
        if line.startswith("# expect:"):
            expect = line.split(":", 1)[1].strip()
        if line.startswith("# problem:"):
            problem = line.split(":", 1)[1].strip()
    return expect, problem


def test_suite_is_large_enough() -> None:
    assert len(CHEATS) >= 20
    assert all(read_expectations(p)[0] for p in CHEATS), "every cheat declares # expect:"


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_is_rejected(grade, path: Path) -> None:
    expected, problem = read_expectations(path)
    feedback = grade(path.read_text(), problem)
    assert feedback.verdict == "fail", (feedback.verdict, feedback.reason, feedback.message)
    assert feedback.reason == expected, (feedback.reason, feedback.message, feedback.log_tail)
    if expected.startswith("rule."):
        assert any(f.code == expected and f.line for f in feedback.findings)
        assert feedback.import_ok is None  # never imported


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_submission_previews(grade, path: Path) -> None:
    problem = path.stem.split("_")[0]
    feedback = grade(path.read_text(), problem)
    assert feedback.verdict == "preview", (feedback.reason, feedback.message, feedback.log_tail)
    assert feedback.reason is None and feedback.import_ok is True
    assert feedback.bypass == "skipped: no GPU"
    assert feedback.dsl_launches_per_call is None
    kinds = [d["kind"] for d in feedback.draws]
    assert kinds.count("correctness") == 5 and kinds.count("recheck") == 3
    assert all(d["passed"] for d in feedback.draws)
    for draw in feedback.draws:
        for out in draw["outputs"]:
            if out["kind"] == "float":
                assert out["max_error"] <= out["allowance"]
    assert feedback.impl_median_ms and feedback.impl_median_ms > 0
    assert feedback.eager_median_ms and feedback.eager_median_ms > 0
    assert 0 < feedback.speedup <= 100


@pytest.mark.parametrize("path", INERT, ids=lambda p: p.stem)
def test_inert_patch_buys_nothing(grade, path: Path) -> None:
    """Patches of clocks the runner no longer uses: an honest preview at an honest speed."""
    feedback = grade(path.read_text(), "p28")
    assert feedback.verdict == "preview", (feedback.reason, feedback.message)
    honest = grade((FIXTURES / "honest" / "p28_plain.py").read_text(), "p28")
    assert feedback.speedup is not None and honest.speedup is not None
    assert feedback.speedup < 3 * honest.speedup + 1  # a patched clock would read ~100x


def test_oversized_source_is_rejected(grade) -> None:
    source = (FIXTURES / "honest" / "p28_plain.py").read_text()
    source += "\n# " + "x" * (300 * 1024) + "\n"
    feedback = grade(source)
    assert (feedback.verdict, feedback.reason) == ("fail", "rule.size")


def test_syntax_error_is_rejected_with_line(grade) -> None:
    feedback = grade("import torch\n\ndef solve(x:\n    return x\n")
    assert feedback.reason == "rule.syntax"
    assert feedback.findings[0].line == 3
