"""Each comparison decided from its paired, interleaved finals (docs/analysis.md, "Paired
test"): per clock (end to end, the paper's; the GPU span) the estimate of log ρ with its t
interval, the Benjamini–Hochberg q across the experiment's paired comparisons and the call
(``help`` / ``harm`` beyond noise at q ≤ 0.05, ``within``, ``untested``). The test takes only
pairs whose two gradings ran on one slot; a pair split over two slots (a job resumed on
another machine) is left out and counted (``split_pairs``). A comparison with no pair on one
slot is ``cross_host``, one without pairs ``unpaired``: neither is ever called beyond noise.
Where the two clocks' calls differ, the row says so.

The prior of a comparison's variance is the band of (problem, DSL, host) of each arm pooled
from the experiment's series *other than the comparison's own* (leave-one-out: its own
gradings must not count twice). Outliers are judged per grading
(:func:`engine.analysis.paired_test.paired_test_gradings`), against the arm's gradings and its
file's unpaired readings on that host; their counts are in each clock's row and, per clock, in
the report's ``outliers``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.analysis import sequential
from engine.analysis.noise import BandKey, Series, band_of
from engine.analysis.paired_test import (
    PAIRED,
    PRIOR_DOF_CAP,
    PairedEstimate,
    bh_qvalues,
    call_of,
    paired_test_gradings,
    pairing_status,
    same_slot,
    screen_pairs,
)
from engine.analysis.power import paired_power
from storage.paired_repeats import PairedComparison, PairedGrading

CLOCKS = {"e2e": "impl_median_ms", "span": "span_ms"}
CLOCK_NAMES = {"e2e": "end to end", "span": "GPU span"}
POWER_LIFTS = (0.10, 0.30)


def _value(g: PairedGrading, clock: str) -> float | None:
    value = getattr(g, CLOCKS[clock]) if g.passed else None
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _arm_bands(
    c: PairedComparison, groups: Mapping[BandKey, Sequence[Series]]
) -> tuple[tuple[float | None, float | None], int]:
    """Each arm's band σ of one grading from the leave-one-out bands (the widest of its hosts';
    None: an arm without a band) and the smallest dof."""
    own = {g.series for g in (*c.baseline, *c.treatment)}
    sigmas: list[float | None] = []
    dofs: list[int] = []
    for arm in (c.baseline, c.treatment):
        arm_sigmas: list[float | None] = []
        for key in {(c.problem_id, g.dsl, g.host) for g in arm}:
            others = [s for s in groups.get(key, ()) if s.key not in own]
            band = band_of(*key, others)
            arm_sigmas.append(band.sigma)
            dofs.append(band.dof)
        known = [s for s in arm_sigmas if s is not None]
        sigmas.append(max(known) if known and len(known) == len(arm_sigmas) else None)
    return (sigmas[0], sigmas[1]), min(dofs, default=0)


Solo = Mapping[tuple[str, str], Sequence[tuple[float | None, float | None]]]


def _refs(arm: Sequence[PairedGrading], clock: str, solo: Solo) -> list[float | None]:
    """The arm's file's unpaired readings on the arm's hosts on this clock."""
    index = 0 if clock == "e2e" else 1
    keys = {(g.source_hash, g.host) for g in arm if g.source_hash}
    return [reading[index] for key in keys for reading in solo.get(key, ())]


def _estimate(
    c: PairedComparison,
    clock: str,
    groups: Mapping[BandKey, Sequence[Series]],
    solo: Solo,
    adaptive_max: int | None = None,
) -> tuple[PairedEstimate, float | None]:
    """The comparison's test on one clock, and the p-value its BH step takes: the test's own,
    or for an adaptive design the sequence's (:func:`sequential.sequential_p` over the pairs
    left after the outlier screen, in their order, with the same bands; one pair left, with a
    band: its p over the first look's share of α)."""
    base = [_value(b, clock) for b, _ in c.pairs]
    treat = [_value(t, clock) for _, t in c.pairs]
    sigmas, dof = _arm_bands(c, groups)
    refs = (_refs(c.baseline, clock, solo), _refs(c.treatment, clock, solo))
    dof = min(dof, PRIOR_DOF_CAP)
    est = paired_test_gradings(base, treat, sigmas, dof, refs=refs)
    if adaptive_max is None or est.p is None:
        return est, est.p
    diffs = screen_pairs(base, treat, *sigmas, refs, dof if dof > 0 else None)[0]
    if len(diffs) < sequential.FIRST_LOOK:  # outliers left one pair: it is the first look
        return est, min(est.p / sequential.look_weight(sequential.FIRST_LOOK, adaptive_max), 1.0)
    band = sequential.arms_band((sigmas[0], dof), (sigmas[1], dof))
    return est, sequential.sequential_p(diffs, *band, adaptive_max, screen=False)


