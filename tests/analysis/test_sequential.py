"""The adaptive stopping rule (engine/analysis/sequential.py): clear comparisons stop at 2
pairs, close ones go on, hopeless ones stop for futility, the false-stop rate of null
comparisons stays at α over all looks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.analysis.paired_test import paired_test
from engine.analysis.sequential import (
    arms_band,
    conditional_power,
    decide,
    look_weight,
    sequential_p,
    spent,
)

SIGMA = 0.03  # CV 3 % per grading


def test_look_weights_spend_exactly_alpha_most_at_the_end() -> None:
    for max_pairs in (2, 3, 5, 10, 40):
        weights = [look_weight(k, max_pairs) for k in range(1, max_pairs + 2)]
        assert weights[0] == 0.0 and weights[-1] == 0.0  # no look at 1 pair, none past the end
        assert sum(weights) == pytest.approx(1.0)
        if max_pairs > 2:  # O'Brien–Fleming type: later looks spend more
            assert weights[1] < weights[max_pairs - 1]
    assert spent(0.0) == 0.0 and spent(1.0) == pytest.approx(1.0)
    # the 5 % Lan–DeMets O'Brien–Fleming curve at t = 1/2: 2 − 2Φ(1.96 · √2) = 0.00557
    assert spent(0.5, 0.05) == pytest.approx(0.00557, abs=1e-5)


def test_a_clear_comparison_stops_at_two_pairs_with_its_sign() -> None:
    help_diffs = [math.log(1.3) + 0.01, math.log(1.3) - 0.02]
    assert decide(help_diffs, SIGMA, 20, max_pairs=10) == "help"
    assert decide([-d for d in help_diffs], SIGMA, 20, max_pairs=10) == "harm"


def test_a_close_comparison_keeps_going_then_ends_within() -> None:
    close = [0.08, 0.02]
    assert decide(close, SIGMA, 20, max_pairs=10) == "continue"
    assert decide(close[:1], SIGMA, 20, max_pairs=10) == "continue"  # no look at one pair
    noisy = [0.05, -0.04, 0.06, -0.03, 0.02]
    assert decide(noisy, SIGMA, 20, max_pairs=5) == "within"  # max reached, nothing beyond


def test_within_when_the_interval_excludes_a_relevant_effect() -> None:
    tight = [0.001, -0.002, 0.0015, -0.001, 0.0005, 0.0]
    assert decide(tight, 0.003, 20, max_pairs=20) == "within"
    # the same differences under a wide band cannot exclude 10 %: no equivalence stop ...
    assert decide(tight[:2], 0.10, 20, max_pairs=20, futility=0.0) == "continue"
    # ... but no trend either: 18 more pairs would hardly reach the boundary (futility)
    assert decide(tight[:2], 0.10, 20, max_pairs=20) == "futile"


def test_no_band_and_no_spread_is_no_test() -> None:
    assert decide([0.1, 0.1], None, 0, max_pairs=6) == "continue"
    assert decide([0.1] * 6, None, 0, max_pairs=6) == "within"
    with pytest.raises(ValueError, match="max_pairs"):
        decide([0.1, 0.2], SIGMA, 20, max_pairs=1)


def test_null_comparisons_stop_falsely_at_most_alpha_over_all_looks() -> None:
    """Simulated A/A sequences (800, up to 8 pairs): the share stopped help/harm stays ≤ α;
    testing each look at the full α (no spending) would stop about 3× as often."""
    rng = np.random.default_rng(7)
    max_pairs, runs, false, naive = 8, 800, 0, 0
    for _ in range(runs):
        diffs = rng.normal(0.0, math.sqrt(2) * SIGMA, max_pairs).tolist()
        for k in range(2, max_pairs + 1):
            call = decide(diffs[:k], SIGMA, 20, max_pairs)
            if call != "continue":
                false += call in ("help", "harm")
                break
        naive += any(p is not None and p <= 0.05 for p in _plain_ps(diffs))
    assert false / runs <= 0.05
    assert naive / runs > 0.10


def _plain_ps(diffs: list[float]) -> list[float | None]:
    return [paired_test(diffs[:k], math.sqrt(2) * SIGMA, 20).p for k in range(2, len(diffs) + 1)]


def test_sequential_p_is_at_most_alpha_when_the_rule_stops_beyond_noise() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        diffs = rng.normal(math.log(1.1), math.sqrt(2) * SIGMA, 6).tolist()
        for k in range(2, 7):
            call = decide(diffs[:k], SIGMA, 20, 6)
            p = sequential_p(diffs[:k], SIGMA, 20, 6)
            assert p is not None
            if call in ("help", "harm"):
                assert p <= 0.01  # STOP_SHARE · α
                break
            if call == "within":
                break


def _first_stop(diffs: list[float], sigma: float, max_pairs: int, futility: float) -> tuple:
    """(decision, pairs) where the rule first stops on ``diffs`` (at most ``max_pairs``)."""
    for k in range(2, max_pairs + 1):
        call = decide(diffs[:k], sigma, 20, max_pairs, futility=futility)
        if call != "continue":
            return call, k
    raise AssertionError("the rule never stopped by max_pairs")


def test_conditional_power_follows_the_trend() -> None:
    sd = math.sqrt(2) * 0.10
    assert conditional_power(0.0, sd, 2, 5) < 0.10  # no trend: hopeless
    assert conditional_power(math.log(1.3), sd, 2, 5) > 0.5  # a 1.3x trend: likely
    # symmetric in the sign, more information → more certainty either way
    assert conditional_power(-0.1, sd, 3, 5) == pytest.approx(conditional_power(0.1, sd, 3, 5))
    assert conditional_power(0.02, sd, 4, 5) < conditional_power(0.02, sd, 2, 5)
    assert conditional_power(0.0, sd, 5, 5) == 1.0  # the last look: nothing to curtail


def test_a_null_at_cv25_stops_for_futility_within_three_pairs() -> None:
    """Simulated A/A sequences at CV 25 % (300, up to 5 pairs): most stop ``futile`` by the
    third pair; without the futility rule none stops before the end."""
    rng = np.random.default_rng(11)
    sigma, runs, early, plain_early = 0.25, 300, 0, 0
    for _ in range(runs):
        diffs = rng.normal(0.0, math.sqrt(2) * sigma, 5).tolist()
        call, k = _first_stop(diffs, sigma, 5, futility=0.10)
        early += call == "futile" and k <= 3
        plain_early += _first_stop(diffs, sigma, 5, futility=0.0)[1] <= 3
    assert early / runs >= 0.75
    assert plain_early / runs <= 0.05


def test_futility_is_non_binding_and_costs_little_power() -> None:
    """Simulated sequences at CV 10 % (400 null, 400 at 1.3×, up to 5 pairs): with futility the
    null false stops stay ≤ α and never exceed those without it; a 1.3× help is stopped beyond
    noise or ends with a sequential p ≤ α nearly as often as without futility (≤ 5 points
    lost), with fewer pairs."""
    rng = np.random.default_rng(5)
    sigma, runs = 0.10, 400
    false = {0.10: 0, 0.0: 0}
    found = {0.10: 0, 0.0: 0}
    pairs = {0.10: 0, 0.0: 0}
    for _ in range(runs):
        null = rng.normal(0.0, math.sqrt(2) * sigma, 5).tolist()
        real = rng.normal(math.log(1.3), math.sqrt(2) * sigma, 5).tolist()
        for futility in false:
            false[futility] += _first_stop(null, sigma, 5, futility)[0] in ("help", "harm")
            call, k = _first_stop(real, sigma, 5, futility)
            p = sequential_p(real[:k], sigma, 20, 5)
            found[futility] += call == "help" or (call != "harm" and p is not None and p <= 0.05)
            pairs[futility] += k
    assert false[0.10] <= false[0.0] and false[0.10] / runs <= 0.05
    assert found[0.10] >= found[0.0] - 0.05 * runs
    assert found[0.10] / runs >= 0.7
    assert pairs[0.10] <= pairs[0.0]


def test_no_band_no_futility_stop() -> None:
    """Without a band the pair's own SD has k − 1 dof: no conditional power is computed."""
    flat = [0.10, -0.12, 0.05]
    assert decide(flat, None, 0, max_pairs=6) == "continue"
    assert decide(flat, 0.25, 20, max_pairs=6) == "futile"


