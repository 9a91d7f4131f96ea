"""Hand-worked cases for every formula and edge of the analysis."""

from __future__ import annotations

import math

import pytest

from engine.analysis import metrics, stats
from engine.analysis.outcomes import ScoredAttempt
from engine.analysis.paired import ArmResult, rho, tier, verdict


def o(dsl: str, arm: str, passed: bool, runtime: float | None = None, ref: float = 10.0,
      *, problem: str = "p01", model: str = "m", rep: int = 1, family: str = "Attention",
      blank: bool = False, flags: tuple[str, ...] = ()) -> ScoredAttempt:
    return ScoredAttempt(model, problem, family, dsl, arm, rep, passed, runtime,
                         ref if passed else None, blank, flags)


def test_rho_cases() -> None:
    assert rho(ArmResult(True, 2.0), ArmResult(True, 1.0)) == 2.0  # raw runtimes
    assert rho(ArmResult(False), ArmResult(True, 1.0)) == 4.0  # rescue
    assert rho(ArmResult(True, 1.0), ArmResult(False)) == 0.25  # break
    assert rho(ArmResult(False), ArmResult(False)) == 1.0  # joint failure
    assert rho(ArmResult(True, 1.0), None) == 1.0  # skipped treatment
    assert [verdict(x) for x in (4.0, 0.25, 1.0)] == ["help", "harm", "neutral"]


def test_rho_uses_raw_runtimes_not_capped_speedups() -> None:
    base = ArmResult(True, 0.001, 1.0)  # 1000× → capped at 100×
    treat = ArmResult(True, 0.0005, 1.0)  # 2000× → capped at 100×
    assert base.speedup == treat.speedup == 100.0
    assert rho(base, treat) == pytest.approx(2.0)


def test_exchanging_baseline_and_treatment_inverts_rho() -> None:
    cases = [(ArmResult(True, 3.0), ArmResult(True, 1.5)), (ArmResult(False), ArmResult(True, 1)),
             (ArmResult(True, 1), ArmResult(False)), (ArmResult(False), ArmResult(False))]
    for a, b in cases:
        assert rho(a, b) * rho(b, a) == pytest.approx(1.0)


def test_tiers_with_tie_at_exactly_two() -> None:
    assert tier(ArmResult(False)) == 0
    assert tier(ArmResult(True, 5.0, 9.99)) == 1
    assert tier(ArmResult(True, 5.0, 10.0)) == 2  # exactly 2× is in the top tier


def test_solo_metrics_hand_worked() -> None:
    rows = [
        o("cute", "solo", True, 5.0, problem="p01"),  # 2×
        o("cute", "solo", True, 2.5, problem="p02"),  # 4×
        o("cute", "solo", True, 10.0, problem="p03"),  # 1×
        o("cute", "solo", False, problem="p04"),
    ]
    (s,) = metrics.solo_metrics(rows)
    assert s.n == 4 and s.passed == 3 and s.pass_rate == 0.75
    assert s.gm == pytest.approx((2 * 4 * 1) ** (1 / 3))
    assert s.r2 == 0.5  # two of four at ≥ 2×, the failure stays in the denominator


def test_solo_metrics_no_passing_attempts() -> None:
    (s,) = metrics.solo_metrics([o("tirx", "solo", False), o("tirx", "solo", False, problem="p2")])
    assert s.pass_rate == 0.0 and s.gm is None and s.r2 == 0.0


def test_arm_metrics_per_model_arm_and_dsl() -> None:
    rows = [
        o("cute", "solo", True, 5.0, problem="p01"),  # 2×
        o("cute", "solo", False, problem="p02"),
        o("tirx", "skill", True, 2.5, problem="p01"),  # 4× on the target DSL
        o("tirx", "skill", True, 10.0, problem="p02"),  # 1×
    ]
    arms = {(a["arm"], a["dsl"]): a for a in metrics.arm_metrics(rows)}
    assert set(arms) == {("solo", "cute"), ("skill", "tirx")}
    assert arms[("solo", "cute")]["pass_rate"] == 0.5 and arms[("solo", "cute")]["gm"] == 2.0
    skill = arms[("skill", "tirx")]
    assert skill["n"] == 2 and skill["pass_rate"] == 1.0 and skill["r2"] == 0.5
    assert skill["gm"] == pytest.approx(2.0)  # sqrt(4 × 1)


