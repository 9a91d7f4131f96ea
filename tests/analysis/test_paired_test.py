"""The per-comparison paired test (engine/analysis/paired_test.py): the shrunk variance, the t
interval and p-value, Benjamini–Hochberg q-values and the call."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from engine.analysis.paired_test import (
    PRIOR_DOF_CAP,
    bh_qvalues,
    call_of,
    log_differences,
    paired_test,
    paired_test_gradings,
    pairing_status,
    prior_of,
    same_slot,
    sigma_upper,
)


def test_without_a_band_it_is_the_plain_paired_t_test() -> None:
    diffs = [0.05, 0.12, 0.02, 0.09]
    est = paired_test(diffs)
    ref = sps.ttest_1samp(diffs, 0.0)
    assert est.p == pytest.approx(ref.pvalue) and est.dof == 3 and not est.prior
    low, high = ref.confidence_interval(0.95)
    assert (est.low, est.high) == (pytest.approx(low), pytest.approx(high))
    assert est.log_rho == pytest.approx(np.mean(diffs))


def test_the_band_shrinks_the_pairs_own_variance_with_its_capped_dof() -> None:
    diffs = [0.30, 0.02, 0.16]  # own s² = 0.0196
    prior_sd, prior_dof = 0.05, 200  # counts as PRIOR_DOF_CAP
    est = paired_test(diffs, prior_sd, prior_dof)
    own = float(np.var(diffs, ddof=1))
    post = (PRIOR_DOF_CAP * prior_sd**2 + 2 * own) / (PRIOR_DOF_CAP + 2)
    assert est.sd == pytest.approx(math.sqrt(post))
    assert est.dof == PRIOR_DOF_CAP + 2 and est.prior
    t = est.log_rho / (est.sd / math.sqrt(3))  # type: ignore[operator]
    assert est.p == pytest.approx(2 * sps.t.sf(t, PRIOR_DOF_CAP + 2))
    # two pairs and a band: a test with the band's dof; no band: one dof; one pair, no band: none
    assert paired_test([0.2, 0.25], 0.04, 10).dof == 11
    assert paired_test([0.2, 0.25]).dof == 1
    single = paired_test([0.2])
    assert single.p is None and call_of(single, None) == "untested"
    assert paired_test([0.2], 0.04, 10).dof == 10


def test_prior_of_needs_a_band_on_every_arm() -> None:
    sd, dof = prior_of([0.03, 0.04], [12, 30])
    assert sd == pytest.approx(0.05) and dof == 12
    assert prior_of([0.03, None], [12, 0]) == (None, 0)
    assert prior_of([0.03, 0.04], [500, 800])[1] == PRIOR_DOF_CAP


def test_log_differences_skip_pairs_with_a_bad_runtime() -> None:
    diffs = log_differences([2.0, 0.0, 1.0, math.inf, 3.0], [1.0, 1.0, -1.0, 1.0, math.nan])
    assert diffs == [pytest.approx(math.log(2.0))]


def test_bh_qvalues_match_scipy_and_skip_untested() -> None:
    ps = [0.001, 0.04, 0.03, 0.2, 0.011, 0.5]
    q = bh_qvalues([*ps[:3], None, *ps[3:]])
    expected = sps.false_discovery_control(ps, method="bh")
    assert q[3] is None
    assert [x for x in q if x is not None] == pytest.approx(list(expected))


def test_call_by_q_and_sign() -> None:
    help_ = paired_test([0.26, 0.27, 0.25], 0.04, 20)
    harm = paired_test([-0.26, -0.27, -0.25], 0.04, 20)
    assert call_of(help_, 0.01) == "help" and call_of(harm, 0.01) == "harm"
    assert call_of(help_, 0.06) == "within"


def test_a_2x_outlier_is_rejected_and_counted_not_called() -> None:
    clean = [0.01, -0.02, 0.015, 0.0]
    spoiled = [*clean, math.log(2.0)]  # one grading slowed 2×
    est = paired_test(spoiled, 0.04, 20)
    assert est.rejected == 1 and est.k == 4
    assert est.log_rho == pytest.approx(np.mean(clean))
    assert est.p is not None and est.p > 0.05
    # two pairs that disagree so: which is wrong cannot be told, no test
    two = paired_test([0.0, math.log(2.0)], 0.04, 20)
    assert two.p is None and two.note == "outlier-dominated" and call_of(two, None) == "untested"
    # without a band the MAD of 3+ differences is the reference
    assert paired_test([0.01, 0.02, 0.015, 0.012, 0.9]).rejected == 1


def test_two_slow_gradings_in_one_arm_of_three_pairs_are_caught() -> None:
    # the baseline's 2nd and 3rd gradings ran 2x slow: the differences' median is an outlier's
    base = [1.00, 2.01, 1.99]
    treat = [1.01, 0.99, 1.00]
    est = paired_test_gradings(base, treat, (0.03, 0.03), 20)
    assert (est.rejected_gradings, est.dropped_pairs, est.outlier_basis) == (2, 2, "band")
    # with a band the one clean pair is tested on the band's variance: within, not help
    assert est.k == 1 and est.p is not None and est.p > 0.5  # old rule: p ≈ 1e-16, help
    # without a band the arm's own spread bounds it, and two of three dropped leave no test
    bare = paired_test_gradings(base, treat)
    assert (bare.rejected_gradings, bare.outlier_basis, bare.p) == (2, "own spread", None)
    assert bare.note.startswith("outlier-dominated") and call_of(bare, None) == "untested"
    five = paired_test_gradings([*base, 1.0, 1.02], [*treat, 1.0, 0.98], (0.03, 0.03), 20)
    assert (five.k, five.dropped_pairs) == (3, 2)
    assert five.p is not None and five.p > 0.05 and abs(five.log_rho or 1.0) < 0.03


def test_the_files_own_finals_show_an_arm_slowed_in_every_grading() -> None:
    # two pairs, the treatment 2x slow in both: the arm alone cannot tell, its file's solo
    # final on the same host can
    base, treat = [0.50, 0.49], [0.97, 0.98]
    assert call_of(paired_test_gradings(base, treat, (0.03, 0.03), 20), 0.001) == "harm"
    est = paired_test_gradings(base, treat, (0.03, 0.03), 20, refs=([0.5], [0.51]))
    assert (est.rejected_gradings, est.dropped_pairs, est.p) == (2, 2, None)
    assert est.note == "outlier-dominated: 2 of 2 pairs dropped"


def test_a_clean_comparison_loses_nothing() -> None:
    # within 1.5x of each arm's fastest nothing is an outlier, whatever the spread of the
    # differences (here their MAD is tiny and the third difference 50 MADs from the median)
    base = [1.0, 1.0, 1.0]
    treat = [1.0, 0.999, 0.95]
    for sigmas in ((None, None), (0.005, 0.005)):
        est = paired_test_gradings(base, treat, sigmas, 20)
        assert (est.rejected_gradings, est.dropped_pairs, est.rejected, est.k) == (0, 0, 0, 3)
        assert est.log_rho == pytest.approx(np.mean(log_differences(base, treat)))
    rng = np.random.default_rng(7)
    for _ in range(200):  # CV 25 % at its band: no clean grading is judged slow
        b, t = np.exp(rng.normal(0, 0.25, 5)), np.exp(rng.normal(0, 0.25, 5))
        assert paired_test_gradings(list(b), list(t), (0.25, 0.25), 20).rejected_gradings == 0


def test_sigma_upper_is_the_chi2_upper_confidence_bound() -> None:
    for dof in (1, 4, 8, 20):
        expected = 0.1 * math.sqrt(dof / sps.chi2.ppf(0.05, dof))
        assert sigma_upper(0.1, dof) == pytest.approx(expected)
    assert sigma_upper(0.1, None) == 0.1  # σ taken as known
    with pytest.raises(ValueError):
        sigma_upper(0.1, 0)


def test_a_band_small_by_chance_does_not_trim_genuine_gradings() -> None:
    # CV 25 %, a band of 4 dof that came out at 0.09 by chance: a 1.9x grading is 2.6 true σ
    # (within noise); the point estimate's bound (log 1.9 > 5·√2·0.09) dropped its pair
    base, treat = [1.0, 1.9, 1.05], [1.0, 1.1, 0.95]
    assert paired_test_gradings(base, treat, (0.09, 0.09), 4).rejected_gradings == 0
    # a real 2x outlier at a 4-dof band of a quiet (CV 3 %) problem is still caught
    quiet = paired_test_gradings([1.0, 2.0, 1.02], [1.0, 1.01, 0.99], (0.03, 0.03), 4)
    assert (quiet.rejected_gradings, quiet.dropped_pairs) == (1, 1)


def test_clean_null_comparisons_at_small_bands_keep_their_gradings() -> None:
    # bands of 4 dof drawn as σ·√(χ²₄/4), CV 25 %, k = 3: judged against σ̂ itself 2.8 % of
    # clean comparisons lost a grading (each loss shrinks the pair's spread: a false call's
    # far tail); against σ̂'s upper bound 0.1 %
    rng = np.random.default_rng(1)
    trimmed = 0
    for _ in range(2000):
        band = 0.25 * math.sqrt(rng.chisquare(4) / 4)
        b, t = np.exp(rng.normal(0, 0.25, 3)), np.exp(rng.normal(0, 0.25, 3))
        est = paired_test_gradings(list(b), list(t), (band, band), 4)
        trimmed += est.rejected_gradings > 0
    assert trimmed / 2000 < 0.01


def test_the_report_counts_rejected_gradings() -> None:
    from engine.analysis.noise_text import outlier_lines
    from engine.analysis.paired_lift import outlier_totals

    spoiled = paired_test_gradings([1.0, 2.0, 1.01, 1.0, 0.99], [1.0] * 5, (0.03, 0.03), 20)
    clean = paired_test_gradings([1.0] * 3, [1.01, 1.0, 0.99], (0.03, 0.03), 20)
    rows = [{"clocks": {"e2e": e.as_dict(), "span": clean.as_dict()}} for e in (spoiled, clean)]
    totals = outlier_totals(rows)
    assert totals["e2e"] == {"rejected_gradings": 1, "dropped_pairs": 1, "comparisons": 1}
    assert totals["span"]["rejected_gradings"] == 0
    assert "end to end): 1 grading(s) rejected, 1 pair(s) dropped" in outlier_lines(totals)[0]


def test_pairing_status() -> None:
    assert pairing_status([]) == "unpaired"
    assert pairing_status([("h:gpu0", "h:gpu0"), ("h:gpu1", "h:gpu1")]) == "paired"
    # a pair split over two machines is left out (same_slot); the others still pair
    assert pairing_status([("h:gpu0", "h:gpu0"), ("h:gpu0", "g:gpu0")]) == "paired"
    assert same_slot([("h:gpu0", "h:gpu0"), ("h:gpu0", "g:gpu0")]) == [True, False]
    assert pairing_status([("h:gpu0", "g:gpu0"), ("g:gpu0", "h:gpu0")]) == "cross_host"