def paired_calls(
    comparisons: Sequence[PairedComparison],
    series: Mapping[str, Iterable[Series]],
    solo: Solo | None = None,
    adaptive_max: int | None = None,
) -> list[dict[str, Any]]:
    """Per comparison: its pairing, and per clock the test, q and call (see the docstring).
    ``series``: each clock's stored series (``e2e`` and ``span``); ``solo``: unpaired readings
    (e2e, span) of the arms' files by (source hash, host), more references for outliers;
    ``adaptive_max``: the pairs' maximum when the jobs stopped adaptively (the BH step then
    takes each comparison's sequential p-value, valid however the job was stopped)."""
    groups = {clock: _grouped(series.get(clock, ())) for clock in CLOCKS}
    rows: list[dict[str, Any]] = []
    for c in comparisons:
        slots = [(b.where, t.where) for b, t in c.pairs]
        status = pairing_status(slots)
        tested_pairs = [pair for pair, same in zip(c.pairs, same_slot(slots), strict=True) if same]
        kept = dataclasses.replace(
            c,
            baseline=tuple(b for b, _ in tested_pairs),
            treatment=tuple(t for _, t in tested_pairs),
        )
        tests = {
            clock: _estimate(kept, clock, groups[clock], solo or {}, adaptive_max)
            for clock in CLOCKS
        }
        clocks = {clock: est for clock, (est, _) in tests.items()}
        tested = {clock: p for clock, (_, p) in tests.items()}
        rows.append(
            {
                "comparison": c,
                "split": len(slots) - len(tested_pairs),
                "status": status,
                "clocks": clocks,
                "tested_p": tested,
            }
        )
    for clock in CLOCKS:
        ps = [r["tested_p"][clock] if r["status"] == PAIRED else None for r in rows]
        for r, q in zip(rows, bh_qvalues(ps), strict=True):
            r.setdefault("q", {})[clock] = q
    return [_row(r, adaptive_max is not None) for r in rows]


def _grouped(series: Iterable[Series]) -> dict[BandKey, list[Series]]:
    out: dict[BandKey, list[Series]] = defaultdict(list)
    for s in series:
        out[(s.problem, s.dsl, s.host)].append(s)
    return out


def _row(r: dict[str, Any], adaptive: bool = False) -> dict[str, Any]:
    c: PairedComparison = r["comparison"]
    status: str = r["status"]
    clocks: dict[str, Any] = {}
    for clock, est in r["clocks"].items():
        q = r["q"][clock]
        call = call_of(est, q) if status == PAIRED else status
        sequential_p = r["tested_p"][clock] if adaptive else None
        clocks[clock] = {**est.as_dict(), "sequential_p": sequential_p, "q": q, "call": call}
    calls = {clock: v["call"] for clock, v in clocks.items()}
    tested = [v for v in calls.values() if v in ("help", "harm", "within")]
    disagree = len(tested) == len(calls) and len(set(tested)) > 1
    hosts = sorted({g.where for g in (*c.baseline, *c.treatment)})
    return {
        "comparison_id": c.comparison_id,
        "model": c.model,
        "problem": c.problem_id,
        "direction": c.direction,
        "replicate": c.replicate,
        "status": status,
        "slots": hosts,
        "pairs": len(c.pairs),
        "split_pairs": r["split"],
        "call": calls["e2e"],
        "clocks": clocks,
        "clocks_disagree": disagree,
        "rejected_gradings": {clock: v["rejected_gradings"] for clock, v in clocks.items()},
        "note": "; ".join(
            [
                *(
                    [f"clocks disagree: end to end {calls['e2e']}, GPU span {calls['span']}"]
                    if disagree
                    else []
                ),
                *(
                    [f"{r['split']} pair(s) split over two slots left out of the test"]
                    if r["split"] and status == PAIRED
                    else []
                ),
                *_own_sigma_notes(clocks),
                *_outlier_notes(clocks),
            ]
        ),
    }