def test_speedup_cap_at_100() -> None:
    (s,) = metrics.solo_metrics([o("cute", "solo", True, 0.01, ref=10.0)])
    assert s.gm == pytest.approx(100.0)


def _problem(problem: str, cute: tuple, tirx: tuple, c2t: tuple | None, t2c: tuple | None,
             *, blank: bool = False, family: str = "Attention") -> list[ScoredAttempt]:
    rows = [o("cute", "solo", *cute, problem=problem, blank=blank, family=family),
            o("tirx", "solo", *tirx, problem=problem, family=family)]
    if c2t is not None:
        rows.append(o("tirx", "skill", *c2t, problem=problem, family=family))
    if t2c is not None:
        rows.append(o("cute", "skill", *t2c, problem=problem, family=family))
    return rows


def test_comparisons_and_lift_hand_worked() -> None:
    rows = (
        _problem("p01", (True, 2.0), (True, 4.0), (True, 2.0), (True, 4.0))  # c2t ρ=2, t2c ρ=.5
        + _problem("p02", (True, 2.0), (False,), (True, 1.0), (False,))  # rescue 4; break 1/4
        + _problem("p03", (False,), (False,), (False,), (False,))  # joint failures: 1, 1
    )
    comps = metrics.comparisons(rows)
    by = {(c.problem, c.direction): c.rho for c in comps}
    assert by == {("p01", "cute->tirx"): 2.0, ("p01", "tirx->cute"): 0.5,
                  ("p02", "cute->tirx"): 4.0, ("p02", "tirx->cute"): 0.25,
                  ("p03", "cute->tirx"): 1.0, ("p03", "tirx->cute"): 1.0}
    c2t = metrics.lift([c for c in comps if c.direction == "cute->tirx"])
    assert c2t.n == 3
    assert c2t.delta_gm == pytest.approx(math.exp((math.log(2) + math.log(4)) / 3) - 1)
    assert c2t.help_rate == pytest.approx(2 / 3) and c2t.harm_rate == 0.0
    assert c2t.neutral_rate == pytest.approx(1 / 3)


def test_blank_source_skill_makes_treatment_skipped_and_neutral() -> None:
    rows = _problem("p01", (True, 1.0), (False,), None, (True, 1.0), blank=True)
    comps = {c.direction: c for c in metrics.comparisons(rows)}
    assert comps["cute->tirx"].skipped and comps["cute->tirx"].rho == 1.0
    assert not comps["tirx->cute"].skipped and comps["tirx->cute"].rho == 0.25 ** 0 * 4.0 / 4.0


def test_unresolved_comparison_is_left_out() -> None:
    rows = _problem("p01", (True, 1.0), (True, 1.0), None, None)
    assert metrics.comparisons(rows) == []


def test_help_and_harm_never_exceed_one_together() -> None:
    from engine.analysis.synthetic import synthetic

    comps = metrics.comparisons(synthetic(models=3, problems=20, seed=4).rows)
    for row in metrics.lift_table(comps):
        assert row["help_rate"] + row["harm_rate"] <= 1.0 + 1e-12


def test_standing_and_tier_tables() -> None:
    rows = (
        _problem("p01", (True, 2.5), (True, 10.0), (True, 5.0), (True, 2.5))  # source above
        + _problem("p02", (False,), (True, 10.0), (True, 20.0), (False,))  # source below
    )
    comps = {(c.problem, c.direction): c for c in metrics.comparisons(rows)}
    assert comps[("p01", "cute->tirx")].standing == "above"  # 4× source vs 1× solo
    assert comps[("p02", "cute->tirx")].standing == "below"
    tables = metrics.tier_tables(list(comps.values()))
    pooled = {r["standing"]: r for r in tables["by_standing"] if r["model"] == "all"}
    # above: p01 c2t helped (ρ 2), p02 t2c neutral; below: p01 t2c neutral, p02 c2t harmed
    assert pooled["above"]["n"] == 2 and pooled["above"]["help_rate"] == 0.5
    assert pooled["below"]["n"] == 2 and pooled["below"]["harm_rate"] == 0.5
    assert pooled["at"]["n"] == 0


