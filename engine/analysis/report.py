"""The full analysis of an outcome set, as one JSON-ready dict (and CSV tables)."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.analysis import metrics, stats
from engine.analysis.outcomes import OutcomeSet


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    permutation_draws: int = 20_000
    swap_draws: int = 2_000
    bootstrap_draws: int = 2_000
    seed: int = 0
    fail_flags: tuple[str, ...] = ()


def analyze(outcomes: OutcomeSet, options: AnalysisOptions | None = None) -> dict[str, Any]:
    """Every quantitative view: solo, lift, tiers, tests, ladder, coverage, usage."""
    opts = options or AnalysisOptions()
    rows = metrics.apply_exclusion(outcomes.rows, opts.fail_flags)
    comps = metrics.comparisons(rows)
    solo = [
        {"model": s.model, "dsl": s.dsl, "n": s.n, "pass_rate": s.pass_rate, "gm": s.gm,
         "r2": s.r2, "pct_sol_median": s.pct_sol_median}
        for s in metrics.solo_metrics(rows)
    ]
    flag_counts: dict[str, int] = {}
    for r in outcomes.rows:
        for f in r.flags:
            flag_counts[f] = flag_counts.get(f, 0) + 1
    return {
        "preview": outcomes.preview,
        "label": "PREVIEW (CPU grading, not scored)" if outcomes.preview else "scored",
        "exclusion": {"fail_flags": list(opts.fail_flags), "flags_seen": flag_counts},
        "solo": solo,
        "lift": metrics.lift_table(comps),
        "tiers": {
            **metrics.tier_tables(comps),
            "leave_best_family_out": metrics.leave_best_family_out(comps),
        },
        "tests": {
            "direction_correlation": stats.direction_correlations(
                comps, opts.permutation_draws, opts.seed),
            "source_speed": stats.source_speed_test(comps, opts.swap_draws, opts.seed),
            "bootstrap_delta_gm": stats.bootstrap_table(comps, opts.bootstrap_draws, opts.seed),
        },
        "ladder": metrics.rate_ladder(comps),
        "coverage": metrics.coverage(rows, comps),
        "usage": metrics.usage(rows),
        "comparisons": [
            {"model": c.model, "problem": c.problem, "family": c.family,
             "direction": c.direction, "replicate": c.replicate, "rho": c.rho,
             "verdict": c.verdict, "skipped": c.skipped, "standing": c.standing}
            for c in comps
        ],
    }


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def write_csv(report: dict[str, Any], directory: str | Path) -> list[Path]:
    """One CSV per table of the report; returns the files written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Sequence[dict[str, Any]]] = {
        "solo": report["solo"],
        "lift": report["lift"],
        "comparisons": report["comparisons"],
        "ladder": report["ladder"],
        "usage": report["usage"],
        "direction_correlation": report["tests"]["direction_correlation"],
        "bootstrap_delta_gm": report["tests"]["bootstrap_delta_gm"],
        **{f"tiers_{k}": v for k, v in report["tiers"].items()},
    }
    written = []
    for name, rows in tables.items():
        path = out / f"{name}.csv"
        flat = [_flatten(r) for r in rows]
        columns = list(dict.fromkeys(k for r in flat for k in r))
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(flat)
        written.append(path)
    return written


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def render_text(report: dict[str, Any]) -> str:
    """A compact human summary (solo table and overall lift per model × direction)."""
    lines = []
    if report["preview"]:
        lines.append("PREVIEW: computed from CPU preview verdicts, not scored results")
    lines.append("Solo          model                          dsl    n     P      GM    R(2)"
                 "  %SOL")
    for s in report["solo"]:
        gm = f"{s['gm']:.2f}x" if s["gm"] else "-"
        sol = "-" if s.get("pct_sol_median") is None else f"{s['pct_sol_median']:.1f}%"
        lines.append(f"              {s['model']:<30} {s['dsl']:<5} {s['n']:>3} "
                     f"{s['pass_rate'] * 100:5.1f}% {gm:>7} {s['r2'] * 100:5.1f}% {sol:>6}")
    lines.append("Lift (all)    model                          direction     N    "
                 "ΔGM      T      H")
    for r in report["lift"]:
        if r["family"] != "all":
            continue
        t = "-" if r["help_rate"] is None else f"{r['help_rate'] * 100:.1f}%"
        h = "-" if r["harm_rate"] is None else f"{r['harm_rate'] * 100:.1f}%"
        lines.append(f"              {r['model']:<30} {r['direction']:<11} {r['n']:>3} "
                     f"{pct(r['delta_gm']):>7} {t:>6} {h:>6}")
    seen = report["exclusion"].get("flags_seen") or {}
    if seen:
        lines.append("Flagged attempts (exclude with --fail-flag): " + ", ".join(
            f"{flag} {n}" for flag, n in sorted(seen.items())))
    pooled = report["tests"]["direction_correlation"][0] if report["tests"][
        "direction_correlation"] else None
    if pooled and pooled.get("spearman") is not None:
        lines.append(f"Directions' log-ratio Spearman {pooled['spearman']:+.3f} "
                     f"(n={pooled['n']}, sign-flip p={pooled['p_negative']:.4f})")
    return "\n".join(lines)
