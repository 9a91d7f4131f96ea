"""Power planning: the closed form for the paired log-ratio case, the pilot's spread of ρ and
the planned cells of a config (`mkb power` on a pilot store: test_noise_report.py)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from engine.analysis import metrics
from engine.analysis.noise import Band, median_variance, tolerance_factor
from engine.analysis.outcomes import ScoredAttempt
from engine.analysis.paired_test import PRIOR_DOF_CAP
from engine.analysis.power import (
    PlannedCell,
    between_sd,
    comparison_plan,
    comparisons_needed,
    noise_power_note,
    paired_power,
    pairs_needed,
    plan,
    planned_cells,
    power_of,
    select,
)
from engine.config import parse_config

Z = statistics.NormalDist()


def _exact_n(delta: float, sd: float, alpha: float = 0.05, target: float = 0.8) -> int:
    """The smallest n whose one-sample t test has power ≥ target, by scipy's nct."""
    n = 2
    while True:
        crit = scipy_stats.t.ppf(1 - alpha / 2, n - 1)
        ncp = math.sqrt(n) * delta / sd
        power = scipy_stats.nct.sf(crit, n - 1, ncp) + scipy_stats.nct.cdf(-crit, n - 1, ncp)
        if power >= target:
            return n
        n += 1


@pytest.mark.parametrize(
    ("lift", "sd"), [(0.10, 0.05), (0.10, 0.10), (0.30, 0.20), (0.05, 0.20), (0.10, 0.2055)]
)
def test_comparisons_needed_agrees_with_the_exact_noncentral_t(lift: float, sd: float) -> None:
    """Within one comparison of scipy's exact noncentral t; the normal approximation with its
    floor of 2 needed 2-3 fewer where few comparisons suffice (it fails this test)."""
    delta = math.log1p(lift)
    exact = _exact_n(delta, sd)
    assert abs(comparisons_needed(delta, sd) - exact) <= 1
    normal = max(2, math.ceil(((1.959964 + 0.841621) * sd / delta) ** 2))
    if exact <= 10:
        assert exact - normal >= 2  # where the old approximation was short
    n = comparisons_needed(delta, sd)
    assert power_of(n, delta, sd) >= 0.80 > power_of(n - 1, delta, sd) or n == 2
    crit = scipy_stats.t.ppf(0.975, n - 1)
    ncp = math.sqrt(n) * delta / sd
    reference = scipy_stats.nct.sf(crit, n - 1, ncp) + scipy_stats.nct.cdf(-crit, n - 1, ncp)
    assert power_of(n, delta, sd) == pytest.approx(reference, abs=1e-6)
    assert power_of(1, delta, sd) == 0.0 and power_of(5, delta, 0.0) == 1.0


def test_power_matches_a_simulated_paired_test() -> None:
    """The exact power against a t-test of simulated paired log ratios."""
    rng = np.random.default_rng(4)
    sd, delta, n = 0.2, math.log(1.1), 12
    logs = rng.normal(delta, sd, (8000, n))
    t = logs.mean(axis=1) / (logs.std(axis=1, ddof=1) / math.sqrt(n))
    simulated = (np.abs(t) > scipy_stats.t.ppf(0.975, n - 1)).mean()
    assert power_of(n, delta, sd) == pytest.approx(simulated, abs=0.015)


def test_pairs_needed_per_comparison_from_the_band() -> None:
    """A 1.1× help at CV 3 % (band of 20 dof) needs few pairs, at CV 25 % many; the planner's
    k reaches 80 % by the same noncentral t the paired test's shrunk dof give."""
    delta = math.log(1.1)
    quiet, noisy = pairs_needed(delta, 0.03, 20), pairs_needed(delta, 0.25, 20)
    assert quiet == 2 and noisy > 50
    for k in (noisy - 1, noisy):
        dof = PRIOR_DOF_CAP + k - 1
        crit = scipy_stats.t.ppf(0.975, dof)
        ncp = math.sqrt(k) * delta / (math.sqrt(2) * 0.25)
        exact = scipy_stats.nct.sf(crit, dof, ncp) + scipy_stats.nct.cdf(-crit, dof, ncp)
        assert paired_power(k, 0.25, 20, delta) == pytest.approx(exact, abs=1e-6)
        assert (exact >= 0.8) == (k == noisy)
    # the case: CV 25 %, 1.3× help, k = 5 pairs is far from 80 %
    assert paired_power(5, 0.25, 20, math.log(1.3)) < 0.5


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


def test_the_noise_lift_says_when_t_beyond_noise_is_power_limited() -> None:
    """At CV 25 % a 1.1× help is rarely beyond the limit (T>n is a lower bound); at CV 1 %
    with 3 repeats per arm both 1.1× and 1.3× are found; the figure is the normal tail beyond
    the band's limit."""
    rows = []
    for rep in (1, 2, 3):
        rows += [
            _attempt("p01", "cute", "solo", rep, 1.0),
            _attempt("p01", "tirx", "solo", rep, 1.0),
            _attempt("p01", "tirx", "skill", rep, 1 / 1.1),
        ]
    comps = [c for c in metrics.comparisons(rows) if c.direction == "cute->tirx"]
    noisy = Band("p01", "h", 10, 30, 20, sigma=0.25, dsl="tirx")
    quiet = Band("p01", "h", 10, 30, 20, sigma=0.01, dsl="tirx")
    loud = noise_power_note(comps, {noisy.key: noisy})
    calm = noise_power_note(comps, {quiet.key: quiet})
    assert loud is not None and calm is not None
    assert loud["power_limited"] and not calm["power_limited"]
    assert loud["detect"]["0.1"] < 0.2 and calm["detect"]["0.1"] > 0.95
    sd = 0.25 * math.sqrt(2 * median_variance(3))
    limit = tolerance_factor(20) * sd
    tail = 1 - Z.cdf((limit - math.log(1.1)) / sd) + Z.cdf((-limit - math.log(1.1)) / sd)
    assert loud["detect"]["0.1"] == pytest.approx(tail)
    assert noise_power_note(comps, {}) is None  # no band in use: no note


def test_the_launch_forms_line_carries_the_per_comparison_planner() -> None:
    from engine.analysis.power_store import summary_line

    bands = [
        Band("p01", "h", 10, 30, 20, sigma=0.03, dsl="cute"),
        Band("p02", "h", 10, 30, 20, sigma=0.25, dsl="tirx"),
    ]
    result = {
        "pilot": "e",
        "preview": False,
        "repeats": 3,
        "power": 0.8,
        "lifts": [0.1],
        "cells": [{"family": "all", "lifts": [{"power": 0.5}]}],
        "per_comparison": comparison_plan(bands, 3),
    }
    line = summary_line(result)
    quiet = paired_power(3, 0.03, 20, math.log(1.1))
    noisy = paired_power(3, 0.25, 20, math.log(1.1))
    assert f"calls a 1.1× help {noisy:.0%}–{quiet:.0%}" in line
    assert f"k={pairs_needed(math.log(1.1), 0.25, 20)} on the noisiest band" in line