def test_a_provisional_band_serves_the_futility_stop_and_nothing_else() -> None:
    """Without the (problem, DSL, host) band there was no futility stop at all; a provisional
    band gives one, but never an efficacy or equivalence stop (those need the band)."""
    flat = [0.03, -0.03]  # no trend: 18 more pairs would hardly reach the boundary
    assert decide(flat, None, 0, max_pairs=20) == "continue"
    assert decide(flat, None, 0, max_pairs=20, provisional=(0.10, 20)) == "futile"
    assert decide(flat, None, 0, max_pairs=20, provisional=(None, 0)) == "continue"
    clear = [math.log(1.3) + 0.01, math.log(1.3) - 0.02]  # "help" at 2 pairs with the band
    assert decide(clear, SIGMA, 20, max_pairs=10) == "help"
    assert decide(clear, None, 0, max_pairs=10, provisional=(SIGMA, 20)) == "continue"
    # with the band itself, the provisional one is not read
    assert decide(flat, 0.10, 20, max_pairs=20, futility=0.0, provisional=(0.10, 20)) == (
        "continue"
    )


def test_a_pairs_band_takes_both_arms() -> None:
    """A difference of a baseline and a treatment grading has variance σ_b² + σ_t²: the pair's
    band is their root mean square (2σ² = σ_b² + σ_t²), with the smaller dof; none unless both
    arms have a band (the engine read the baseline's alone)."""
    sigma, dof = arms_band((0.03, 20), (0.25, 8))
    assert sigma is not None
    assert sigma == pytest.approx(math.sqrt((0.03**2 + 0.25**2) / 2)) and dof == 8
    assert 2 * sigma**2 == pytest.approx(0.03**2 + 0.25**2)
    assert arms_band((0.03, 20), (None, 0)) == (None, 0)
    assert arms_band((None, 0), (0.03, 20)) == (None, 0)
