"""The recorded-rows split of benchmarks/grading_overhead.py (hand-worked figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.grading_overhead import main, split_recorded

ROW = {
    "file": "problems/solutions/p99_cute.py",
    "problem": "p99",
    "verdict": "pass",
    "wall_s": 10.0,
    "impl_median_ms": 10.0,  # 66 calls -> 0.66 s
    "eager_median_ms": 50.0,  # 60 calls -> 3.0 s
    "timings_s": {"eager": 4.0, "correctness": 2.0, "timing": 3.0, "child_total": 9.5},
}
CATALOG = {"p99": {"id": "p99", "anchor_s": 0.2, "inputs_gb": 1.5}}  # 5 draws -> 1.0 s


def test_split_counts_kernel_eager_and_anchor_work_as_unavoidable() -> None:
    (row,) = split_recorded([ROW], CATALOG)
    assert row["unavoidable_s"] == pytest.approx(0.66 + 3.0 + 1.0)
    assert row["harness_s"] == pytest.approx(10.0 - 4.66)
    assert row["outside_phases_s"] == pytest.approx(1.0)  # child_total is not a phase
    assert row["inputs_gb"] == 1.5


def test_split_falls_back_to_the_catalogue_eager_time_and_no_anchor() -> None:
    failed = {**ROW, "impl_median_ms": None, "eager_median_ms": None}
    (row,) = split_recorded([failed], {"p99": {"eager_median_ms": 10.0}})
    assert row["unavoidable_s"] == pytest.approx(0.6)


def test_cli_reads_rows_and_catalogue(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n")
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"problems": list(CATALOG.values())}))
    assert main(["--from-rows", str(rows), "--catalog", str(catalog), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["harness_s"] == pytest.approx(5.34)
