"""The full analysis of an outcome set, as one JSON-ready dict (and CSV tables)."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.analysis import metrics, noise_lift, power, spans, stats
from engine.analysis.outcomes import OutcomeSet

PREVIEW_LABEL = "PREVIEW (CPU grading, not scored, not comparable)"


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    permutation_draws: int = 20_000
    swap_draws: int = 2_000
    bootstrap_draws: int = 2_000
    seed: int = 0
    fail_flags: tuple[str, ...] = ()
    without_intervened: bool = False  # leave out attempts an operator stopped/retried/extended


def analyze(outcomes: OutcomeSet, options: AnalysisOptions | None = None) -> dict[str, Any]:
    """Every quantitative view: arms, solo, lift with intervals, tiers, tests, ladder, usage,
    on the outcome set's time source (``outcomes.time``: end to end, or the GPU span, where
    passing attempts without spans are left out and counted under ``time``)."""
    opts = options or AnalysisOptions()
    if opts.without_intervened:
        kept = [r for r in outcomes.rows if not r.interventions]
        outcomes = dataclasses.replace(outcomes, rows=kept)
    scored = metrics.apply_exclusion(outcomes.rows, opts.fail_flags)
    rows, left_out = spans.on_time(scored, outcomes.time)
    comps = metrics.comparisons(rows)
    solo = [
        {"model": s.model, "dsl": s.dsl, "n": s.n, "pass_rate": s.pass_rate, "gm": s.gm,
         "r2": s.r2, "pct_sol_median": s.pct_sol_median}
        for s in metrics.solo_metrics(rows)
    ]
    bands = noise_lift.bands_of(
        dataclasses.replace(outcomes, rows=spans.on_time(outcomes.rows, outcomes.time)[0])
    )
    resolved = len(metrics.resolved_arms(scored))
    noise_rows, calls = noise_lift.noise_lift_table(comps, bands)
    flag_counts: dict[str, int] = {}
    for r in outcomes.rows:
        for f in r.flags:
            flag_counts[f] = flag_counts.get(f, 0) + 1
    return {
        "experiment": {
            "id": outcomes.experiment_id,
            "name": outcomes.experiment_name,
            "gpu": outcomes.gpu,
        },
        "preview": outcomes.preview,
        "label": PREVIEW_LABEL if outcomes.preview else "scored",
        "time": spans.time_summary(outcomes.time, resolved, len(comps), left_out),
        "exclusion": {
            "fail_flags": list(opts.fail_flags),
            "flags_seen": flag_counts,
            **operator_exclusions(outcomes, opts),
        },
        "no_result": no_result_summary(outcomes),
        "arms": metrics.arm_metrics(rows),
        "solo": solo,
        "lift": metrics.lift_table(
            comps, lambda g: stats.delta_gm_interval(g, opts.bootstrap_draws, opts.seed)
        ),
        "tiers": {
            **metrics.tier_tables(comps),
            "leave_best_family_out": metrics.leave_best_family_out(comps),
        },
        "tests": {
            "direction_correlation": stats.direction_correlations(
                comps, opts.permutation_draws, opts.seed
            ),
            "source_speed": stats.source_speed_test(comps, opts.swap_draws, opts.seed),
            "bootstrap_delta_gm": stats.bootstrap_table(comps, opts.bootstrap_draws, opts.seed),
        },
        "ladder": metrics.rate_ladder(comps),
        "coverage": metrics.coverage(rows, comps),
        "usage": metrics.usage(scored),  # agent usage: no runtime, every attempt
        "comparisons": [comparison_row(c, calls[id(c)]) for c in comps],
        "noise": {
            "time": outcomes.time,
            "bands": [b.as_dict() for b in bands.values()],
            "lift": noise_rows,
            "power": power.noise_power_note(comps, bands),
        },
    }


def comparison_row(c: metrics.Comparison, call: Any) -> dict[str, Any]:
    """One resolved comparison as the report lists it, with its noise call and hosts."""
    return {
        "model": c.model,
        "problem": c.problem,
        "family": c.family,
        "direction": c.direction,
        "replicate": c.replicate,
        "rho": c.rho,
        "verdict": c.verdict,
        "skipped": c.skipped,
        "standing": c.standing,
        "intervened": intervened(c),
        "host_base": c.baseline.host,
        "host_treat": None if c.treatment is None else c.treatment.host,
        **noise_lift.comparison_fields(call),
    }


def no_result_summary(outcomes: OutcomeSet) -> dict[str, Any]:
    """What the analysis left out as no result, by count and reason: attempts the grader
    failed (``ungraded``: ``infra.*``; a pass without a valid runtime: ``timing.invalid``),
    never counted as the agents' failures, and passing repeats without a valid runtime."""
    return {
        "ungraded": sum(outcomes.ungraded.values()),
        "ungraded_by_reason": dict(sorted(outcomes.ungraded.items())),
        "repeats_excluded": sum(outcomes.excluded_repeats.values()),
        "repeats_by_reason": dict(sorted(outcomes.excluded_repeats.items())),
    }


def operator_exclusions(outcomes: OutcomeSet, opts: AnalysisOptions) -> dict[str, Any]:
    """What operators left out: excluded attempts (with reasons, counted per reason) and
    whether attempts they intervened on were left out too."""
    reasons: dict[str, int] = {}
    for row in outcomes.excluded:
        reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
    return {
        "excluded": len(outcomes.excluded),
        "excluded_reasons": reasons,
        "excluded_attempts": outcomes.excluded,
        "without_intervened": opts.without_intervened,
    }


def intervened(c: metrics.Comparison) -> list[str]:
    """The operators' actions on a comparison's attempts (stop, retry, extend), if any."""
    arms = (c.source, c.baseline, c.treatment)
    return sorted({a for arm in arms if arm is not None for a in arm.interventions})


def no_result_rows(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The left-out rows as a table: what (attempts or repeats), reason, count."""
    if not summary:
        return []
    return [
        {"rows": rows, "reason": reason, "count": count}
        for rows, key in (("attempts", "ungraded_by_reason"), ("repeats", "repeats_by_reason"))
        for reason, count in summary[key].items()
    ]


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def write_csv(report: dict[str, Any], directory: str | Path) -> list[Path]:
    """One CSV per table of the report (rows marked PREVIEW when so); returns the files."""
    grading = {"grading": PREVIEW_LABEL} if report["preview"] else {}
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Sequence[dict[str, Any]]] = {
        "arms": report["arms"],
        "solo": report["solo"],
        "lift": report["lift"],
        "comparisons": report["comparisons"],
        "ladder": report["ladder"],
        "usage": report["usage"],
        "direction_correlation": report["tests"]["direction_correlation"],
        "bootstrap_delta_gm": report["tests"]["bootstrap_delta_gm"],
        "noise_lift": report["noise"]["lift"],
        "noise_bands": report["noise"]["bands"],
        "time_source": [report["time"]],
        "no_result": no_result_rows(report.get("no_result")),
        **{f"tiers_{k}": v for k, v in report["tiers"].items()},
    }
    written = []
    for name, rows in tables.items():
        path = out / f"{name}.csv"
        flat = [_flatten(r) | grading for r in rows]
        columns = list(dict.fromkeys(k for r in flat for k in r))
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(flat)
        written.append(path)
    return written

