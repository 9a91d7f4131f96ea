"""% of SOL and flagged results in the analysis: from the final evaluations in the store,
through an outcomes file, and as an exclusion rule."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from app.cli import main
from engine.analysis.outcomes import from_store, parse_row, to_jsonl
from engine.analysis.report import AnalysisOptions, analyze
from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage.db import open_db
from storage.store import Store

SOL_MS = 0.5
CONFIG = """
[experiment]
name = "sol"
problems = ["p28"]
replicates = 6

[[models]]
name = "sim/a"
"""


@dataclasses.dataclass
class SolBackend:
    """Simulated grading plus what a GPU grader adds: the SOL and the impossible-result flag."""

    inner: SimulatedBackend = dataclasses.field(default_factory=SimulatedBackend)
    name: str = "sol"

    async def grade(self, request: GradeRequest) -> Feedback:
        fb = await self.inner.grade(request)
        fb.sol_ms = SOL_MS
        if fb.impl_median_ms is not None and fb.impl_median_ms < SOL_MS:
            fb.flags = ["sol.faster_than_sol"]
        return fb

    async def close(self) -> None:
        return None


def test_an_outcome_row_may_carry_the_sol() -> None:
    row = parse_row({"model": "m", "problem": "p", "dsl": "cute", "arm": "solo",
                     "replicate": 1, "passed": True, "runtime_ms": 2.0,
                     "ref_runtime_ms": 4.0, "sol_ms": 0.5}, "x:1")
    assert row.pct_of_sol == pytest.approx(25.0)
    assert dataclasses.replace(row, passed=False).pct_of_sol is None


async def test_sol_and_flags_flow_from_final_evaluations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_path = tmp_path / "sol.sqlite"
    with Store(db_path) as store:
        await Engine(store, parse_config(CONFIG), SimulatedRunner(submissions=1),
                     SolBackend()).run()
    db = open_db(db_path, readonly=True)
    outcomes = from_store(db, "sol")
    db.conn.close()
    rows = outcomes.rows
    assert rows and all(r.sol_ms == SOL_MS for r in rows)
    flagged = [r for r in rows if "sol.faster_than_sol" in r.flags]
    assert flagged and all(r.runtime_ms is not None and r.runtime_ms < SOL_MS for r in flagged)

    report = analyze(outcomes, AnalysisOptions(permutation_draws=100, swap_draws=100,
                                               bootstrap_draws=100))
    assert report["exclusion"]["flags_seen"] == {"sol.faster_than_sol": len(flagged)}
    for solo in report["solo"]:
        shares = [100 * SOL_MS / r.runtime_ms for r in rows if r.arm == "solo"
                  and r.dsl == solo["dsl"] and r.passed and r.runtime_ms]
        assert solo["pct_sol_median"] == pytest.approx(statistics.median(shares))

    strict = analyze(outcomes, AnalysisOptions(permutation_draws=100, swap_draws=100,
                                               bootstrap_draws=100,
                                               fail_flags=("sol.faster_than_sol",)))
    passed = sum(s["pass_rate"] * s["n"] for s in report["solo"])
    strict_passed = sum(s["pass_rate"] * s["n"] for s in strict["solo"])
    assert strict_passed == pytest.approx(
        passed - sum(1 for r in flagged if r.arm == "solo" and r.passed))

    file = tmp_path / "o.jsonl"
    file.write_text(to_jsonl(outcomes))
    assert main(["analyze", "--outcomes", str(file), "--json", "--draws", "100"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert from_file["solo"] == json.loads(json.dumps(report["solo"]))
    assert main(["analyze", "--db", str(db_path), "--draws", "100"]) == 0
    assert "Flagged attempts (exclude with --fail-flag): sol.faster_than_sol" in (
        capsys.readouterr().out)