def test_reverse_direction_given_helped() -> None:
    rows = _problem("p01", (True, 2.0), (True, 4.0), (True, 2.0), (True, 4.0))
    (row,) = [r for r in metrics.reverse_given_helped(metrics.comparisons(rows))
              if r["model"] == "all"]
    assert row["n_helped"] == 1 and row["reverse_harm_rate"] == 1.0


def test_leave_best_family_out() -> None:
    rows = (_problem("p01", (True, 2.0), (True, 4.0), (True, 1.0), (True, 4.0), family="A")
            + _problem("p02", (True, 2.0), (True, 4.0), (True, 8.0), (True, 4.0)))
    table = metrics.leave_best_family_out(metrics.comparisons(rows))
    c2t = next(r for r in table if r["direction"] == "cute->tirx")
    assert c2t["excluded_family"] == "A" and c2t["delta_gm_without"] == pytest.approx(-0.5)


def test_exclusion_rule_turns_flagged_passes_into_failures() -> None:
    rows = _problem("p01", (True, 1.0), (False,), (True, 1.0), (False,))
    rows[2] = o("tirx", "skill", True, 1.0, flags=("inline_cuda",))
    base = {c.direction: c.rho for c in metrics.comparisons(rows)}
    excluded = {c.direction: c.rho for c in
                metrics.comparisons(metrics.apply_exclusion(rows, ["inline_cuda"]))}
    assert base["cute->tirx"] == 4.0 and excluded["cute->tirx"] == 1.0


def test_rate_ladder_and_score() -> None:
    rows = _problem("p01", (True, 2.0), (True, 4.0), (True, 2.0), (False,))
    ladder = {r["subset"]: r for r in metrics.rate_ladder(metrics.comparisons(rows))}
    base = ladder["all"]["base"]
    # baselines: tirx solo 2.5×, cute solo 5× → both pass at 0, .5, 1, 2; only one at 4
    assert base == {"R@0": 1.0, "R@0.5": 1.0, "R@1": 1.0, "R@2": 1.0, "R@4": 0.5, "S": 90.0}
    skill = ladder["all"]["skill"]  # tirx skill 5×, cute skill failed
    assert skill["R@0"] == 0.5 and skill["R@4"] == 0.5


def test_spearman_and_sign_flip_detect_anticorrelation() -> None:
    a = [float(i) for i in range(-15, 16) if i]
    b = [-x for x in a]
    result = stats.sign_flip_test(a, b, draws=2000, seed=1)
    assert result["spearman"] == pytest.approx(-1.0)
    assert result["p_negative"] < 0.01
    unrelated = stats.sign_flip_test(a, [((7 * i) % 11) - 5.0 for i in range(len(a))],
                                     draws=500, seed=1)
    assert unrelated["p_negative"] > 0.05


def test_source_speed_swap_test_and_bootstrap() -> None:
    rows = []
    for i in range(1, 31):
        src = 10.0 / (1 + i % 10)
        rows += _problem(f"p{i:02d}", (True, src), (True, 5.0 + (i * 7) % 5), (True, src),
                         (True, src))
    comps = metrics.comparisons(rows)
    test = stats.source_speed_test(comps, draws=500, seed=2)
    assert test["rho_skill"] > test["rho_solo"] and test["p_value"] < 0.05
    ci = stats.bootstrap_delta_gm(comps, draws=500, seed=2)
    assert ci["low"] <= ci["delta_gm"] <= ci["high"]


def test_sign_flip_ranks_match_scipy_with_ties_and_zeros() -> None:
    import numpy as np
    from scipy.stats import rankdata

    rng = np.random.default_rng(5)
    x = np.concatenate([np.zeros(7), np.full(5, math.log(4)), np.full(4, -math.log(4)),
                        rng.normal(size=30)])
    ranker = stats._SignFlipRanker(x)
    flips = rng.random((200, x.size)) < 0.5  # in magnitude order
    signs = np.where(flips, -1.0, 1.0)[:, np.argsort(ranker.order)]  # in original order
    ours = ranker.ranks(flips)[:, np.argsort(ranker.order)]
    assert np.array_equal(ours, rankdata(x * signs, axis=1))
