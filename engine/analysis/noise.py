"""Measurement noise of a runtime: A/A bands per problem and grading host (docs/analysis.md).

Model: a grading's runtime is ``t = τ · exp(ε)`` with ``ε ~ N(0, σ²)`` per problem and grading
host (log-normal noise; σ ≈ the coefficient of variation for small CVs). A *series* is several
gradings of one unchanged file (``mkb noise``, or an attempt's repeated finals); within a series
only ε varies, so the pooled within-series variance of ``log t`` estimates σ² with
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
    """Gradings of one unchanged file on one host: their passing runtimes (ms)."""

    problem: str
    host: str
    values_ms: tuple[float, ...]
    key: str = ""
    dsl: str = ""
    preview: bool = False


@dataclass(frozen=True)
class Band:
    """The noise of one problem on one grading host, pooled over its series."""

    problem: str
    host: str
    series: int  # series with at least two passing gradings
    gradings: int  # passing gradings in those series
    dof: int
    sigma: float | None  # pooled SD of log runtime; None below MIN_DOF
    preview: bool = False

    @property
    def known(self) -> bool:
        return self.sigma is not None

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
            "host": self.host,
            "series": self.series,
            "gradings": self.gradings,
            "dof": self.dof,
            "sigma": self.sigma,
            "aa_band": self.aa_band,
            "aa_band_pct": None if self.aa_band is None else 100 * math.expm1(self.aa_band),
            "limit_r1": self.limit(1, 1),
            "limit_r3": self.limit(3, 3),
            "preview": self.preview,
        }


def pool(series: Iterable[Series]) -> dict[tuple[str, str], Band]:
    """One :class:`Band` per (problem, host) from the series' within-series log variance."""
    groups: dict[tuple[str, str], list[Series]] = defaultdict(list)
    for s in series:
        groups[(s.problem, s.host)].append(s)
    bands: dict[tuple[str, str], Band] = {}
    for (problem, host), items in sorted(groups.items()):
        ss, dof, used, gradings = 0.0, 0, 0, 0
        for s in items:
            logs = [math.log(v) for v in s.values_ms if v > 0 and math.isfinite(v)]
            if len(logs) < 2:
                continue
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            dof += len(logs) - 1
            used += 1
            gradings += len(logs)
        sigma = math.sqrt(ss / dof) if dof >= MIN_DOF else None
        preview = any(s.preview for s in items)
        bands[(problem, host)] = Band(problem, host, used, gradings, dof, sigma, preview)
    return bands


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
