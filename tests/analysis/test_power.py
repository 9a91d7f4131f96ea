"""Power planning: the closed form for the paired log-ratio case, the pilot's spread of ρ and
the planned cells of a config (`mkb power` on a pilot store: test_noise_report.py)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from engine.analysis import metrics
from engine.analysis.noise import Band, median_variance
from engine.analysis.outcomes import ScoredAttempt
from engine.analysis.power import (
    PlannedCell,
    between_sd,
    comparisons_needed,
    plan,
    planned_cells,
    power_of,
    select,
)
from engine.config import parse_config

Z = statistics.NormalDist()


def test_comparisons_needed_is_the_closed_form() -> None:
    """n = ((z₀.₉₇₅ + z₀.₈) σ / δ)²; σ = √(σ_b² + 2 v(R) σ_m²) for medians of R gradings."""
    sigma_b, sigma_m, repeats, lift = 0.20, 0.05, 3, 0.10
    delta = math.log(1 + lift)
    sd = math.sqrt(sigma_b**2 + 2 * median_variance(repeats) * sigma_m**2)
    closed = ((1.959963984540054 + 0.8416212335729143) * sd / delta) ** 2
    n = comparisons_needed(delta, sd)
    assert n == math.ceil(closed) == 37  # 0.2055 · 2.8016 / 0.0953 = 6.04; squared 36.5
    assert power_of(n, delta, sd) >= 0.80 > power_of(n - 2, delta, sd)
    two_sided = Z.cdf(math.sqrt(n) * delta / sd - 1.96) + Z.cdf(-math.sqrt(n) * delta / sd - 1.96)
    assert power_of(n, delta, sd) == pytest.approx(two_sided, abs=1e-4)
    assert power_of(0, delta, sd) == 0.0 and power_of(5, delta, 0.0) == 1.0


def test_power_matches_a_simulated_paired_test() -> None:
    """The normal approximation against a t-test of simulated paired log ratios."""
    rng = np.random.default_rng(4)
    sd, delta, n = 0.2, math.log(1.1), 40
    logs = rng.normal(delta, sd, (4000, n))
    t = logs.mean(axis=1) / (logs.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = (np.abs(t) > 2.0227).mean()  # t₀.₉₇₅ with 39 dof
    assert power_of(n, delta, sd) == pytest.approx(simulated, abs=0.03)


def _attempt(problem: str, dsl: str, arm: str, rep: int, runtime: float) -> ScoredAttempt:
    return ScoredAttempt(
        "m",
        problem,
        "Attention",
        dsl,
        arm,
        rep,
        True,
        runtime,
        1.0,
        repeats_ms=(runtime,) * 3,
        host="h",
    )


def test_between_sd_removes_the_measurement_part() -> None:
    rows = []
    log_rhos = [-0.2, -0.1, 0.0, 0.1, 0.2, 0.3]
    for rep, log_rho in enumerate(log_rhos, start=1):
        rows += [
            _attempt("p01", "cute", "solo", rep, 1.0),
            _attempt("p01", "tirx", "solo", rep, 1.0),
            _attempt("p01", "tirx", "skill", rep, math.exp(-log_rho)),
        ]
    comps = [c for c in metrics.comparisons(rows) if c.direction == "cute->tirx"]
    observed = statistics.variance(log_rhos)
    assert between_sd(comps, {}) == pytest.approx(math.sqrt(observed))
    band = Band("p01", "h", 50, 150, 100, sigma=0.1)
    noise = 0.1**2 * 2 * median_variance(3)
    assert between_sd(comps, {("p01", "tirx", "h"): band}) == pytest.approx(
        math.sqrt(observed - noise)
    )
    cells = plan(
        [PlannedCell("m", "cute->tirx", "all", ("p01", "p02"), 5)],
        comps,
        {("p01", "tirx", "h"): band},
        repeats=3,
        lifts=(0.1,),
    )
    (row,) = cells
    assert row["sigma_between_from"] == "cell" and row["comparisons"] == 10
    (lift,) = row["lifts"]
    sd = math.sqrt(observed - noise + 2 * median_variance(3) * 0.1**2)
    assert lift["comparisons_needed"] == comparisons_needed(math.log(1.1), sd)
    assert lift["replicates_needed"] == math.ceil(lift["comparisons_needed"] / 2)
    assert lift["power"] == pytest.approx(power_of(10, math.log(1.1), sd))


def test_planned_cells_without_importing_the_catalog() -> None:
    config = parse_config(PLAN, check_problems=False)
    assert select(["p28", "p36", "p0[12]"], []) == {
        "p28": "MLP & Norm",
        "p36": "MLP & Norm",
        "p01": "Attention",
        "p02": "Attention",
    }
    assert select([], ["KV Cache"]) and all(
        f == "KV Cache" for f in select([], ["KV Cache"]).values()
    )
    with pytest.raises(KeyError):
        select(["p99"], [])
    cells = planned_cells(config)
    assert {(c.model, c.direction, c.family) for c in cells} == {
        (m, d, f)
        for m in ("sim/a", "sim/c")
        for d in ("cute->tirx", "tirx->cute")
        for f in ("all", "MLP & Norm", "Attention")
    }


PLAN = """
[experiment]
name = "plan"
problems = ["p28", "p36", "p02"]
replicates = 4

[[models]]
name = "sim/a"

[[models]]
name = "sim/c"

[grading]
final_repeats = 3
"""
