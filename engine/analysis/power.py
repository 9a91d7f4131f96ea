"""Power planning (``mkb power``, the launch form): how many comparisons per cell detect a
paired lift, from a pilot's spread of log ρ and its A/A noise bands (docs/analysis.md, "Power").

Per cell (model × direction × family, and "all"), with σ_b the SD of true log ρ between
problems and replicates, σ_m the SD of one log runtime on the grading host and R repeated
finals per arm (whose medians have variance v(R)·σ_m²), one comparison's log ρ has variance
s² = σ_b² + 2·v(R)·σ_m², and the normal approximation of a two-sided test of mean log ρ = 0 at
level α needs n = ((z₁₋α/₂ + z₁₋β) · s / δ)² comparisons to detect a mean log-lift δ with power
1 − β; n comparisons give power Φ(√n·δ/s − z₁₋α/₂) + Φ(−√n·δ/s − z₁₋α/₂). σ_b comes from the
pilot's observed variance of log ρ in the cell less its measurement part (pooled over the pilot
when the cell has fewer than 3 comparisons); σ_m from the bands of the cell's problems.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from engine.analysis import metrics
from engine.analysis.noise import Band, BandKey, median_variance
from engine.analysis.noise_lift import band_for, repeats_of

NORMAL = statistics.NormalDist()
DEFAULT_LIFTS = (0.05, 0.10)
MIN_CELL = 3  # pilot comparisons a cell needs for its own σ_b


@dataclass(frozen=True)
class PlannedCell:
    model: str
    direction: str
    family: str  # a family, or "all"
    problems: tuple[str, ...]
    replicates: int


def comparisons_needed(delta: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """n = ⌈((z₁₋α/₂ + z_power) · sd / δ)²⌉ (at least 2)."""
    if delta <= 0 or sd < 0:
        raise ValueError("need a positive lift and a non-negative SD")
    z = NORMAL.inv_cdf(1 - alpha / 2) + NORMAL.inv_cdf(power)
    return max(2, math.ceil((z * sd / delta) ** 2))


def power_of(n: int, delta: float, sd: float, alpha: float = 0.05) -> float:
    """Two-sided power of n comparisons for a mean log-lift δ (normal approximation)."""
    if n <= 0:
        return 0.0
    if sd <= 0:
        return 1.0
    z = NORMAL.inv_cdf(1 - alpha / 2)
    shift = math.sqrt(n) * delta / sd
    return NORMAL.cdf(shift - z) + NORMAL.cdf(-shift - z)


def _noise_variance(c: metrics.Comparison, bands: Mapping[BandKey, Band]) -> float:
    """The measurement part of a pilot comparison's log ρ variance (0 unless both pass)."""
    if c.treatment is None or not (c.baseline.passed and c.treatment.passed):
        return 0.0
    band = band_for(c, bands)
    if band is None or band.sigma is None:
        return 0.0
    spread = median_variance(repeats_of(c.baseline)) + median_variance(repeats_of(c.treatment))
    return band.sigma**2 * spread


def between_sd(
    comps: Sequence[metrics.Comparison], bands: Mapping[BandKey, Band]
) -> float | None:
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
