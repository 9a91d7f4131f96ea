"""The adaptive stopping rule of a paired job (``[grading] final_repeats = "adaptive"``).

After each new pair the engine calls :func:`decide` with every pair difference so far
(``d_i = log t_base,i − log t_treat,i``). The design is a group-sequential paired t test with
looks at k = 2 … ``max_pairs`` (K) and an O'Brien–Fleming-type alpha-spending function
(Lan–DeMets) with information fraction ``t = k / K``. Look k may spend the share
``w_k = s(k/K) − s((k−1)/K)`` of the level (look 2 spends ``s(2/K)``; ``Σ w_k = 1``); by the
union bound the chance of any false stop over all looks is at most the level, whatever the
correlation between looks (conservative: it ignores that correlation, so no boundary table or
numerical integration is needed, and the shrunk t of :mod:`engine.analysis.paired_test`, whose
dof include the band's, is used as it is). Because the band enters the variance, two pairs
already carry the band's degrees of freedom: a clear comparison stops at 2 pairs.

A look stops for ``help``/``harm`` when ``p_k / w_k ≤ STOP_SHARE · α`` (1 % at α = 5 %),
not at α itself: the experiment's call is Benjamini–Hochberg at q ≤ α over every comparison,
and a comparison stopped at a p-value near α would rarely pass it (the calibration benchmark
measured a 1.3× help at CV 10 % called 29 % of the time stopping at α, 90 % at α/5).
O'Brien–Fleming-type spending keeps most of the level for the last look, so a close
comparison that runs to K pairs loses little power against fixed K (Pocock-type spending lost
more: 75 % against 90 % there).

A look stops for ``within`` at ``max_pairs``, or when the 1 − 2α interval of log ρ (two
one-sided tests at α, the usual equivalence test) lies inside ±log(1 + ``relevant``): no
practically relevant effect (``relevant`` defaults to 10 %, the effect the planner sizes for).

A look stops ``futile`` (stochastic curtailment, Jennison & Turnbull, *Group Sequential
Methods*, ch. 10; Lan & Wittes' B-value) when the *conditional power* — the chance that the
last look reaches weighted p ≤ α if the remaining pairs follow the current estimate — is below
``futility`` (10 %). The current trend, not the 1.1× of interest: at CV 10–25 % a 1.1× effect
has almost no power at 5 pairs, so conditional power under it would stop nearly every
comparison, real 1.3× ones included; the trend keeps the ones that look like effects going.
The boundary is non-binding (the efficacy boundaries are those without it), so it cannot raise
the false-call rate: it only ends sequences that have not stopped beyond noise. It needs a band
(the pair's own SD alone has 1–3 dof at the early looks). Where the (problem, DSL, host) band
does not exist yet (the first jobs of a key), a *provisional* band serves the futility stop only
(``provisional``: the engine gives the same problem and DSL pooled over every host, the job's
own arms included); the efficacy and equivalence stops never see it, and the analysis reads the
sequence through :func:`sequential_p`, which is valid however the sequence was stopped.
The analysis treats a futile comparison as any other: its pairs are tested, and it is within
noise unless BH says otherwise.

:func:`sequential_p` is the p-value of the whole sequence (``min_k p_k / w_k``): valid under
optional stopping by the same union bound, whatever stopped the sequence (the futility stop, a
provisional band, a job resumed); it is what the Benjamini–Hochberg step across an experiment's
comparisons takes for an adaptive comparison, at the statistics level and in the store's
analysis (``engine.analysis.paired_lift``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import special

from engine.analysis.paired_test import paired_test, posterior_sd

DECISIONS = ("continue", "help", "harm", "within", "futile")
RELEVANT = 0.10  # |ρ − 1| below this is no practically relevant effect (the planner's 1.1×)
FIRST_LOOK = 2
STOP_SHARE = 0.2  # a look stops for help/harm at weighted p ≤ STOP_SHARE · α (see above)
FUTILITY = 0.10  # stop ``futile`` when the conditional power falls below this (see above)
NORMAL = statistics.NormalDist()
Z975 = NORMAL.inv_cdf(0.975)


def spent(fraction: float, alpha: float = 1.0) -> float:
    """O'Brien–Fleming-type spending: the share ``(2 − 2Φ(z₀.₉₇₅ / √t)) / 0.05`` of α by
    information fraction t in [0, 1] (the shape of the 5 % curve, so that it is linear in α)."""
    t = min(max(fraction, 0.0), 1.0)
    if t <= 0:
        return 0.0
    return alpha * (2 - 2 * NORMAL.cdf(Z975 / math.sqrt(t))) / 0.05


def look_weight(k: int, max_pairs: int) -> float:
    """The share of α look k may spend (0 before the first look and beyond the last)."""
    if k < FIRST_LOOK or k > max_pairs:
        return 0.0
    start = 0.0 if k == FIRST_LOOK else spent((k - 1) / max_pairs)
    return spent(k / max_pairs) - start


def _prior(band_sigma: float | None, band_dof: int) -> tuple[float | None, int]:
    """A difference of two gradings has variance 2σ² under the band of one grading."""
    if band_sigma is None or band_sigma <= 0 or not math.isfinite(band_sigma):
        return None, 0
    return math.sqrt(2) * band_sigma, band_dof


@dataclass(frozen=True)
class Look:
    """One look of the sequence: the decision and the look's p-value over its α share."""

    decision: str  # one of DECISIONS
    weighted_p: float | None  # p_k / w_k (None: no test at this look)


Band = tuple[float | None, int]  # (σ of one grading's log runtime, dof); (None, 0): none


