"""Noise-aware lift: whether each comparison's ρ lies beyond the noise of its problem, and per
model × direction × family the help, harm and within-noise rates beside the paper's strict T
and H (which stay exactly as :func:`engine.analysis.metrics.lift` computes them).

A comparison is classified (docs/analysis.md, "Noise-aware lift"):

- ``help`` / ``harm``: beyond noise — a verdict change (rescue, break: never within noise), or
  both arms passing with ``|log ρ|`` above the limit of their problem's A/A band;
- ``within``: both arms pass and ``|log ρ|`` is within that limit;
- ``neutral``: no runtime to compare (joint failure, or a skipped treatment): ρ = 1 by rule;
- ``unknown``: both arms pass but no band exists for the problem on the grading host;
- ``cross_host``: both arms pass but were graded on different hosts: a host's speed is not
  noise, so such a comparison is never called beyond noise (nor within) on its runtimes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from engine.analysis import metrics
from engine.analysis.noise import Band, BandKey, Series, hosts_of, pool
from engine.analysis.outcomes import OutcomeSet, ScoredAttempt

CLASSES = ("help", "harm", "within", "neutral", "unknown", "cross_host")
UNJUDGED = ("unknown", "cross_host")  # both pass, no runtime judgement


@dataclass(frozen=True)
class NoiseCall:
    """One comparison's noise-aware class and the limit it was held to."""

    noise: str  # one of CLASSES
    limit: float | None = None  # |log ρ| limit (both arms passing with a band)
    repeats: tuple[int, int] = (1, 1)  # gradings behind the baseline's and treatment's runtime


def repeats_of(attempt: ScoredAttempt) -> int:
    """Gradings behind an arm's runtime (its passing repeated finals, at least 1)."""
    return max(1, len(attempt.repeats_ms))


def band_for(c: metrics.Comparison, bands: Mapping[BandKey, Band]) -> Band | None:
    """The widest band of the comparison's problem over its arms' DSLs and hosts (an arm
    graded on several hosts counts each); None unless every one of them has a band."""
    assert c.treatment is not None
    keys = {
        (c.problem, a.dsl, host) for a in (c.baseline, c.treatment) for host in hosts_of(a.host)
    }
    found = [bands.get(key) for key in keys]
    known = [b for b in found if b is not None and b.known]
    if len(known) < len(keys):
        return None
    return max(known, key=lambda b: b.sigma or 0.0) if known else None


def classify(c: metrics.Comparison, bands: Mapping[BandKey, Band]) -> NoiseCall:
    """The comparison's noise-aware class (see the module docstring)."""
    treat = c.treatment
    if treat is None:
        return NoiseCall("neutral")
    reps = (repeats_of(c.baseline), repeats_of(treat))
    if not (c.baseline.passed or treat.passed):
        return NoiseCall("neutral", None, reps)
    if c.baseline.passed != treat.passed:  # rescue or break: a verdict change
        return NoiseCall("help" if treat.passed else "harm", None, reps)
    if set(hosts_of(c.baseline.host)) != set(hosts_of(treat.host)):
        return NoiseCall("cross_host", None, reps)
    band = band_for(c, bands)
    limit = None if band is None else band.limit(*reps)
    if limit is None:
        return NoiseCall("unknown", None, reps)
    log_rho = math.log(c.rho)
    if abs(log_rho) <= limit:
        return NoiseCall("within", limit, reps)
    return NoiseCall("help" if log_rho > 0 else "harm", limit, reps)


def series_from_attempts(rows: Iterable[ScoredAttempt]) -> list[Series]:
    """Each passing attempt's repeated finals as one series (for outcomes read from a file)."""
    return [
        Series(r.problem, r.host, r.repeats_ms, dsl=r.dsl, preview=r.preview)
        for r in rows
        if r.passed and len(r.repeats_ms) >= 2
    ]


def bands_of(outcomes: OutcomeSet) -> dict[BandKey, Band]:
    """The A/A bands an outcome set is judged by: its stored series, else its rows' repeats."""
    stored = outcomes.series
    return pool(stored if stored is not None else series_from_attempts(outcomes.rows))


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def noise_cell(
    group: Sequence[metrics.Comparison], calls: Mapping[int, NoiseCall]
) -> dict[str, object]:
    """Noise-aware columns of one cell (``calls`` by ``id(comparison)``)."""
    n = len(group)
    counts = dict.fromkeys(CLASSES, 0)
    strict_help = strict_harm = help_within = harm_within = 0
    for c in group:
        call = calls[id(c)].noise
        counts[call] += 1
        if c.rho > 1.0 and call not in UNJUDGED:
            strict_help += 1
            help_within += call == "within"
        elif c.rho < 1.0 and call not in UNJUDGED:
            strict_harm += 1
            harm_within += call == "within"
    return {
        "help_beyond_noise": _share(counts["help"], n),
        "harm_beyond_noise": _share(counts["harm"], n),
        "within_noise": _share(counts["within"], n),
        "neutral": _share(counts["neutral"], n),
        "unknown_noise": counts["unknown"],
        "cross_host": counts["cross_host"],
        "strict_help_within_noise": _share(help_within, strict_help),
        "strict_harm_within_noise": _share(harm_within, strict_harm),
    }


def noise_lift_table(
    comps: Sequence[metrics.Comparison], bands: Mapping[BandKey, Band]
) -> tuple[list[dict[str, object]], dict[int, NoiseCall]]:
    """The lift table's cells (model × direction, all and per family) with strict T/H and the
    noise-aware columns; and each comparison's call (by ``id``)."""
    calls = {id(c): classify(c, bands) for c in comps}
    rows = metrics.lift_table(comps, lambda g: noise_cell(g, calls))
    keep = ("model", "direction", "family", "n", "problems", "help_rate", "harm_rate")
    out = [
        {k: r[k] for k in keep} | {k: v for k, v in r.items() if k not in keep and k != "delta_gm"}
        for r in rows
    ]
    return out, calls


def comparison_fields(call: NoiseCall) -> dict[str, object]:
    """A comparison's noise-aware fields in the report (and its CSV)."""
    return {
        "noise": call.noise,
        "noise_limit": call.limit,
        "repeats_base": call.repeats[0],
        "repeats_treat": call.repeats[1],
    }
