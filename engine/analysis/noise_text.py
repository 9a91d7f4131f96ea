"""Plain-text tables of the noise-aware lift and the A/A bands (``mkb analyze``)."""

from __future__ import annotations

import math
from typing import Any

from engine.analysis.tables import share, text_table, title

NO_BAND_HINT = (
    "  no A/A band yet: grade a file several times with `mkb noise PROBLEM --dsl D IMPL`, "
    "or set [grading] final_repeats >= 2"
)


def _pct(log_value: float | None) -> str:
    """A log-ratio half-width as a ± percentage of the runtime."""
    return "-" if log_value is None else f"±{100 * math.expm1(log_value):.1f}%"


def noise_lift_lines(report: dict[str, Any]) -> list[str]:
    noise = report.get("noise") or {}
    rows = [
        (
            r["model"],
            r["direction"],
            r["family"],
            r["n"],
            share(r["help_rate"]),
            share(r["harm_rate"]),
            share(r["help_beyond_noise"]),
            share(r["harm_beyond_noise"]),
            share(r["within_noise"]),
            r["unknown_noise"],
            r.get("cross_host", 0),
            share(r["strict_help_within_noise"]),
            share(r["strict_harm_within_noise"]),
        )
        for r in noise.get("lift", [])
    ]
    heading = (
        f"Noise-aware lift ({noise.get('time', 'e2e')} runtimes; T/H strict as in the paper; "
        "T>n/H>n beyond the A/A noise limit, verdict changes always beyond; ~n within noise; "
        "no band: both pass but no A/A band; x-host: both pass on different hosts, never judged; "
        "T~n/H~n: share of strict T/H within noise)"
    )
    return text_table(
        title(heading, report["preview"]),
        (
            "model",
            "direction",
            "family",
            "N",
            "T",
            "H",
            "T>n",
            "H>n",
            "~n",
            "no band",
            "x-host",
            "T~n",
            "H~n",
        ),
        rows,
        left=3,
    )


def band_lines(report: dict[str, Any]) -> list[str]:
    bands = (report.get("noise") or {}).get("bands", [])
    rows = [
        (
            b["problem"],
            b.get("dsl", ""),
            b["host"],
            b["series"],
            b["gradings"],
            b.get("rejected", 0),
            b["dof"],
            "-" if b["sigma"] is None else f"{b['sigma']:.4f}",
            _pct(b["aa_band"]),
            _pct(b["limit_r1"]),
            _pct(b["limit_r3"]),
            "PREVIEW" if b["preview"] else "",
            b.get("reason") or "",
        )
        for b in bands
    ]
    heading = (
        "A/A bands per problem, DSL and grading host (sigma: SD of log runtime within a file's "
        "gradings, outliers beyond 5 robust SDs rejected and counted; band: 95% of two "
        "gradings' ratio; limit: what |log rho| must exceed, arms of 1 and of 3 repeats; no band "
        "below 4 dof, at zero spread or when outliers dominate: the reason says which)"
    )
    lines = text_table(
        title(heading, report["preview"]),
        (
            "problem",
            "dsl",
            "host",
            "series",
            "gradings",
            "rejected",
            "dof",
            "sigma",
            "A/A band",
            "limit R=1",
            "limit R=3",
            "",
            "no band because",
        ),
        rows,
        left=3,
    )
    if not any(b["sigma"] is not None for b in bands):
        lines.append(NO_BAND_HINT)
    return lines


def power_lines(note: dict[str, Any] | None, what: str) -> list[str]:
    """The power-limited note under a table of calls beyond noise."""
    if not note:
        return []
    detect = note["detect"]
    line = (
        f"  {what}: at the bands in use a 1.1x help is called {share(detect['0.1'])} and a "
        f"1.3x help {share(detect['0.3'])} of the time"
    )
    if note["power_limited"]:
        line += "; power-limited: beyond-noise shares are lower bounds, not the share helped"
    return [line]


def paired_lines(report: dict[str, Any]) -> list[str]:
    """Each paired comparison: its pairing, and per clock the estimate, q and call."""
    paired = report.get("paired")
    if not paired:
        return []

    def clock(c: dict[str, Any]) -> tuple[str, str, str]:
        if c["rho"] is None:
            return "-", "-", c["call"]
        interval = "" if c["rho_low"] is None else f" [{c['rho_low']:.3f}, {c['rho_high']:.3f}]"
        q = "-" if c["q"] is None else f"{c['q']:.3f}"
        return f"{c['rho']:.3f}{interval}", q, c["call"]

    rows = [
        (
            r["model"],
            r["direction"],
            r["problem"],
            r["replicate"],
            r["status"],
            r["pairs"],
            *clock(r["clocks"]["e2e"]),
            *clock(r["clocks"]["span"]),
            r["note"],
        )
        for r in paired["comparisons"]
    ]
    heading = (
        "Paired comparisons (interleaved finals on one slot; rho with its 95% t interval, BH q "
        "across the experiment; help/harm = beyond noise at q <= 0.05; cross_host/unpaired are "
        "never called)"
    )
    header = (
        "model",
        "direction",
        "problem",
        "rep",
        "pairing",
        "k",
        "rho e2e",
        "q",
        "call",
        "rho span",
        "q",
        "call",
        "",
    )
    lines = text_table(title(heading, report["preview"]), header, rows, left=5)
    most = paired.get("adaptive_max")
    adaptive = (
        [
            f"  adaptive jobs (up to {most} pairs): q from each comparison's sequential p "
            "(min over its looks of p / the look's share of alpha: valid however early it stopped)"
        ]
        if most
        else []
    )
    return [
        *lines,
        *adaptive,
        *outlier_lines(paired.get("outliers")),
        *power_lines(paired.get("power"), "per comparison"),
    ]


def outlier_lines(totals: dict[str, Any] | None) -> list[str]:
    """The gradings the paired test rejected as outliers, per clock."""
    if not totals:
        return []
    return [
        f"  outliers ({name}): {t['rejected_gradings']} grading(s) rejected, "
        f"{t['dropped_pairs']} pair(s) dropped, in {t['comparisons']} comparison(s)"
        for clock, name in (("e2e", "end to end"), ("span", "GPU span"))
        if (t := totals.get(clock))
    ]


def noise_lines(report: dict[str, Any]) -> list[str]:
    """The noise sections (when the report has them)."""
    if "noise" not in report:
        return []
    note = power_lines(report["noise"].get("power"), "T>n")
    return [*noise_lift_lines(report), *note, *band_lines(report), *paired_lines(report)]
