"""Measurement noise of a runtime: A/A bands per problem, DSL and grading host
(docs/analysis.md).

Model: a grading's runtime is ``t = τ · exp(ε)`` with ``ε ~ N(0, σ²)`` per problem, DSL and
grading host (log-normal noise; σ ≈ the coefficient of variation for small CVs). A *series* is
several gradings of one unchanged file (``mkb noise``, or an attempt's repeated finals); within a
series only ε varies, so the pooled within-series variance of ``log t`` estimates σ² with
``dof = Σ (n_s − 1)`` degrees of freedom.

Two figures come out of a :class:`Band`:

- ``aa_band`` = z₀.₉₇₅ · √2 · σ̂: the estimated 95 % interval of ``log(t₁/t₂)`` between two
  single gradings of one file (what ``mkb noise`` prints);
- ``limit(R_b, R_t)`` = k(dof) · σ̂ · √(v(R_b) + v(R_t)): the half-width a paired ``log ρ`` must
  exceed to be *beyond noise* when the arms' runtimes are medians of R_b and R_t gradings,
  where v(R) is the variance of the median of R standard normals and
  k(dof) = z₀.₉₇₅ · √(dof / χ²₀.₀₅(dof)) makes it a 95 %/95 % tolerance bound: at least 95 %
  of A/A comparisons fall inside it, with 95 % confidence given how few gradings estimated σ.

Pure functions (no storage, no scipy): the time source (end to end, or the GPU span) is chosen
by the caller, who builds the series from that figure (:data:`TIME_SOURCES`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The runtime figure each time source reads: "e2e", the contract's end-to-end median (an
# attempt's column); "span", the runners' GPU span per call (``clock.breakdown.<side>.span_ms``
# of a grading's feedback: informational, engine/analysis/spans.py reads it).
TIME_SOURCES: dict[str, str] = {"e2e": "impl_median_ms", "span": "span_ms"}
Z95 = statistics.NormalDist().inv_cdf(0.975)
MIN_DOF = 4  # fewer degrees of freedom give no band (k(3) = 6.2: no useful limit)
# Var(median of R iid N(0, 1)), R = 1..20: exact (order-statistic integrals, scipy.integrate;
# tests/analysis/test_noise.py checks them by simulation). Even R: mean of the middle two.
MEDIAN_VARIANCE = (
    1.0,
    0.5,
    0.44867,
    0.2982,
    0.28683,
    0.21474,
    0.21045,
    0.16818,
    0.1661,
    0.13833,
    0.13716,
    0.11752,
    0.1168,
    0.10217,
    0.10169,
    0.09038,
    0.09005,
    0.08103,
    0.08079,
    0.07344,
)


def check_time_source(time: str) -> str:
    """The runtime field of a time source; a clear error for one that is not recorded."""
    if time not in TIME_SOURCES:
        raise ValueError(f"time source must be one of {', '.join(TIME_SOURCES)} (got {time!r})")
    return TIME_SOURCES[time]


def median_variance(repeats: int) -> float:
    """Variance of the median of ``repeats`` standard normals (π / 2R beyond the table)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if repeats <= len(MEDIAN_VARIANCE):
        return MEDIAN_VARIANCE[repeats - 1]
    return math.pi / (2 * repeats)


def _lower_gamma_regularized(a: float, x: float) -> float:
    """P(a, x) = γ(a, x) / Γ(a), by its power series (x ≤ a + 1) or continued fraction."""
    if x <= 0:
        return 0.0
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > 1e-15 * abs(total):
            n += 1
            term *= x / n
            total += term
        return total * math.exp(-x + a * math.log(x) - math.lgamma(a))
    # Lentz's continued fraction for Q(a, x) = 1 − P(a, x)
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return 1.0 - math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of χ² with ``dof`` degrees of freedom (bisection on its CDF)."""
    if not 0 < p < 1 or dof <= 0:
        raise ValueError("need 0 < p < 1 and dof > 0")
    low, high = 0.0, max(1.0, dof + 20 * math.sqrt(2 * dof))
    for _ in range(200):
        mid = (low + high) / 2
        if _lower_gamma_regularized(dof / 2, mid / 2) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, mid):
            break
    return (low + high) / 2


def tolerance_factor(dof: int) -> float:
    """k(dof) = z₀.₉₇₅ · √(dof / χ²₀.₀₅(dof)): σ̂'s 95 % upper confidence bound, in z units."""
    return Z95 * math.sqrt(dof / chi2_quantile(0.05, dof))


@dataclass(frozen=True)
class Series:
    """Gradings of one unchanged file on one host: their passing runtimes (ms). A file graded
    on several hosts is one series per host (``storage.repeats.problem_series``)."""

    problem: str
    host: str
    values_ms: tuple[float, ...]
    key: str = ""
    dsl: str = ""
    preview: bool = False


BandKey = tuple[str, str, str]  # (problem, DSL, grading host)
HOST_SEP = " + "  # an attempt whose repeats ran on several hosts: its hosts, sorted
OUTLIER_Z = 5.0  # a grading this many robust SDs from its series' median is rejected
MAX_REJECTED = 0.25  # more rejected gradings than this share: outlier-dominated, no band


