"""Runtimes that are not finite positive numbers (0, negative, NaN, inf, NULL), in attempts'
finals and in repeated finals, never crash the analysis: `mkb analyze` (text and --json) and
`mkb power` leave them out and count them by reason; the pure functions refuse them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from app.cli import main
from engine.analysis.metrics import comparisons
from engine.analysis.outcomes import ScoredAttempt
from engine.analysis.paired import ArmResult, rho
from engine.grading.admission import runtime_defect

sys.path.insert(0, str(Path(__file__).parents[1] / "tui"))
import tui_seed as seed  # noqa: E402

BAD = (0.0, -1.0, math.nan, math.inf, -math.inf, None)
PLAN = """
[experiment]
name = "plan"
problems = ["p28", "p01"]
replicates = 2

[[models]]
name = "model-a"
"""


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = seed.build(tmp_path_factory.mktemp("bad") / "bad.sqlite")
    return path, seed.add_bad_timings(path)


@pytest.mark.parametrize("value", BAD)
def test_a_bad_runtime_is_named_and_never_paired(value: float | None) -> None:
    assert runtime_defect(value) is not None
    assert not ArmResult(True, value, 1.0).timed
    with pytest.raises(ValueError, match="finite positive runtime"):
        rho(ArmResult(True, value, 1.0), ArmResult(True, 1.0, 1.0))


@pytest.mark.parametrize("value", BAD)
def test_a_comparison_with_a_bad_passing_arm_is_left_out(value: float | None) -> None:
    def row(arm: str, dsl: str, runtime: float | None) -> ScoredAttempt:
        return ScoredAttempt("m", "p28", "f", dsl, arm, 1, True, runtime, 1.0)

    rows = [row("solo", "cute", 1.0), row("solo", "tirx", value), row("skill", "tirx", 0.5)]
    assert comparisons(rows) == []  # cute->tirx's baseline is no result; tirx->cute unresolved


def test_mkb_analyze_counts_what_it_leaves_out(
    bad_store: tuple[Path, dict[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, left_out = bad_store
    assert main(["analyze", "--db", str(path), "--draws", "50"]) == 0
    out = capsys.readouterr().out
    assert (
        f"Ungraded (grader's fault, not counted as failures): {left_out['attempts']}, "
        f"by reason: timing.invalid {left_out['attempts']}" in out
    )
    assert f"Repeated gradings left out (no valid runtime): {left_out['repeats']}" in out
    assert main(["analyze", "--db", str(path), "--json", "--draws", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["no_result"] == {
        "ungraded": left_out["attempts"],
        "ungraded_by_reason": {"timing.invalid": left_out["attempts"]},
        "repeats_excluded": left_out["repeats"],
        "repeats_by_reason": {"timing.invalid": left_out["repeats"]},
    }
    assert all(c["rho"] > 0 and math.isfinite(c["rho"]) for c in report["comparisons"])
    assert all(math.isfinite(v) for b in report["noise"]["bands"] for v in [b["sigma"] or 1.0])
    assert main(["analyze", "--db", str(path), "--csv", str(tmp_path), "--draws", "50"]) == 0
    lines = (tmp_path / "no_result.csv").read_text().splitlines()
    assert lines[0].startswith("rows,reason,count")
    assert lines[1].startswith(f"attempts,timing.invalid,{left_out['attempts']},")
    assert lines[2].startswith(f"repeats,timing.invalid,{left_out['repeats']},")


def test_mkb_power_plans_from_a_store_with_bad_timings(
    bad_store: tuple[Path, dict[str, int]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, left_out = bad_store
    config = tmp_path / "plan.toml"
    config.write_text(PLAN)
    assert main(["power", str(config), "--from", str(path), "--pilot", seed.EXPERIMENT]) == 0
    assert f"Ungraded (grader's fault, not counted as failures): {left_out['attempts']}" in (
        capsys.readouterr().out
    )
    assert main(["power", str(config), "--from", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["no_result"]["repeats_excluded"] == (
        left_out["repeats"]
    )
