"""Power planning (``mkb power``, the launch form): how many comparisons per cell detect a
paired lift, from a pilot's spread of log ρ and its A/A noise bands (docs/analysis.md, "Power").

Per cell (model × direction × family, and "all"), with σ_b the SD of true log ρ between
problems and replicates, σ_m the SD of one log runtime on the grading host and R repeated
finals per arm (whose medians have variance v(R)·σ_m²), one comparison's log ρ has variance
s² = σ_b² + 2·v(R)·σ_m². The two-sided one-sample t test of mean log ρ = 0 at level α on n
comparisons has the exact power P(|T| > t₁₋α/₂,n−1) with T noncentral t (n − 1 dof, noncentrality
√n·δ/s) for a mean log-lift δ; the comparisons needed are the smallest n with power ≥ 1 − β
(at least 2). σ_b comes from the pilot's observed variance of log ρ in the cell less its
measurement part (pooled over the pilot when the cell has fewer than 3 comparisons); σ_m from
the bands of the cell's problems.

Per comparison (:func:`paired_power`, :func:`pairs_needed`): the paired test of
``engine.analysis.paired_test`` on k pairs, a difference's SD √2·σ from the band and
ν₀ + k − 1 dof, detects δ with the noncentral-t power at level α; being called beyond noise
needs BH's q ≤ α across the experiment, whose per-test threshold is at most α, so these are
an upper bound on the detection probability and a lower bound on the pairs needed.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scipy import special

from engine.analysis import metrics
from engine.analysis.noise import Band, BandKey, median_variance
from engine.analysis.noise_lift import band_for, repeats_of
from engine.analysis.paired_test import PRIOR_DOF_CAP

DEFAULT_LIFTS = (0.05, 0.10)
MIN_CELL = 3  # pilot comparisons a cell needs for its own σ_b


@dataclass(frozen=True)
class PlannedCell:
    model: str
    direction: str
    family: str  # a family, or "all"
    problems: tuple[str, ...]
    replicates: int


MAX_N = 1_000_000  # the search for n gives up beyond this many comparisons


def t_power(dof: int, ncp: float, alpha: float = 0.05) -> float:
    """P(|T| > t₁₋α/₂) for T noncentral t with ``dof`` degrees of freedom and noncentrality
    ``ncp``: the exact power of a two-sided t test."""
    if dof < 1:
        return 0.0
    crit = float(special.stdtrit(dof, 1 - alpha / 2))
    upper = float(special.nctdtr(dof, ncp, crit))
    lower = float(special.nctdtr(dof, ncp, -crit))
    return min(max(1.0 - upper + lower, 0.0), 1.0)


def power_of(n: int, delta: float, sd: float, alpha: float = 0.05) -> float:
    """Two-sided power of the one-sample t test on n comparisons for a mean log-lift δ."""
    if n < 2:
        return 0.0
    if sd <= 0:
        return 1.0
    return t_power(n - 1, math.sqrt(n) * delta / sd, alpha)


def _smallest(ok: Callable[[int], bool], start: int) -> int:
    """The smallest n ≥ ``start`` with ``ok(n)`` (ok is monotone; doubling then bisection)."""
    if ok(start):
        return start
    low, high = start, start * 2
    while not ok(high):
        if high > MAX_N:
            raise ValueError(f"more than {MAX_N} needed")
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid, high)
    return high


def comparisons_needed(delta: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The smallest n (at least 2) whose exact t-test power for δ reaches ``power``."""
    if delta <= 0 or sd < 0:
        raise ValueError("need a positive lift and a non-negative SD")
    return _smallest(lambda n: power_of(n, delta, sd, alpha) >= power, 2)


def paired_power(k: int, sigma: float, band_dof: int, delta: float, alpha: float = 0.05) -> float:
    """Detection probability of a log-lift δ by one comparison's paired test on k pairs, with
    a band of σ (one grading's SD of log runtime) and ``band_dof`` degrees of freedom."""
    dof = min(max(band_dof, 0), PRIOR_DOF_CAP) + k - 1
    if k < 1 or dof < 1:
        return 0.0
    if sigma <= 0:
        return 1.0
    return t_power(dof, math.sqrt(k) * delta / (math.sqrt(2) * sigma), alpha)


def pairs_needed(
    delta: float, sigma: float, band_dof: int, alpha: float = 0.05, power: float = 0.8
) -> int:
    """The pairs one comparison needs to detect δ with ``power`` on a band of σ (at least 2)."""
    if delta <= 0 or sigma < 0:
        raise ValueError("need a positive lift and a non-negative SD")
    return _smallest(lambda k: paired_power(k, sigma, band_dof, delta, alpha) >= power, 2)