@dataclass(frozen=True)
class Band:
    """The noise of one problem and DSL on one grading host, pooled over its series."""

    problem: str
    host: str
    series: int  # series with at least two passing gradings
    gradings: int  # passing gradings in those series (rejected ones not counted)
    dof: int
    sigma: float | None  # pooled SD of log runtime; None: no band (``reason`` says why)
    preview: bool = False
    dsl: str = ""
    rejected: int = 0  # gradings rejected as outliers (robust rule, OUTLIER_Z)
    reason: str = ""  # why there is no band

    @property
    def known(self) -> bool:
        return self.sigma is not None

    @property
    def key(self) -> BandKey:
        return (self.problem, self.dsl, self.host)

    @property
    def aa_band(self) -> float | None:
        """Estimated 95 % interval half-width of log(t₁/t₂) for two single gradings."""
        return None if self.sigma is None else Z95 * math.sqrt(2) * self.sigma

    @property
    def factor(self) -> float | None:
        return None if self.sigma is None else tolerance_factor(self.dof)

    def limit(self, repeats_base: int, repeats_treat: int) -> float | None:
        """The |log ρ| a comparison must exceed to be beyond noise (medians of R gradings)."""
        if self.sigma is None:
            return None
        spread = median_variance(repeats_base) + median_variance(repeats_treat)
        return tolerance_factor(self.dof) * self.sigma * math.sqrt(spread)

    def as_dict(self) -> dict[str, object]:
        return {
            "problem": self.problem,
            "dsl": self.dsl,
            "host": self.host,
            "series": self.series,
            "gradings": self.gradings,
            "rejected": self.rejected,
            "dof": self.dof,
            "sigma": self.sigma,
            "reason": self.reason,
            "aa_band": self.aa_band,
            "aa_band_pct": None if self.aa_band is None else 100 * math.expm1(self.aa_band),
            "limit_r1": self.limit(1, 1),
            "limit_r3": self.limit(3, 3),
            "preview": self.preview,
        }


def _logs(values: Iterable[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0 and math.isfinite(v)]


def robust_sigma(groups: Sequence[Sequence[float]]) -> float | None:
    """σ from the median absolute difference of two gradings of one series (each such
    difference is N(0, 2σ²): median |d| = 0.6745 · √2 · σ), robust to a few outliers."""
    gaps = sorted(abs(a - b) for g in groups for a, b in itertools.combinations(g, 2))
    if not gaps:
        return None
    return statistics.median(gaps) / (0.6745 * math.sqrt(2))


def _rejected(logs: Sequence[float], scale: float | None) -> list[bool]:
    if scale is None or scale <= 0 or len(logs) < 2:
        return [False] * len(logs)
    middle = statistics.median(logs)
    return [abs(x - middle) > OUTLIER_Z * scale for x in logs]


def band_of(problem: str, dsl: str, host: str, items: Sequence[Series]) -> Band:
    """One (problem, DSL, host) band: outliers rejected, then the pooled within-series SD."""
    groups = [logs for s in items if len(logs := _logs(s.values_ms)) >= 2]
    scale = robust_sigma(groups)
    ss, dof, used, gradings, rejected = 0.0, 0, 0, 0, 0
    for logs in groups:
        flags = _rejected(logs, scale)
        rejected += sum(flags)
        kept = [x for x, bad in zip(logs, flags, strict=True) if not bad]
        if len(kept) < 2:
            continue
        mean = sum(kept) / len(kept)
        ss += sum((x - mean) ** 2 for x in kept)
        dof += len(kept) - 1
        used += 1
        gradings += len(kept)
    total = sum(len(g) for g in groups)
    reason = ""
    if total and rejected > MAX_REJECTED * total:
        reason = f"outlier-dominated ({rejected} of {total} gradings rejected)"
    elif dof < MIN_DOF:
        reason = f"{dof} dof < {MIN_DOF}"
    elif ss <= 0:
        reason = "zero spread (identical gradings)"
    sigma = None if reason else math.sqrt(ss / dof)
    preview = any(s.preview for s in items)
    return Band(problem, host, used, gradings, dof, sigma, preview, dsl, rejected, reason)


def pool(series: Iterable[Series]) -> dict[BandKey, Band]:
    """One :class:`Band` per (problem, DSL, host) from the series' within-series log variance.

    Outliers (a grading more than :data:`OUTLIER_Z` robust SDs from its series' median) are
    rejected and counted; σ̂ = 0, fewer than :data:`MIN_DOF` degrees of freedom or more than
    :data:`MAX_REJECTED` of the gradings rejected give no band, with the reason."""
    groups: dict[BandKey, list[Series]] = defaultdict(list)
    for s in series:
        groups[(s.problem, s.dsl, s.host)].append(s)
    return {key: band_of(*key, items) for key, items in sorted(groups.items())}


def hosts_of(host: str) -> list[str]:
    """The hosts an attempt's runtime came from (``HOST_SEP``-joined when several)."""
    return host.split(HOST_SEP) if host else [host]


def spread(values_ms: Sequence[float]) -> dict[str, float | int | None]:
    """One series on its own: median, range, SD of log runtime and the pairwise log ratios'
    2.5–97.5 % range (the empirical A/A band, needs at least 3 gradings to mean much)."""
    values = sorted(v for v in values_ms if v > 0 and math.isfinite(v))
    out: dict[str, float | int | None] = {
        "n": len(values),
        "median_ms": None,
        "min_ms": None,
        "max_ms": None,
        "sigma": None,
        "pairwise_low": None,
        "pairwise_high": None,
    }
    if not values:
        return out
    logs = [math.log(v) for v in values]
    out.update(median_ms=statistics.median(values), min_ms=values[0], max_ms=values[-1])
    if len(values) >= 2:
        out["sigma"] = statistics.stdev(logs)
        ratios = sorted(a - b for a, b in itertools.permutations(logs, 2))
        out["pairwise_low"] = _quantile(ratios, 0.025)
        out["pairwise_high"] = _quantile(ratios, 0.975)
    return out


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
