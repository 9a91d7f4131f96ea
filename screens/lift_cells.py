"""Cells of the Lift view: ρ̄ with its interval and pairs beside it, PREVIEW marks (dimmed
figures) for CPU-preview grading, and the note on why ρ and speedups can disagree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from engine.analysis import metrics, stats
from engine.analysis.outcomes import OutcomeSet
from engine.analysis.paired import TIER_NAMES
from screens.fit import Column
from screens.render import pct, signed_pct, speedup_text

INTERVAL_DRAWS = 1_000  # bootstrap draws per interval (seeded: the same figures every time)
RHO_NOTE = (
    "ρ: baseline ÷ treatment raw runtime of the same problem and replicate "
    "(fail→pass 4, pass→fail ¼). Speedups divide each run's own eager time and cap at "
    "100×, so ρ need not equal their ratio. F1 explains more."
)
RHO_HELP = (
    "ρ = baseline (target solo) ÷ treatment runtime, paired on the same model, problem "
    "and replicate, on raw implementation medians; a fail→pass rescue counts 4, a "
    "pass→fail break ¼, a joint failure or skipped treatment 1. ρ̄ is the geometric "
    "mean of ρ over the pairs (ΔGM = ρ̄ − 1); 95% CI is a percentile bootstrap over "
    "the pairs (none below 2 pairs); pairs counts them (one per problem and "
    "replicate). Speedups (Solo tab, base × / treat × of a comparison) are eager ÷ "
    "implementation with each evaluation's own eager time, capped at 100×, and exist "
    "only for passing attempts, so ρ can disagree with the ratio of the speedups "
    "beside it. Figures from CPU-preview grading are dimmed and marked PREVIEW: they "
    "are not comparable with GPU-scored figures."
)
FIGURES = ("pairs", "ρ̄", "95% CI", "ΔGM", "T", "H")

LIFT_COLUMNS = (
    Column("model", "model", min_width=8),
    Column("direction", "direction", short="dir."),
    Column("family", "family", min_width=6),
    Column("pairs", "pairs", short="n"),
    Column("rho", "ρ̄"),
    Column("ci", "95% CI", short="CI"),
    Column("delta_gm", "ΔGM"),
    Column("help", "T"),
    Column("harm", "H"),
    Column("grading", "grading", short="grd", drop=1),
)
SOLO_COLUMNS = (
    Column("model", "model", min_width=8),
    Column("dsl", "DSL"),
    Column("n", "N"),
    Column("pass", "P"),
    Column("gm", "GM"),
    Column("r2", "R(2)"),
    Column("sol", "% SOL"),
    Column("grading", "grading", short="grd", drop=1),
)
STANDING_COLUMNS = (
    Column("model", "model", min_width=8),
    Column("standing", "source vs solo", short="source"),
    *LIFT_COLUMNS[3:],
)
TIER_GRID_COLUMNS = (
    Column("solo_tier", "solo tier", short="solo"),
    Column("source_tier", "source tier", short="source"),
    *LIFT_COLUMNS[3:],
)


def add_intervals(report: dict[str, Any], outcomes: OutcomeSet) -> dict[str, Any]:
    """Put ρ̄'s interval (``stats.rho_interval``) on every lift and tier row, and a
    ``preview`` flag on every solo row."""
    comps = metrics.comparisons(outcomes.rows)

    def interval(group: Sequence[metrics.Comparison]) -> dict[str, Any]:
        return dict(stats.rho_interval(group, INTERVAL_DRAWS))

    for r in report["lift"]:
        r["interval"] = interval(
            [
                c
                for c in comps
                if c.model == r["model"]
                and c.direction == r["direction"]
                and r["family"] in ("all", c.family)
            ]
        )
    for t in report["tiers"]["by_standing"]:
        t["interval"] = interval(
            [c for c in comps if c.standing == t["standing"] and t["model"] in ("all", c.model)]
        )
    for t in report["tiers"]["by_solo_and_source_tier"]:
        t["interval"] = interval(
            [
                c
                for c in comps
                if TIER_NAMES[c.solo_tier] == t["solo_tier"]
                and TIER_NAMES[c.source_tier] == t["source_tier"]
            ]
        )
    previews = {(o.model, o.dsl) for o in outcomes.rows if o.arm == "solo" and o.preview}
    for s in report["solo"]:
        s["preview"] = outcomes.preview or (s["model"], s["dsl"]) in previews
    if outcomes.preview:  # graded on CPU: failures are preview verdicts too, not comparable
        for row in (
            *report["lift"],
            *report["tiers"]["by_standing"],
            *report["tiers"]["by_solo_and_source_tier"],
        ):
            row["interval"]["preview"] = True
    return report


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right")


def grading_cell(preview: bool, compact: bool = False) -> Text:
    """PREVIEW (CPU preview, not comparable) or scored."""
    if preview:
        return Text("PRV" if compact else "PREVIEW", style="bold yellow")
    return Text("GPU" if compact else "scored", style="dim")


def rho_cells(row: dict[str, Any]) -> list[Text]:
    """pairs, ρ̄, 95% CI, ΔGM, T, H of one lift or tier row; dimmed when from preview."""
    iv = row.get("interval") or {}
    dim = "dim" if iv.get("preview") else ""
    gm, low, high = iv.get("gm"), iv.get("low"), iv.get("high")
    delta = row.get("delta_gm")
    delta_style = dim or (
        "" if delta is None else "green" if delta > 0 else "red" if delta < 0 else ""
    )
    return [
        _right(str(row["n"])),
        _right("-" if gm is None else f"{gm:.3f}", dim),
        _right("-" if low is None or high is None else f"{low:.2f}–{high:.2f}", dim),
        _right(signed_pct(delta), delta_style),
        _right(pct(row.get("help_rate")), dim),
        _right(pct(row.get("harm_rate")), dim),
    ]


def lift_cells(row: dict[str, Any], compact: bool = False) -> list[Text]:
    direction = row["direction"]
    if compact:
        source, target = direction.split("->")
        direction = f"{source[0]}→{target[0]}"
    model = row["model"].rsplit("/", 1)[-1] if compact else row["model"]
    preview = bool((row.get("interval") or {}).get("preview"))
    return [
        Text(model),
        Text(direction),
        Text(row["family"]),
        *rho_cells(row),
        grading_cell(preview, compact),
    ]


def solo_cells(row: dict[str, Any], compact: bool = False) -> list[Text]:
    dim = "dim" if row.get("preview") else ""
    sol = row.get("pct_sol_median")
    model = row["model"].rsplit("/", 1)[-1] if compact else row["model"]
    return [
        Text(model),
        Text(row["dsl"]),
        _right(str(row["n"])),
        _right(pct(row["pass_rate"]), dim),
        _right(speedup_text(row["gm"]), dim),
        _right(pct(row["r2"]), dim),
        _right("-" if sol is None else f"{sol:.1f}%", dim),
        grading_cell(bool(row.get("preview")), compact),
    ]


def tier_cells(first: str, second: str, row: dict[str, Any], compact: bool = False) -> list[Text]:
    preview = bool((row.get("interval") or {}).get("preview"))
    return [
        Text(str(row[first])),
        Text(str(row[second])),
        *rho_cells(row),
        grading_cell(preview, compact),
    ]


def interval_summary(interval: dict[str, Any] | None) -> Text:
    """``ρ̄ 1.07 (95% CI 0.91–1.25) over 4 pairs, 1 replicate`` for a title line."""
    iv = interval or {}
    gm, low, high = iv.get("gm"), iv.get("low"), iv.get("high")
    if gm is None:
        return Text("no resolved pairs", style="dim")
    n, reps = iv.get("n", 0), iv.get("replicates", 0)
    ci = (
        "no interval below 2 pairs"
        if low is None or high is None
        else (f"95% CI {low:.2f}–{high:.2f}")
    )
    text = Text(
        f"ρ̄ {gm:.3f} ({ci}) over {n} pair{'s' if n != 1 else ''}, "
        f"{reps} replicate{'s' if reps != 1 else ''}",
        style="dim" if iv.get("preview") else "",
    )
    if iv.get("preview"):
        text.append(" PREVIEW (CPU grading, not comparable)", style="bold yellow")
    return text
