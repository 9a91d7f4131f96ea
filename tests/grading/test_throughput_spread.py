"""The throughput benchmark's back-to-back repeats read as an A/A series
(benchmarks/grading_throughput.py, ``spread_of``): max/min and SD of log runtime per clock,
from passing gradings with a positive finite runtime only."""

from __future__ import annotations

import math

import pytest

from benchmarks.grading_throughput import spread_of


def test_a_files_repeats_give_their_spread_per_clock_leaving_out_bad_runtimes() -> None:
    rows = [
        {"impl_median_ms": 0.16, "span_ms": 0.116},
        {"impl_median_ms": 0.18, "span_ms": 0.1162},
        {"impl_median_ms": 0.0, "span_ms": None},  # a failed grading's: left out
        {"impl_median_ms": float("nan"), "span_ms": -1.0},
        {"impl_median_ms": 0.17, "span_ms": 0.1158},
    ]
    out = spread_of(rows)
    assert out["e2e"]["n"] == 3 and out["span"]["n"] == 3
    assert out["e2e"]["max_over_min"] == pytest.approx(0.18 / 0.16, abs=1e-4)
    logs = [math.log(v) for v in (0.16, 0.18, 0.17)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert out["e2e"]["sd_log"] == pytest.approx(sd, abs=1e-4)
    assert out["span"]["max_over_min"] < 1.01 < out["e2e"]["max_over_min"]
    assert spread_of(rows[:1])["e2e"] == {"n": 1, "max_over_min": None, "sd_log": None}
