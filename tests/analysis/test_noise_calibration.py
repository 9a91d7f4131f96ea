"""A tiny run of the calibration benchmark (benchmarks/noise_calibration.py): every scenario
and design goes through the real paired test, BH and sequential rule, and the known truths
hold (no call across hosts, 1.3× at CV 3 % found, adaptive cheaper where it can stop)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.noise_calibration import calibrate, scenarios


def test_a_tiny_calibration_run(tmp_path: Path) -> None:
    out = tmp_path / "calibration.json"
    summary = calibrate(experiments=3, comparisons=8, max_pairs=5, seed=1, out=out)
    assert json.loads(out.read_text())["scenarios"] == summary["scenarios"]
    rows = summary["scenarios"]
    assert set(rows) == {s.name for s in scenarios()}
    for name, designs in rows.items():
        assert set(designs) == {"fixed_k3", "fixed_k5", "adaptive_max5"}
        assert designs["fixed_k5"]["gradings_per_comparison"] == 10
        if "different hosts" in name:  # cross_host: never called beyond noise
            assert all(d["detect_1.3"] == 0 and d["false_call_rate"] == 0 for d in designs.values())
    quiet = rows["cv3 one host"]
    assert all(d["detect_1.3"] == 1.0 for d in quiet.values())
    assert quiet["adaptive_max5"]["gradings_per_comparison"] < 7  # clear ones stop at 2 pairs
    assert summary["targets_met"]["detect_1.3_cv3"] is True