def _noise_variance(c: metrics.Comparison, bands: Mapping[BandKey, Band]) -> float:
    """The measurement part of a pilot comparison's log ρ variance (0 unless both pass)."""
    if c.treatment is None or not (c.baseline.passed and c.treatment.passed):
        return 0.0
    band = band_for(c, bands)
    if band is None or band.sigma is None:
        return 0.0
    spread = median_variance(repeats_of(c.baseline)) + median_variance(repeats_of(c.treatment))
    return band.sigma**2 * spread


def between_sd(comps: Sequence[metrics.Comparison], bands: Mapping[BandKey, Band]) -> float | None:
    """σ̂_b: the SD of log ρ across comparisons less its measurement noise (None below 2)."""
    if len(comps) < 2:
        return None
    observed = statistics.variance([c.log_rho for c in comps])
    noise = sum(_noise_variance(c, bands) for c in comps) / len(comps)
    return math.sqrt(max(observed - noise, 0.0))


def sigma_m(problems: Iterable[str], bands: Mapping[BandKey, Band]) -> float | None:
    """RMS of the known bands' σ over these problems (any host), else of every band."""
    known = [b.sigma for b in bands.values() if b.sigma is not None]
    chosen = [b.sigma for b in bands.values() if b.sigma is not None and b.problem in problems]
    values = chosen or known
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else None


def plan(
    cells: Sequence[PlannedCell],
    pilot: Sequence[metrics.Comparison],
    bands: Mapping[BandKey, Band],
    *,
    repeats: int = 1,
    lifts: Sequence[float] = DEFAULT_LIFTS,
    alpha: float = 0.05,
    power: float = 0.8,
) -> list[dict[str, object]]:
    """Per planned cell: σ_b, σ_m, the plan's expected power and what each lift needs."""
    by_cell: dict[tuple[str, str, str], list[metrics.Comparison]] = defaultdict(list)
    for c in pilot:
        for family in ("all", c.family):
            by_cell[(c.model, c.direction, family)].append(c)
    pooled = between_sd(pilot, bands)
    out: list[dict[str, object]] = []
    for cell in cells:
        own = by_cell.get((cell.model, cell.direction, cell.family), [])
        sd_b = between_sd(own, bands) if len(own) >= MIN_CELL else None
        source = "cell" if sd_b is not None else "pooled"
        sd_b = sd_b if sd_b is not None else pooled
        sd_m = sigma_m(cell.problems, bands)
        row: dict[str, object] = {
            "model": cell.model,
            "direction": cell.direction,
            "family": cell.family,
            "problems": len(cell.problems),
            "replicates": cell.replicates,
            "comparisons": len(cell.problems) * cell.replicates,
            "repeats": repeats,
            "pilot_comparisons": len(own),
            "sigma_between": sd_b,
            "sigma_between_from": source,
            "sigma_m": sd_m,
            "lifts": [],
        }
        if sd_b is not None:
            sd = math.sqrt(sd_b**2 + 2 * median_variance(repeats) * (sd_m or 0.0) ** 2)
            row["sd_log_rho"] = sd
            n_plan = len(cell.problems) * cell.replicates
            row["lifts"] = [
                _lift_row(lift, sd, n_plan, len(cell.problems), alpha, power) for lift in lifts
            ]
        out.append(row)
    return out


def _lift_row(
    lift: float, sd: float, n_plan: int, problems: int, alpha: float, power: float
) -> dict[str, object]:
    delta = math.log1p(lift)
    needed = comparisons_needed(delta, sd, alpha, power)
    return {
        "lift": lift,
        "delta": delta,
        "power": power_of(n_plan, delta, sd, alpha),
        "comparisons_needed": needed,
        "replicates_needed": math.ceil(needed / problems) if problems else None,
    }


COMPARISON_LIFTS = (0.10, 0.30)  # the effects a comparison's planner and power note size for


def comparison_plan(
    bands: Iterable[Band],
    pairs: int,
    *,
    lifts: Sequence[float] = COMPARISON_LIFTS,
    alpha: float = 0.05,
    power: float = 0.8,
) -> list[dict[str, object]]:
    """Per known band: the detection probability of each lift by one comparison with
    ``pairs`` pairs on its host, and the pairs it needs for ``power`` (upper / lower bounds:
    see the module docstring)."""
    out: list[dict[str, object]] = []
    for band in bands:
        if band.sigma is None:
            continue
        row: dict[str, object] = {
            "problem": band.problem,
            "dsl": band.dsl,
            "host": band.host,
            "sigma": band.sigma,
            "dof": band.dof,
            "pairs": pairs,
        }
        for lift in lifts:
            delta = math.log1p(lift)
            row[f"detect_{lift:g}"] = paired_power(pairs, band.sigma, band.dof, delta, alpha)
            row[f"pairs_for_{lift:g}"] = pairs_needed(delta, band.sigma, band.dof, alpha, power)
        out.append(row)
    return out


