"""A/A bands and the noise-aware classification (engine/analysis/noise.py, noise_lift.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from engine.analysis import metrics
from engine.analysis.noise import (
    MEDIAN_VARIANCE,
    MIN_DOF,
    Z95,
    Band,
    Series,
    check_time_source,
    chi2_quantile,
    median_variance,
    pool,
    spread,
    tolerance_factor,
)
from engine.analysis.noise_lift import classify, noise_lift_table
from engine.analysis.outcomes import OutcomeSet, ScoredAttempt, load_jsonl, to_jsonl
from engine.analysis.report import AnalysisOptions, analyze
from engine.analysis.text import render_text


def test_median_variance_table_matches_simulation() -> None:
    rng = np.random.default_rng(7)
    for repeats in (1, 2, 3, 4, 5, 8, 11):
        draws = np.median(rng.standard_normal((60_000, repeats)), axis=1)
        assert draws.var() == pytest.approx(MEDIAN_VARIANCE[repeats - 1], rel=0.03)
    assert median_variance(40) == pytest.approx(math.pi / 80)
    with pytest.raises(ValueError):
        median_variance(0)


@pytest.mark.parametrize("dof", [1, 2, 4, 9, 30, 160, 1000])
def test_chi2_quantile_matches_scipy(dof: int) -> None:
    for p in (0.05, 0.5, 0.95):
        assert chi2_quantile(p, dof) == pytest.approx(scipy_stats.chi2.ppf(p, dof), rel=1e-7)


def test_tolerance_factor_shrinks_to_z_as_dof_grow() -> None:
    factors = [tolerance_factor(d) for d in (4, 10, 40, 400, 40_000)]
    assert factors == sorted(factors, reverse=True)
    assert factors[0] == pytest.approx(4.65, abs=0.01)  # 5 gradings of one file
    assert factors[-1] == pytest.approx(Z95, rel=0.01)


def test_pool_recovers_sigma_and_needs_four_dof() -> None:
    rng = random.Random(3)
    sigma = 0.05
    series = [
        Series("p28", "h", tuple(math.exp(rng.gauss(0, sigma)) * (1 + i) for _ in range(3)))
        for i in range(200)  # different files (runtimes), same noise
    ]
    series.append(Series("p36", "h", (1.0, 1.1, 1.2)))  # 2 dof: no band
    series.append(Series("p36", "h", (2.0,)))  # one grading: no dof at all
    bands = pool(series)
    band = bands[("p28", "", "h")]
    assert band.dof == 400 and band.series == 200 and band.gradings == 600
    assert band.sigma == pytest.approx(sigma, rel=0.1)
    assert band.aa_band == pytest.approx(Z95 * math.sqrt(2) * band.sigma)
    assert band.limit(3, 3) < band.limit(1, 1)
    assert band.limit(1, 1) == pytest.approx(tolerance_factor(400) * band.sigma * math.sqrt(2))
    p36 = bands[("p36", "", "h")]
    assert p36.dof == 2 < MIN_DOF and p36.sigma is None and p36.limit(1, 1) is None


def test_spread_of_one_series() -> None:
    out = spread([1.0, 1.1, 0.9, 1.05, 0.95])
    assert out["n"] == 5 and out["median_ms"] == 1.0 and out["min_ms"] == 0.9
    assert out["pairwise_low"] == pytest.approx(-out["pairwise_high"])  # log ratios: symmetric
    assert spread([])["sigma"] is None and spread([2.0])["sigma"] is None


def test_time_source_is_a_parameter() -> None:
    assert check_time_source("e2e") == "impl_median_ms"
    assert check_time_source("span") == "span_ms"
    with pytest.raises(ValueError, match="time source"):
        check_time_source("host")


def _row(
    problem: str,
    dsl: str,
    arm: str,
    rep: int,
    passed: bool,
    runtime: float | None,
    repeats: tuple[float, ...] = (),
    host: str = "h",
) -> ScoredAttempt:
    return ScoredAttempt(
        "m",
        problem,
        "Attention",
        dsl,
        arm,
        rep,
        passed,
        runtime,
        1.0,
        repeats_ms=repeats,
        host=host,
    )


def _comparison(base: ScoredAttempt, treat: ScoredAttempt | None) -> metrics.Comparison:
    source = _row(base.problem, "cute", "solo", 1, True, 1.0)
    comps = metrics.comparisons([source, base] + ([treat] if treat else []))
    return next(c for c in comps if c.direction == "cute->tirx")


def test_classification_rules() -> None:
    band = Band("p01", "h", series=10, gradings=30, dof=20, sigma=0.02, dsl="tirx")
    bands = {band.key: band}
    limit = band.limit(3, 3)
    assert limit is not None
    reps = (1.0, 1.0, 1.0)

    def call(
        base_rt: float | None,
        treat_rt: float | None,
        *,
        base_ok: bool = True,
        treat_ok: bool = True,
        host: str = "h",
    ) -> str:
        base = _row("p01", "tirx", "solo", 1, base_ok, base_rt, reps)
        treat = _row("p01", "tirx", "skill", 1, treat_ok, treat_rt, reps, host=host)
        return classify(_comparison(base, treat), bands).noise

    inside = math.exp(0.9 * limit)
    outside = math.exp(1.1 * limit)
    assert call(inside, 1.0) == "within"  # strict help, within noise
    assert call(1.0, inside) == "within"  # strict harm, within noise
    assert call(outside, 1.0) == "help" and call(1.0, outside) == "harm"
    assert call(1.0, 1.0) == "within"  # ρ exactly 1 with both passing
    # verdict changes are never within noise, however small the runtimes' difference
    assert call(None, 1.0, base_ok=False) == "help"
    assert call(1.0, None, treat_ok=False) == "harm"
    assert call(None, None, base_ok=False, treat_ok=False) == "neutral"
    # arms graded on different hosts: never judged on their runtimes, however far apart
    assert call(inside, 1.0, host="elsewhere") == "cross_host"
    assert call(outside**3, 1.0, host="elsewhere") == "cross_host"
    assert call(None, 1.0, base_ok=False, host="elsewhere") == "help"  # a rescue still is


def test_noise_table_keeps_the_strict_rates_and_counts_within_noise() -> None:
    band = Band("p01", "h", series=10, gradings=30, dof=20, sigma=0.02)
    limit = band.limit(1, 1)
    assert limit is not None
    rows = [_row("p01", "cute", "solo", r, True, 1.0) for r in (1, 2, 3, 4)]
    treatments = [math.exp(-0.5 * limit), math.exp(-2 * limit), math.exp(0.5 * limit), 1.0]
    rows += [_row("p01", "tirx", "solo", r, True, 1.0) for r in (1, 2, 3, 4)]
    rows += [_row("p01", "tirx", "skill", r, True, t) for r, t in zip((1, 2, 3, 4), treatments)]
    comps = [c for c in metrics.comparisons(rows) if c.direction == "cute->tirx"]
    table, calls = noise_lift_table(comps, {("p01", "tirx", "h"): band})
    all_row = next(r for r in table if r["family"] == "all")
    strict = metrics.lift(comps)
    assert (all_row["help_rate"], all_row["harm_rate"]) == (strict.help_rate, strict.harm_rate)
    assert all_row["help_rate"] == 0.5 and all_row["harm_rate"] == 0.25  # 2 help, 1 harm
    assert all_row["help_beyond_noise"] == 0.25 and all_row["within_noise"] == 0.75
    assert all_row["strict_help_within_noise"] == 0.5  # one of the two helps
    assert all_row["strict_harm_within_noise"] == 1.0
    assert sorted(c.noise for c in calls.values()) == ["help", "within", "within", "within"]


def test_report_from_a_file_with_repeats(tmp_path: Path) -> None:
    """Outcomes from a file carry their repeats; bands come from them; the text says so."""
    rng = random.Random(5)
    rows = []
    for rep in range(1, 9):
        for dsl in ("cute", "tirx"):
            for arm in ("solo", "skill"):
                repeats = tuple(math.exp(rng.gauss(0, 0.03)) for _ in range(3))
                rows.append(_row("p28", dsl, arm, rep, True, sorted(repeats)[1], repeats))
    path = tmp_path / "outcomes.jsonl"
    path.write_text(to_jsonl(OutcomeSet(rows)))
    loaded = load_jsonl(path)
    assert loaded.rows[0].repeats_ms == rows[0].repeats_ms and loaded.rows[0].host == "h"
    report = analyze(
        loaded, AnalysisOptions(permutation_draws=50, swap_draws=20, bootstrap_draws=20)
    )
    cute, tirx = report["noise"]["bands"]  # one band per DSL
    assert (cute["dsl"], tirx["dsl"]) == ("cute", "tirx")
    for band in (cute, tirx):
        assert band["dof"] == 32 and band["sigma"] == pytest.approx(0.03, rel=0.35)
    assert {c["noise"] for c in report["comparisons"]} <= {"help", "harm", "within"}
    assert sum(c["noise"] == "within" for c in report["comparisons"]) >= 14  # of 16 A/A
    assert all(c["host_base"] == c["host_treat"] == "h" for c in report["comparisons"])
    text = render_text(report)
    assert "Noise-aware lift" in text and "A/A bands per problem" in text
    json.dumps(report)  # JSON-ready


def test_bad_repeats_in_a_file_name_the_line(tmp_path: Path) -> None:
    from engine.analysis.outcomes import OutcomeError

    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps(
            {
                "model": "m",
                "problem": "p01",
                "dsl": "cute",
                "arm": "solo",
                "replicate": 1,
                "passed": True,
                "runtime_ms": 1.0,
                "runtime_repeats_ms": [1.0, -2],
            }
        )
        + "\n"
    )
    with pytest.raises(OutcomeError, match="bad.jsonl:1: runtime_repeats_ms"):
        load_jsonl(path)


@pytest.mark.parametrize("dof", [8, 48, 400])
def test_the_limit_keeps_aa_within_noise_and_finds_ten_percent(dof: int) -> None:
    """Calibration by simulation: medians of 3 log-normal gradings per arm (CV 3 %), σ̂ from
    ``dof`` degrees of freedom. A/A pairs fall within the limit ≥ 95 % of the time; a 10 %
    lower treatment runtime is beyond it (help) ≥ 80 % of the time once dof ≥ 48."""
    rng = np.random.default_rng(dof)
    trials, sigma = 20_000, math.sqrt(math.log1p(0.03**2))
    sigma_hat = sigma * np.sqrt(rng.chisquare(dof, trials) / dof)
    limit = tolerance_factor(dof) * sigma_hat * math.sqrt(2 * median_variance(3))

    def log_medians(shift: float) -> np.ndarray:
        return np.median(rng.normal(shift, sigma, (trials, 3)), axis=1)

    aa = log_medians(0.0) - log_medians(0.0)
    assert (np.abs(aa) <= limit).mean() >= 0.95
    helped = log_medians(0.0) - log_medians(math.log(0.9))
    if dof >= 48:
        assert (helped > limit).mean() >= 0.80


def _gradings(rng: random.Random, sigma: float, n: int) -> tuple[float, ...]:
    return tuple(math.exp(rng.gauss(0, sigma)) for _ in range(n))


def test_bands_are_kept_apart_by_dsl() -> None:
    """CuTe at CV 3 % and TIRx at 25 % on one problem and host: two bands, each its own σ."""
    rng = random.Random(11)
    series = [Series("p28", "h", _gradings(rng, 0.03, 4), dsl="cute") for _ in range(20)]
    series += [Series("p28", "h", _gradings(rng, 0.25, 4), dsl="tirx") for _ in range(20)]
    bands = pool(series)
    assert set(bands) == {("p28", "cute", "h"), ("p28", "tirx", "h")}
    assert bands[("p28", "cute", "h")].sigma == pytest.approx(0.03, rel=0.25)
    assert bands[("p28", "tirx", "h")].sigma == pytest.approx(0.25, rel=0.25)


def test_degenerate_bands_have_none_and_say_why() -> None:
    same = pool([Series("p01", "h", (2.0, 2.0, 2.0)), Series("p01", "h", (3.0, 3.0, 3.0))])
    band = same[("p01", "", "h")]
    assert band.sigma is None and band.dof == 4 and "zero spread" in band.reason
    few = pool([Series("p01", "h", (1.0, 1.1, 1.2))])[("p01", "", "h")]
    assert few.sigma is None and few.reason == "2 dof < 4"
    assert few.as_dict()["reason"] == "2 dof < 4"


def test_one_2x_outlier_among_twelve_gradings_is_rejected_and_counted() -> None:
    rng = random.Random(4)
    values = list(_gradings(rng, 0.03, 12))
    values[5] *= 2.0
    band = pool([Series("p01", "h", tuple(values))])[("p01", "", "h")]
    assert band.rejected == 1 and band.gradings == 11 and band.dof == 10
    assert band.sigma == pytest.approx(0.03, rel=0.5)  # not tenfold
    # a third of the gradings wild (one file scattered 32×): outlier-dominated, no band
    flat = [Series("p01", "h", _gradings(rng, 0.01, 6)) for _ in range(2)]
    wild = Series("p01", "h", (1.0, 2.0, 4.0, 8.0, 0.5, 0.25))
    dominated = pool([wild, *flat])[("p01", "", "h")]
    assert dominated.sigma is None and dominated.rejected >= 6
    assert dominated.reason.startswith("outlier-dominated")


def test_an_attempt_graded_on_two_hosts_names_both_and_needs_both_bands(db_path: Path) -> None:
    from engine.analysis.noise_store import attach_repeats
    from storage import repeats, writes
    from storage.db import open_db

    db = open_db(db_path)
    writes.create_experiment(db, "e", "e")
    aid = writes.ensure_attempt(
        db, "e", "k", model="m", problem_id="p01", dsl="tirx", arm="solo_tirx"
    )
    start = {"kind": "final", "problem_id": "p01", "dsl": "tirx", "source": "x"}
    for k, host in enumerate(["b", "a", "b"], 1):
        feedback = {"verdict": "pass", "impl_median_ms": 1.0 + k / 100}
        key = repeats.final_series(aid, 1)
        repeats.record_repeat(
            db, key, k, feedback, **start, host=host, experiment_id="e", attempt_id=aid
        )
    (row,), series, _ = attach_repeats(
        db, "e", [_row("p01", "tirx", "solo", 1, True, 1.0)], [aid]
    )
    assert row.host == "a + b" and len(row.repeats_ms) == 3
    assert sorted(s.host for s in series) == ["a", "b"]
    treat = _row("p01", "tirx", "skill", 1, True, 1.0, host="a + b")
    comp = _comparison(row, treat)
    only_a = {("p01", "tirx", "a"): Band("p01", "a", 5, 15, 10, 0.02, dsl="tirx")}
    assert classify(comp, only_a).noise == "unknown"  # host b has no band
    both = {**only_a, ("p01", "tirx", "b"): Band("p01", "b", 5, 15, 10, 0.05, dsl="tirx")}
    assert classify(comp, both).limit == both[("p01", "tirx", "b")].limit(3, 1)  # the wider
    one_host = _comparison(row, _row("p01", "tirx", "skill", 1, True, 1.0, host="a"))
    assert classify(one_host, both).noise == "cross_host"  # a + b against a alone
    db.conn.close()