def _own_sigma_notes(clocks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per clock whose call is help or harm from the comparison's own pairs alone (no band of
    other series to shrink toward): how few degrees of freedom the call rests on."""
    return [
        f"{CLOCK_NAMES[clock]}: {v['call']} from its own {v['k']} pairs alone "
        f"({v['dof']} dof, no band of other series)"
        for clock, v in clocks.items()
        if v["call"] in ("help", "harm") and not v["prior"]
    ]


def _outlier_notes(clocks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per clock with rejected gradings: how many, the pairs they cost and the bound's basis."""
    return [
        f"{CLOCK_NAMES[clock]}: {v['rejected_gradings']} grading(s) rejected as outliers "
        f"({v['dropped_pairs']} pair(s) dropped; bound from {v['outlier_basis']})"
        for clock, v in clocks.items()
        if v["rejected_gradings"]
    ]


def outlier_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per clock: gradings rejected as outliers, pairs dropped and comparisons touched."""
    out: dict[str, dict[str, int]] = {}
    for clock in CLOCKS:
        ests = [r["clocks"][clock] for r in rows]
        out[clock] = {
            "rejected_gradings": sum(e["rejected_gradings"] for e in ests),
            "dropped_pairs": sum(e["dropped_pairs"] for e in ests),
            "comparisons": sum(1 for e in ests if e["rejected_gradings"]),
        }
    return out


def power_note(
    rows: Sequence[dict[str, Any]], sigmas: Sequence[float], dof: int
) -> dict[str, Any] | None:
    """The detection probability of a 1.1× and a 1.3× help by one comparison with the
    experiment's typical pairs at the RMS σ of the bands in use (None without either)."""
    ks = [r["pairs"] for r in rows if r["status"] == PAIRED and r["pairs"] >= 1]
    if not ks or not sigmas:
        return None
    k = int(statistics.median(ks))
    sigma = math.sqrt(sum(s * s for s in sigmas) / len(sigmas))
    detect = {f"{lift:g}": paired_power(k, sigma, dof, math.log1p(lift)) for lift in POWER_LIFTS}
    return {
        "pairs": k,
        "sigma": sigma,
        "dof": dof,
        "detect": detect,
        "power_limited": min(detect.values()) < 0.8,
    }


def adaptive_max(config_toml: str) -> int | None:
    """``paired_max`` when an experiment's config ran its paired jobs adaptively
    (``[grading] paired_repeats = "adaptive"``), else None (fixed k, or no readable config)."""
    from engine.grading_table import DEFAULT_PAIRED_MAX

    try:
        grading = tomllib.loads(config_toml).get("grading", {})
    except tomllib.TOMLDecodeError:
        return None
    if not isinstance(grading, dict) or grading.get("paired_repeats") != "adaptive":
        return None
    most = grading.get("paired_max", DEFAULT_PAIRED_MAX)
    ok = isinstance(most, int) and not isinstance(most, bool) and most >= sequential.FIRST_LOOK
    return most if ok else None


def paired_report(db: Any, experiment_id: str) -> dict[str, Any]:
    """The experiment's paired comparisons from the store, with the power note (e2e bands)."""
    from engine.analysis.noise import pool
    from engine.analysis.spans import span_series
    from storage import queries, repeats
    from storage.paired_repeats import comparison_pairs, solo_gradings

    comps = comparison_pairs(db, experiment_id)
    if comps:  # the experiment's other resolved comparisons: unpaired, never called here
        paired_ids = {c.comparison_id for c in comps}
        comps += [
            PairedComparison(r.id, r.model, r.problem_id, r.direction, r.replicate, (), ())
            for r in queries.comparisons(db, experiment_id, resolved_only=True)
            if r.id not in paired_ids and not r.variant and r.round <= 1
        ]
    problems = {c.problem_id for c in comps}
    stored = repeats.problem_series(db, problems, "impl_median_ms", experiment_id)
    e2e = [
        Series(s["problem"], s["host"], tuple(s["values"]), s["key"], s["dsl"], s["preview"])
        for s in stored
    ]
    hashes = {g.source_hash for c in comps for g in (*c.baseline, *c.treatment)}
    solo = solo_gradings(db, experiment_id, hashes)
    series = {"e2e": e2e, "span": span_series(db, problems, experiment_id)}
    experiment = queries.experiment(db, experiment_id)
    most = adaptive_max(experiment.config_toml) if experiment is not None else None
    rows = paired_calls(comps, series, solo, most)
    in_use = {(c.problem_id, g.dsl, g.host) for c in comps for g in (*c.baseline, *c.treatment)}
    bands = [b for key, b in pool(e2e).items() if key in in_use and b.sigma is not None]
    note = power_note(
        rows,
        [b.sigma for b in bands if b.sigma is not None],
        min((b.dof for b in bands), default=0),
    )
    return {
        "comparisons": rows,
        "power": note,
        "outliers": outlier_totals(rows),
        "adaptive_max": most,
    }