def limit_detection(sigma: float, dof: int, repeats: tuple[int, int], lift: float) -> float:
    """The chance an unpaired comparison of a true ``lift`` lies beyond its band's limit
    (``Band.limit``: arms the medians of R_b and R_t gradings, log ρ ~ N(δ, σ²(v_b + v_t)))."""
    from engine.analysis.noise import tolerance_factor

    sd = sigma * math.sqrt(median_variance(repeats[0]) + median_variance(repeats[1]))
    if sd <= 0:
        return 1.0
    limit = tolerance_factor(dof) * sd
    delta = math.log1p(lift)
    normal = statistics.NormalDist(delta, sd)
    return 1.0 - normal.cdf(limit) + normal.cdf(-limit)


def noise_power_note(
    comps: Sequence[metrics.Comparison], bands: Mapping[BandKey, Band]
) -> dict[str, object] | None:
    """Whether T>n is power-limited: the mean detection probability of a 1.1× and a 1.3×
    help over the jointly passing comparisons with a band, at their bands and repeats."""
    used: list[tuple[Band, tuple[int, int]]] = []
    for c in comps:
        if c.treatment is None or not (c.baseline.passed and c.treatment.passed):
            continue
        band = band_for(c, bands)
        if band is not None and band.sigma is not None:
            used.append((band, (repeats_of(c.baseline), repeats_of(c.treatment))))
    if not used:
        return None
    detect = {
        f"{lift:g}": statistics.fmean(
            limit_detection(b.sigma or 0.0, b.dof, reps, lift) for b, reps in used
        )
        for lift in COMPARISON_LIFTS
    }
    return {"comparisons": len(used), "detect": detect, "power_limited": min(detect.values()) < 0.8}


# -- the planned cells of a config, without importing the catalog ---------------------------------
def catalog_index() -> dict[str, tuple[str, str]]:
    """Problem id → (slug, family) from the catalog's file names (no problem imported)."""
    from problems.registry import problem_files
    from problems.spec import FAMILY_DIRS

    return {
        p.stem.split("_", 1)[0]: (p.stem.split("_", 1)[1], FAMILY_DIRS[p.parent.name])
        for p in problem_files()
    }


def select(keys: Sequence[str], families: Sequence[str]) -> dict[str, str]:
    """Problem id → family for a config's problems/families (ids, numbers, slugs, globs)."""
    index = catalog_index()
    by_slug = {slug: pid for pid, (slug, _) in index.items()}
    chosen: list[str] = []
    for key in keys or sorted(index):
        k = key.strip().lower()
        number = k[1:] if k.startswith("p") else k
        if any(ch in k for ch in "*?["):
            hits = [
                pid
                for pid, (slug, _) in index.items()
                if fnmatch.fnmatch(pid, k) or fnmatch.fnmatch(slug, k)
            ]
        elif number.isdigit():
            hits = [f"p{int(number):02d}"] if f"p{int(number):02d}" in index else []
        else:
            hits = [by_slug[k]] if k in by_slug else []
        if not hits:
            raise KeyError(f"no problem matches {key!r}")
        chosen.extend(sorted(hits))
    wanted = {f.strip().lower() for f in families}
    return {
        pid: index[pid][1]
        for pid in dict.fromkeys(chosen)
        if not wanted or index[pid][1].lower() in wanted
    }


def planned_cells(config: object) -> list[PlannedCell]:
    """The cells of an experiment config (models × directions × families, and "all")."""
    problems = select(getattr(config, "problems", ()), getattr(config, "families", ()))
    replicates = int(getattr(config, "replicates", 1))
    dsls = set(getattr(config, "dsls", ("cute", "tirx")))
    directions = [d for d in metrics.DIRECTIONS if set(d.split("->")) <= dsls]
    families: dict[str, list[str]] = defaultdict(list)
    for pid, family in problems.items():
        families[family].append(pid)
    cells = []
    for model in getattr(config, "models", ()):
        for direction in directions:
            cells.append(PlannedCell(model.name, direction, "all", tuple(problems), replicates))
            cells.extend(
                PlannedCell(model.name, direction, fam, tuple(ids), replicates)
                for fam, ids in sorted(families.items())
            )
    return cells