def look(
    diffs: Sequence[float],
    band_sigma: float | None,
    band_dof: int,
    max_pairs: int,
    alpha: float = 0.05,
    *,
    relevant: float = RELEVANT,
    futility: float = FUTILITY,
    provisional: Band = (None, 0),
    screen: bool = True,
) -> Look:
    """The look after ``len(diffs)`` pairs (capped at ``max_pairs``); see :func:`decide`.
    ``screen``: reject outlying differences first (off where the gradings were screened)."""
    if max_pairs < FIRST_LOOK:
        raise ValueError(f"max_pairs must be at least {FIRST_LOOK} (got {max_pairs})")
    k = min(len(diffs), max_pairs)
    if k < FIRST_LOOK:
        return Look("continue", None)
    prior_sd, prior_dof = _prior(band_sigma, band_dof)
    est = paired_test(list(diffs[:k]), prior_sd, prior_dof, alpha, screen=screen)
    at_end = k >= max_pairs
    if est.p is None or est.se is None or est.log_rho is None:
        return Look("within" if at_end else "continue", None)
    weighted = min(est.p / look_weight(k, max_pairs), 1.0)
    if weighted <= STOP_SHARE * alpha:
        return Look("help" if est.log_rho > 0 else "harm", weighted)
    if at_end:
        return Look("within", weighted)
    half = float(special.stdtrit(est.dof, 1 - alpha)) * est.se
    margin = math.log1p(relevant)
    if -margin < est.log_rho - half and est.log_rho + half < margin:
        return Look("within", weighted)
    sd = est.sd if est.prior else _futility_sd(diffs[:k], provisional)
    power = 1.0 if sd is None else conditional_power(est.log_rho, sd, k, max_pairs, alpha)
    if power < futility:
        return Look("futile", weighted)
    return Look("continue", weighted)


def _futility_sd(diffs: Sequence[float], provisional: Band) -> float | None:
    """The SD of one difference for the futility stop of a look without a band: the pairs' own
    variance shrunk toward the provisional band (None without one: no futility stop)."""
    prior_sd, prior_dof = _prior(*provisional)
    if prior_sd is None or prior_dof <= 0:
        return None
    return posterior_sd(diffs, prior_sd, prior_dof)[0]


def conditional_power(
    log_rho: float, sd: float, k: int, max_pairs: int, alpha: float = 0.05
) -> float:
    """The chance, given the first k pairs, that the last look's weighted p reaches α
    (``p_K ≤ α · w_K``, the loosest a BH call can take), if the rest of the pairs have the
    current trend ``log_rho`` (Lan & Wittes' B-value: B(t) = Z_k √t, t = k / K; the drift
    θ = Z_k / √t per unit of information; B(1) − B(t) ~ N(θ(1 − t), 1 − t)). Both signs are
    counted (each in its direction), so it is an upper bound on the chance of a call."""
    if k >= max_pairs or sd <= 0 or not math.isfinite(sd):
        return 1.0
    t = k / max_pairs
    z = log_rho / (sd / math.sqrt(k))
    b, drift = z * math.sqrt(t), z / math.sqrt(t)
    c = NORMAL.inv_cdf(1 - alpha * look_weight(max_pairs, max_pairs) / 2)
    rest = math.sqrt(1 - t)
    mean = b + drift * (1 - t)
    return (1 - NORMAL.cdf((c - mean) / rest)) + NORMAL.cdf((-c - mean) / rest)


def decide(
    diffs: Sequence[float],
    band_sigma: float | None,
    band_dof: int,
    max_pairs: int,
    alpha: float = 0.05,
    *,
    relevant: float = RELEVANT,
    futility: float = FUTILITY,
    provisional: Band = (None, 0),
) -> str:
    """``continue``, ``help``, ``harm``, ``within`` or ``futile`` after ``len(diffs)`` pairs.

    ``band_sigma``: the pooled band's SD of one grading's log runtime on this host (None: no
    band; when the arms' DSLs have different bands, √((σ_base² + σ_treat²) / 2), see
    :func:`arms_band`); ``band_dof``: its degrees of freedom (the smaller of the two).
    ``provisional``: a band (σ, dof) for the futility stop alone, used only without
    ``band_sigma`` (see the module docstring). Outliers are rejected as in
    :func:`engine.analysis.paired_test.paired_test`; an outlier-dominated look continues."""
    return look(
        diffs,
        band_sigma,
        band_dof,
        max_pairs,
        alpha,
        relevant=relevant,
        futility=futility,
        provisional=provisional,
    ).decision


def arms_band(base: Band, treat: Band) -> Band:
    """One band for a pair from its two arms' bands: σ = √((σ_b² + σ_t²) / 2), so that a
    difference's variance 2σ² is σ_b² + σ_t², with the smaller dof; (None, 0) unless both."""
    (sb, db), (st, dt) = base, treat
    if sb is None or st is None:
        return None, 0
    return math.sqrt((sb * sb + st * st) / 2), min(db, dt)


def sequential_p(
    diffs: Sequence[float],
    band_sigma: float | None,
    band_dof: int,
    max_pairs: int,
    *,
    screen: bool = True,
) -> float | None:
    """The sequence's p-value ``min_k p_k / w_k`` over looks 2 … len(diffs) (None: no look)."""
    found = [
        look(diffs[:k], band_sigma, band_dof, max_pairs, screen=screen).weighted_p
        for k in range(FIRST_LOOK, min(len(diffs), max_pairs) + 1)
    ]
    tested = [p for p in found if p is not None]
    return min(tested) if tested else None
