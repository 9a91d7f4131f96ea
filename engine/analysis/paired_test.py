"""A test per comparison from its paired, interleaved gradings (docs/analysis.md, "Paired test").

A paired job grades a comparison's baseline and treatment k times each on one slot,
interleaved; pair i gives ``d_i = log t_base,i − log t_treat,i`` (positive: the treatment is
faster). The model is ``d_i ~ N(μ, s²)`` with ``μ = log ρ``. The estimate is the mean of the
``d_i``; its variance is the pair's own ``s²`` shrunk toward the prior the pooled A/A band of
(problem, DSL, host) gives (``s₀² = σ_base² + σ_treat²``, ν₀ degrees of freedom): the
conjugate (normal, scaled-inverse-χ²) posterior

    s²_post = (ν₀ s₀² + (k − 1) s²) / (ν₀ + k − 1),

a t interval with ``ν₀ + k − 1`` degrees of freedom and a two-sided p-value. ν₀ is capped at
:data:`PRIOR_DOF_CAP` so that a pair graded on a noisier day than the band's still moves its own
σ. Without a band the pair's own s² with k − 1 degrees of freedom is used (no test below k = 2).

Outliers, first per grading (:func:`screen_pairs`): each arm of a paired job is k gradings of one
unchanged file on one slot, so a grading slower than the fastest reading of its file (the arm's
gradings and its attempt's own finals on that host) by more than
``max(OUTLIER_Z · √2 · σ, log 1.5)`` is rejected and its pair dropped (σ: the 95 % upper
confidence bound of the arm's band from its dof, :func:`sigma_upper`; else the arm's own
1.4826 · MAD from 3 gradings on); no pair left, or half the pairs or more dropped
on the arms' own spread, leaves the comparison *outlier-dominated*: no test. Where only the
differences are known (:func:`paired_test` alone, the sequential rule's looks): a difference
farther than :data:`OUTLIER_Z` reference SDs from the differences' median is rejected before
the test (the reference: the band's SD of a difference, else 1.4826 · MAD of the differences
from 3 pairs on); the count is reported. Two pairs that disagree so (their median is their
mean: which one is wrong cannot be told), or rejections of half the pairs or more, leave the
comparison *outlier-dominated*: no test.

Pure functions (numpy/scipy, no storage).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import special

PRIOR_DOF_CAP = 20  # the band's degrees of freedom count at most this much against the pair's
MIN_VARIANCE = 1e-20  # below this (an SD of 1e-10 in log units) the differences are identical
FDR = 0.05  # "beyond noise" = BH q ≤ FDR
OUTLIER_Z = 5.0  # a difference this many reference SDs from the median is an outlier
MIN_SLOWDOWN = math.log(1.5)  # a grading is never an outlier within 1.5x of its arm's fastest
MAD_TO_SD = 1.4826
PAIRED, CROSS_HOST, UNPAIRED = "paired", "cross_host", "unpaired"


@dataclass(frozen=True)
class PairedEstimate:
    """The paired test of one comparison on one clock."""

    k: int  # pairs
    log_rho: float | None  # mean of the pair differences
    sd: float | None  # SD of one difference (shrunk)
    dof: int  # t degrees of freedom (0: no test)
    low: float | None  # (1 − α) interval of log ρ
    high: float | None
    p: float | None  # two-sided p-value of log ρ = 0
    prior: bool  # whether a band entered the variance
    rejected: int = 0  # differences rejected as outliers (not among the k pairs)
    note: str = ""  # why there is no test, when there is none
    rejected_gradings: int = 0  # gradings beyond their arm's bound (:func:`screen_pairs`)
    dropped_pairs: int = 0  # pairs lost to those gradings (not among the k pairs)
    outlier_basis: str = ""  # what bounded the gradings: "band", "own spread" or "none"

    @property
    def rho(self) -> float | None:
        return None if self.log_rho is None else math.exp(self.log_rho)

    @property
    def se(self) -> float | None:
        return None if self.sd is None or self.k == 0 else self.sd / math.sqrt(self.k)

    def as_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "log_rho": self.log_rho,
            "rho": self.rho,
            "sd": self.sd,
            "dof": self.dof,
            "low": self.low,
            "high": self.high,
            "rho_low": None if self.low is None else math.exp(self.low),
            "rho_high": None if self.high is None else math.exp(self.high),
            "p": self.p,
            "prior": self.prior,
            "rejected": self.rejected,
            "rejected_gradings": self.rejected_gradings,
            "dropped_pairs": self.dropped_pairs,
            "outlier_basis": self.outlier_basis,
            "note": self.note,
        }


def log_differences(
    base_ms: Sequence[float | None], treat_ms: Sequence[float | None]
) -> list[float]:
    """``log t_base,i − log t_treat,i`` for each pair i (both runtimes finite and positive)."""
    return [
        math.log(b) - math.log(t)
        for b, t in zip(base_ms, treat_ms, strict=False)
        if b is not None and t is not None and _valid(b) and _valid(t)
    ]


def _valid(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def prior_of(sigmas: Sequence[float | None], dofs: Sequence[int]) -> tuple[float | None, int]:
    """The prior of one difference's SD from the arms' bands: ``√(Σ σ²)`` and the smallest
    dof (capped); (None, 0) unless every arm has a band."""
    if not sigmas or any(s is None for s in sigmas):
        return None, 0
    sd = math.sqrt(sum(float(s) ** 2 for s in sigmas if s is not None))
    return sd, min(min(dofs), PRIOR_DOF_CAP)


def posterior_sd(
    diffs: Sequence[float], prior_sd: float | None, prior_dof: int
) -> tuple[float | None, int]:
    """The shrunk SD of one difference and its degrees of freedom ((None, 0): no estimate)."""
    k = len(diffs)
    own_dof = max(k - 1, 0)
    nu0 = min(max(prior_dof, 0), PRIOR_DOF_CAP) if prior_sd is not None else 0
    if own_dof + nu0 == 0:
        return None, 0
    own_ss = 0.0
    if own_dof:
        mean = sum(diffs) / k
        own_ss = sum((d - mean) ** 2 for d in diffs)
    prior_ss = nu0 * (prior_sd or 0.0) ** 2
    var = (prior_ss + own_ss) / (nu0 + own_dof)
    if var <= MIN_VARIANCE or not math.isfinite(var):
        return None, 0
    return math.sqrt(var), nu0 + own_dof


def outliers(diffs: Sequence[float], prior_sd: float | None) -> list[bool]:
    """Which differences lie beyond ``OUTLIER_Z`` reference SDs of their median."""
    if len(diffs) < 2:
        return [False] * len(diffs)
    middle = statistics.median(diffs)
    ref = prior_sd
    if ref is None and len(diffs) >= 3:
        ref = MAD_TO_SD * statistics.median(abs(d - middle) for d in diffs)
    if not ref or ref <= 0:
        return [False] * len(diffs)
    return [abs(d - middle) > OUTLIER_Z * ref for d in diffs]


def sigma_upper(sigma: float, dof: int | None) -> float:
    """σ's one-sided 95 % upper confidence bound ``σ · √(ν / χ²₀.₀₅(ν))`` from a band of ν
    degrees of freedom (``dof`` None: σ is taken as known). An outlier bound built on the
    point estimate rejects genuine gradings whenever σ̂ is small by chance, which trims the
    sample exactly when its band already understates the noise (docs/analysis.md)."""
    if dof is None:
        return sigma
    if dof < 1:
        raise ValueError("a band's sigma needs at least one degree of freedom")
    return sigma * math.sqrt(dof / float(special.chdtri(dof, 0.95)))


def slow_outliers(
    logs: Sequence[float | None],
    sigma: float | None,
    refs: Sequence[float] = (),
    dof: int | None = None,
) -> tuple[list[bool], str]:
    """Which gradings of one arm (log runtimes; None: invalid) are outliers, and the basis.

    The reference is the fastest reading of the arm's file (its gradings and ``refs``: other
    readings of that file on that host, e.g. its attempt's own finals), not the median: slowdowns
    (a busy host, a throttled clock) only add time, and with 2 of 3 gradings slowed the median is
    an outlier's. The bound is ``max(OUTLIER_Z · √2 · σ, log 1.5)`` above it (a grading less the
    fastest is a difference of two gradings: SD √2 σ); σ is the arm's band (``band``: its
    upper confidence bound from ``dof``, :func:`sigma_upper`), else 1.4826 · MAD of the
    readings from 3 on (``own spread``); else nothing is judged."""
    valid = [v for v in logs if v is not None] + list(refs)
    if len(valid) < 2:
        return [False] * len(logs), "none"
    basis = "band"
    if sigma is None or not sigma > 0:
        if len(valid) < 3:
            return [False] * len(logs), "none"
        middle = statistics.median(valid)
        sigma = MAD_TO_SD * statistics.median(abs(v - middle) for v in valid)
        basis = "own spread"
    else:
        sigma = sigma_upper(sigma, dof)
    bound = max(OUTLIER_Z * math.sqrt(2) * sigma, MIN_SLOWDOWN)
    fastest = min(valid)
    return [v is not None and v - fastest > bound for v in logs], basis


def _log(value: float | None) -> float | None:
    return math.log(value) if value is not None and _valid(value) else None


def screen_pairs(
    base_ms: Sequence[float | None],
    treat_ms: Sequence[float | None],
    sigma_base: float | None,
    sigma_treat: float | None,
    refs: tuple[Sequence[float | None], Sequence[float | None]] = ((), ()),
    dof: int | None = None,
) -> tuple[list[float], int, int, str]:
    """The pair differences after per-grading outliers are dropped (see :func:`slow_outliers`;
    ``refs``: each arm's other readings of its file, ms; ``dof``: the bands' smallest): (differences
    kept, gradings rejected, pairs dropped, basis; the weaker arm's basis)."""
    base = [_log(v) for v in base_ms]
    treat = [_log(v) for v in treat_ms]
    ref_b, ref_t = ([x for x in map(_log, r) if x is not None] for r in refs)
    bad_b, basis_b = slow_outliers(base, sigma_base, ref_b, dof)
    bad_t, basis_t = slow_outliers(treat, sigma_treat, ref_t, dof)
    diffs: list[float] = []
    dropped = 0
    for b, t, xb, xt in zip(base, treat, bad_b, bad_t, strict=False):
        if b is None or t is None:
            continue
        if xb or xt:
            dropped += 1
        else:
            diffs.append(b - t)
    order = ("none", "own spread", "band")
    basis = min(basis_b, basis_t, key=order.index)
    return diffs, sum(bad_b) + sum(bad_t), dropped, basis


def outlier_dominated(kept: int, dropped: int, basis: str) -> bool:
    """Whether the pairs left after per-grading rejection allow no test: none left, or (judged
    without a band) half the pairs or more dropped. With a band the judgement is the band's and
    the test runs on what is left, however few (its variance is the band's anyway)."""
    if not dropped:
        return False
    return kept == 0 or (basis != "band" and 2 * dropped >= kept + dropped)


def paired_test_gradings(
    base_ms: Sequence[float | None],
    treat_ms: Sequence[float | None],
    sigmas: tuple[float | None, float | None] = (None, None),
    prior_dof: int = 0,
    alpha: float = 0.05,
    refs: tuple[Sequence[float | None], Sequence[float | None]] = ((), ()),
) -> PairedEstimate:
    """The paired test from the pairs' runtimes: per-grading outliers dropped first
    (``sigmas``: each arm's band σ of one grading, None without one; ``refs``: each arm's other
    readings of its file on its host, ms), then :func:`paired_test`
    with the bands' prior and no second screen of the differences (the grading rule sees every
    outlier it would, and without a band 3 differences' MAD is too fragile a reference); see
    :func:`outlier_dominated` for when no test is left."""
    band_dof = min(prior_dof, PRIOR_DOF_CAP) if prior_dof > 0 else None  # as the test counts it
    diffs, rejected, dropped, basis = screen_pairs(base_ms, treat_ms, *sigmas, refs, band_dof)
    prior_sd, _ = prior_of(list(sigmas), [prior_dof, prior_dof])
    if outlier_dominated(len(diffs), dropped, basis):
        mean = sum(diffs) / len(diffs) if diffs else None
        note = f"outlier-dominated: {dropped} of {len(diffs) + dropped} pairs dropped"
        prior = prior_sd is not None and prior_dof > 0
        est = PairedEstimate(len(diffs), mean, None, 0, None, None, None, prior, 0, note)
    else:
        est = paired_test(diffs, prior_sd, prior_dof, alpha, screen=False)
    return replace(est, rejected_gradings=rejected, dropped_pairs=dropped, outlier_basis=basis)


def paired_test(
    diffs: Sequence[float],
    prior_sd: float | None = None,
    prior_dof: int = 0,
    alpha: float = 0.05,
    screen: bool = True,
) -> PairedEstimate:
    """The paired t test of ``log ρ = 0`` from the pair differences (see the module docstring);
    ``screen``: reject outlying differences (off where the gradings were screened already)."""
    prior = prior_sd is not None and prior_dof > 0
    flagged = outliers(diffs, prior_sd if prior else None) if screen else [False] * len(diffs)
    rejected = sum(flagged)
    kept = [d for d, bad in zip(diffs, flagged, strict=True) if not bad]
    k = len(kept)
    if rejected and 2 * rejected >= len(diffs):
        mean = sum(diffs) / len(diffs)
        return PairedEstimate(
            len(diffs), mean, None, 0, None, None, None, prior, rejected, "outlier-dominated"
        )
    if k == 0:
        return PairedEstimate(0, None, None, 0, None, None, None, prior, rejected, "no pairs")
    mean = sum(kept) / k
    sd, dof = posterior_sd(kept, prior_sd, prior_dof)
    if sd is None or dof == 0:
        note = "one pair, no band" if k < 2 else "no spread, no band"
        return PairedEstimate(k, mean, None, 0, None, None, None, prior, rejected, note)
    se = sd / math.sqrt(k)
    half = float(special.stdtrit(dof, 1 - alpha / 2)) * se
    p = float(2 * special.stdtr(dof, -abs(mean) / se))
    return PairedEstimate(k, mean, sd, dof, mean - half, mean + half, p, prior, rejected)


def pairing_status(slots: Sequence[tuple[str, str]]) -> str:
    """``paired`` when at least one pair's two gradings ran on one slot (the test takes those
    pairs only: :func:`same_slot`), ``cross_host`` when every pair spans two slots,
    ``unpaired`` without pairs (``slots``: (baseline slot, treatment slot) per pair)."""
    if not slots:
        return UNPAIRED
    return PAIRED if any(same_slot(slots)) else CROSS_HOST


def same_slot(slots: Sequence[tuple[str, str]]) -> list[bool]:
    """Per pair, whether its two gradings ran on one slot: a pair split over two slots (a job
    resumed on another machine, or moved after its slot died) compares two hosts' speeds, so
    the test leaves it out and the row counts it."""
    return [base == treat for base, treat in slots]


def bh_qvalues(pvalues: Sequence[float | None]) -> list[float | None]:
    """Benjamini–Hochberg q-values (None stays None and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(pvalues)
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, p * m / rank)
        out[i] = min(running, 1.0)
    return out


def call_of(estimate: PairedEstimate, q: float | None, fdr: float = FDR) -> str:
    """``help`` / ``harm`` beyond noise (q ≤ fdr, by the estimate's sign), ``within`` when
    tested and not beyond, ``untested`` without a test (no band and fewer than 2 pairs)."""
    if q is None or estimate.log_rho is None or estimate.p is None:
        return "untested"
    if q > fdr:
        return "within"
    return "help" if estimate.log_rho > 0 else "harm"
