"""The Lift view's Noise tab: per lift row the paper's strict T / H beside help and harm beyond
the A/A noise band, the within-noise share and the share of strict help / harm within noise;
below it the A/A bands per problem and grading host (docs/analysis.md)."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text

from screens.fit import Column
from screens.lift_cells import grading_cell
from screens.render import pct

NOISE_HELP = (
    "Noise tab: T and H are the paper's strict help and harm (ρ > 1, ρ < 1). T>n and H>n "
    "count only comparisons beyond noise: a verdict change (rescue, break), or both arms "
    "passing with |log ρ| above the limit of the problem's A/A band on its grading host (a "
    "95%/95% bound from repeated gradings of one file: [grading] final_repeats, mkb noise). "
    "~n is the share within noise, no band the pairs with no band to judge them, x-host the "
    "pairs whose arms were graded on different hosts (never judged), T~n / H~n "
    "the share of the strict T / H that is within noise. The bands table gives each "
    "problem's and DSL's SD of log runtime on a host, its A/A band (95% of two gradings' "
    "ratio, or why there is none) and the limits for arms of 1 and 3 repeats."
)

NOISE_COLUMNS = (
    Column("model", "model", min_width=8),
    Column("direction", "direction", short="dir."),
    Column("family", "family", min_width=6),
    Column("pairs", "pairs", short="n"),
    Column("help", "T"),
    Column("harm", "H"),
    Column("help_beyond", "T>n"),
    Column("harm_beyond", "H>n"),
    Column("within", "~n"),
    Column("unknown", "no band", short="?", drop=2),
    Column("cross_host", "x-host", short="x", drop=2),
    Column("help_within", "T~n", drop=3),
    Column("harm_within", "H~n", drop=3),
    Column("grading", "grading", short="grd", drop=1),
)
BAND_COLUMNS = (
    Column("problem", "problem"),
    Column("dsl", "DSL"),
    Column("host", "grading host", short="host", min_width=8),
    Column("series", "series", drop=2),
    Column("dof", "dof"),
    Column("sigma", "σ log t", short="σ"),
    Column("band", "A/A band", short="band"),
    Column("limit1", "limit R=1", short="R=1"),
    Column("limit3", "limit R=3", short="R=3"),
    Column("grading", "grading", short="grd", drop=1),
)


def _right(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right")


def _pm(log_value: float | None) -> str:
    return "-" if log_value is None else f"±{100 * math.expm1(log_value):.1f}%"


def noise_cells(row: dict[str, Any], compact: bool = False, preview: bool = False) -> list[Text]:
    """One noise-aware lift row; dimmed when from CPU preview."""
    dim = "dim" if preview else ""
    direction = row["direction"]
    if compact:
        source, target = direction.split("->")
        direction = f"{source[0]}→{target[0]}"
    model = row["model"].rsplit("/", 1)[-1] if compact else row["model"]
    return [
        Text(model),
        Text(direction),
        Text(row["family"]),
        _right(str(row["n"])),
        _right(pct(row.get("help_rate")), dim),
        _right(pct(row.get("harm_rate")), dim),
        _right(pct(row.get("help_beyond_noise")), dim or "green"),
        _right(pct(row.get("harm_beyond_noise")), dim or "red"),
        _right(pct(row.get("within_noise")), dim),
        _right(str(row.get("unknown_noise", 0)), dim),
        _right(str(row.get("cross_host", 0)), dim),
        _right(pct(row.get("strict_help_within_noise")), dim),
        _right(pct(row.get("strict_harm_within_noise")), dim),
        grading_cell(preview, compact),
    ]


def band_cells(row: dict[str, Any], compact: bool = False) -> list[Text]:
    """One A/A band row (the host is a machine name and a device: cleaned by the App)."""
    preview = bool(row.get("preview"))
    dim = "dim" if preview else ""
    sigma = row.get("sigma")
    return [
        Text(row["problem"]),
        Text(str(row.get("dsl", ""))),
        Text(str(row["host"])),
        _right(str(row["series"])),
        _right(str(row["dof"])),
        _right("-" if sigma is None else f"{sigma:.4f}", dim),
        _right(str(row.get("reason") or "-") if sigma is None else _pm(row.get("aa_band")), dim),
        _right(_pm(row.get("limit_r1")), dim),
        _right(_pm(row.get("limit_r3")), dim),
        grading_cell(preview, compact),
    ]


def noise_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list((report.get("noise") or {}).get("lift", []))


def power_text(report: dict[str, Any]) -> str:
    """Whether T>n is power-limited: the detection of 1.1× and 1.3× at the bands in use."""
    from engine.analysis.noise_text import power_lines

    lines = power_lines((report.get("noise") or {}).get("power"), "T>n")
    return "\n".join(line.strip() for line in lines)


def band_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list((report.get("noise") or {}).get("bands", []))
