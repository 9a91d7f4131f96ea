"""ρ̄ with its bootstrap interval, pair and replicate counts and the preview mark."""

from __future__ import annotations

import dataclasses
import math

import pytest

from engine.analysis import metrics, stats
from engine.analysis.outcomes import ScoredAttempt


def o(dsl: str, arm: str, runtime: float, *, problem: str, rep: int = 1) -> ScoredAttempt:
    return ScoredAttempt("m", problem, "Attention", dsl, arm, rep, True, runtime, 10.0)


def pairs(ratios: list[float], rep: int = 1) -> list[metrics.Comparison]:
    """cute→tirx comparisons whose ρ are ``ratios`` (baseline 1 ms, treatment 1/ρ ms)."""
    rows: list[ScoredAttempt] = []
    for i, ratio in enumerate(ratios):
        p = f"p{i:02d}"
        rows += [
            o("cute", "solo", 1.0, problem=p, rep=rep),
            o("tirx", "solo", 1.0, problem=p, rep=rep),
            o("tirx", "skill", 1.0 / ratio, problem=p, rep=rep),
        ]
    return [c for c in metrics.comparisons(rows) if c.direction == "cute->tirx"]


def test_geometric_mean_interval_and_counts() -> None:
    comps = pairs([2.0, 0.5, 1.0, 4.0])
    out = stats.rho_interval(comps, draws=500, seed=1)
    assert out["n"] == 4 and out["replicates"] == 1
    assert out["gm"] == pytest.approx(math.exp(sum(map(math.log, (2, 0.5, 1, 4))) / 4))
    low, high = out["low"], out["high"]
    assert isinstance(low, float) and isinstance(high, float)
    assert 0.5 <= low <= out["gm"] <= high <= 4.0  # inside the range of the pairs
    boot = stats.bootstrap_delta_gm(comps, 500, 1)  # the same bootstrap, as ratios
    assert low == pytest.approx(1 + boot["low"]) and high == pytest.approx(1 + boot["high"])
    assert out["preview"] is False


def test_no_interval_below_two_pairs_and_none_when_empty() -> None:
    one = stats.rho_interval(pairs([2.0]))
    assert one["n"] == 1 and one["gm"] == pytest.approx(2.0)
    assert one["low"] is None and one["high"] is None
    empty = stats.rho_interval([])
    assert empty["n"] == 0 and empty["gm"] is None and empty["low"] is None


def test_replicates_are_counted_and_preview_pairs_marked() -> None:
    comps = pairs([2.0, 1.0], rep=1) + pairs([1.5], rep=2)
    assert stats.rho_interval(comps)["replicates"] == 2
    treated = comps[0].treatment
    assert treated is not None
    marked = dataclasses.replace(comps[0], treatment=dataclasses.replace(treated, preview=True))
    assert stats.rho_interval([marked, *comps[1:]])["preview"] is True
