"""Plain-text rendering of an analysis report (``mkb analyze``): every table the TUI shows.

Each section is a titled table; when the outcomes come from CPU preview grading every title
carries :data:`PREVIEW_TAG`, so no figure is read as a scored (comparable) result.
"""

from __future__ import annotations

from typing import Any

from engine.analysis.noise_text import noise_lines
from engine.analysis.tables import PREVIEW_TAG as PREVIEW_TAG
from engine.analysis.tables import fixed as fixed
from engine.analysis.tables import share as share
from engine.analysis.tables import signed as signed
from engine.analysis.tables import speed as speed
from engine.analysis.tables import text_table as text_table
from engine.analysis.tables import title as title


def header_lines(report: dict[str, Any]) -> list[str]:
    """Which experiment, how it was graded, exclusion rules and coverage."""
    exp = report.get("experiment") or {}
    if exp.get("id"):
        lines = [f"Experiment {exp.get('name') or '-'} (id {exp['id']})"]
    else:
        lines = ["Experiment: none named (outcomes from a file, or an empty database)"]
    lines.append(
        "Grading: PREVIEW (CPU preview verdicts, not scored): figures not comparable "
        "with GPU-graded results"
        if report["preview"]
        else "Grading: scored"
    )
    if exp.get("gpu") and report["preview"]:
        lines.append(f"Target {exp['gpu']} (what agents compiled for); graded in CPU preview")
    elif exp.get("gpu"):
        lines.append(f"Graded on {exp['gpu']}")
    flags = report["exclusion"]["fail_flags"]
    if flags:
        lines.append("Exclusion: attempts flagged " + ", ".join(flags) + " scored as failing")
    lines += operator_lines(report)
    lines += time_lines(report.get("time"))
    lines += no_result_lines(report.get("no_result"))
    cov = report["coverage"]
    lines.append(
        f"{cov['comparisons']} resolved comparisons; {cov['solo_attempts']} solo "
        f"attempts, skill coverage {share(cov['skill_coverage'])}, source coverage "
        f"{share(cov['source_coverage'])}, source pass share "
        f"{share(cov['source_pass_share'])}"
    )
    return lines


def no_result_lines(summary: dict[str, Any] | None) -> list[str]:
    """The attempts and repeats left out as no result, by count and reason."""
    if not summary:
        return []

    def reasons(by: dict[str, int]) -> str:
        return ", ".join(f"{reason} {n}" for reason, n in by.items())

    lines = []
    if summary["ungraded"]:
        lines.append(
            f"Ungraded (grader's fault, not counted as failures): {summary['ungraded']}, "
            f"by reason: {reasons(summary['ungraded_by_reason'])}"
        )
    if summary["repeats_excluded"]:
        lines.append(
            f"Repeated gradings left out (no valid runtime): {summary['repeats_excluded']}, "
            f"by reason: {reasons(summary['repeats_by_reason'])}"
        )
    return lines


def operator_lines(report: dict[str, Any]) -> list[str]:
    """Attempts operators excluded (how many, why) and the comparisons they intervened on."""
    exclusion, lines = report["exclusion"], []
    if exclusion.get("excluded"):
        why = "; ".join(f"{n} × {reason}" for reason, n in exclusion["excluded_reasons"].items())
        lines.append(f"Excluded by operators: {exclusion['excluded']} attempts ({why})")
    marked = [c for c in report.get("comparisons", []) if c.get("intervened")]
    if marked:
        names = ", ".join(
            f"{c['model']}/{c['problem']} {c['direction']} r{c['replicate']} {c['verdict']} "
            f"[{'+'.join(c['intervened'])}]" for c in marked[:8])
        more = f" and {len(marked) - 8} more" if len(marked) > 8 else ""
        lines.append(f"Intervened comparisons ({len(marked)}): {names}{more}")
    if exclusion.get("without_intervened"):
        lines.append("Attempts operators stopped, retried or extended are left out")
    return lines


def time_lines(time: dict[str, Any] | None) -> list[str]:
    """The runtime source, when it is not the contract's end to end: what it is and how many
    comparisons had it (the others are left out, never given their end-to-end times)."""
    if not time or time.get("source", "e2e") == "e2e":
        return []
    lines = [
        f"Runtimes: {time['label']}; {time['with_time']} of {time['comparisons']} resolved "
        "comparisons kept (every passing attempt in them has its spans)"
    ]
    if time["left_out"] or time["attempts_left_out"]:
        lines.append(
            f"  left out: {time['left_out']} comparisons, {time['attempts_left_out']} passing "
            "attempts without a span (CPU preview, graded before spans were recorded, or no "
            "working profiler)"
        )
    return lines


def arm_lines(report: dict[str, Any]) -> list[str]:
    rows = [
        (
            a["model"],
            a["arm"],
            a["dsl"],
            a["n"],
            share(a["pass_rate"]),
            speed(a["gm"]),
            share(a["r2"]),
            "-" if a["pct_sol_median"] is None else f"{a['pct_sol_median']:.1f}%",
        )
        for a in report["arms"]
    ]
    return text_table(
        title("Pass rate and speedup per arm (skill arms: the target DSL)", report["preview"]),
        ("model", "arm", "dsl", "N", "P", "GM", "R(2)", "%SOL"),
        rows,
        left=3,
    )


def _interval(row: dict[str, Any]) -> str:
    if row.get("ci_low") is None:
        return "-"
    return f"[{signed(row['ci_low'])}, {signed(row['ci_high'])}]"


def lift_lines(report: dict[str, Any]) -> list[str]:
    rows = [
        (
            r["model"],
            r["direction"],
            r["family"],
            r["n"],
            r.get("problems", "-"),
            signed(r["delta_gm"]),
            _interval(r),
            share(r["help_rate"]),
            share(r["harm_rate"]),
        )
        for r in report["lift"]
    ]
    heading = (
        "Lift by model x direction x family (N: paired comparisons, problem x replicate; "
        "CI: 95% bootstrap on dGM; T help, H harm)"
    )
    return text_table(
        title(heading, report["preview"]),
        ("model", "direction", "family", "N", "problems", "dGM", "95% CI", "T", "H"),
        rows,
        left=3,
    )


def best_family_lines(report: dict[str, Any]) -> list[str]:
    rows = [
        (
            r["model"],
            r["direction"],
            r["excluded_family"],
            r["n"],
            signed(r["delta_gm_all"]),
            signed(r["delta_gm_without"]),
        )
        for r in report["tiers"]["leave_best_family_out"]
    ]
    return text_table(
        title("Lift without the best family", report["preview"]),
        ("model", "direction", "left out", "N", "dGM all", "dGM without"),
        rows,
        left=3,
    )


def tier_lines(report: dict[str, Any]) -> list[str]:
    tiers, preview = report["tiers"], report["preview"]
    standing = [
        (
            t["model"],
            t["standing"],
            t["n"],
            signed(t["delta_gm"]),
            share(t["help_rate"]),
            share(t["harm_rate"]),
        )
        for t in tiers["by_standing"]
    ]
    grid = [
        (
            t["solo_tier"],
            t["source_tier"],
            t["n"],
            signed(t["delta_gm"]),
            share(t["help_rate"]),
            share(t["harm_rate"]),
        )
        for t in tiers["by_solo_and_source_tier"]
    ]
    reverse = [
        (
            r["model"],
            r["n_helped"],
            r["n_reverse"],
            share(r["reverse_help_rate"]),
            share(r["reverse_harm_rate"]),
        )
        for r in tiers["reverse_given_helped"]
    ]
    return [
        *text_table(
            title("Tiers: source tier vs the target's solo tier", preview),
            ("model", "source vs solo", "N", "dGM", "T", "H"),
            standing,
            left=2,
        ),
        *text_table(
            title("Tiers: solo tier x source tier", preview),
            ("solo tier", "source tier", "N", "dGM", "T", "H"),
            grid,
            left=2,
        ),
        *text_table(
            title("Reverse direction of helped comparisons", preview),
            ("model", "helped", "with reverse", "reverse T", "reverse H"),
            reverse,
        ),
    ]


def ladder_lines(report: dict[str, Any]) -> list[str]:
    rows = []
    keys: list[str] = []
    for r in report["ladder"]:
        keys = list(r["base"])
        for part in ("base", "skill", "difference"):
            values = r[part]
            rows.append(
                (
                    r["subset"],
                    part,
                    r["n"],
                    *(
                        fixed(values[k], ".1f")
                        if k == "S"
                        else (signed if part == "difference" else share)(values[k])
                        for k in keys
                    ),
                )
            )
    return text_table(
        title("Rate ladder (R@t: share passing at speedup >= t; S: mean x 100)", report["preview"]),
        ("subset", "arm", "N", *keys),
        rows,
        left=2,
    )


def stats_lines(report: dict[str, Any]) -> list[str]:
    tests, preview = report["tests"], report["preview"]
    corr = [
        (c["scope"], c["name"], c["n"], fixed(c["spearman"]), fixed(c.get("p_negative"), ".4f"))
        for c in tests["direction_correlation"]
    ]
    s = tests["source_speed"]
    return [
        *text_table(
            title("Directions' log-ratio Spearman (sign-flip test on the pooled row)", preview),
            ("scope", "name", "N", "Spearman", "p (negative)"),
            corr,
            left=2,
        ),
        "",
        title("Source-speed test (does the skill arm track the source's speed?)", preview),
        f"  N {s['n']}  rho solo {fixed(s['rho_solo'])}  rho skill {fixed(s['rho_skill'])}  "
        f"gap {fixed(s['gap'])}  p {fixed(s['p_value'], '.4f')}",
    ]


def usage_lines(report: dict[str, Any]) -> list[str]:
    rows = [
        (u["arm"], u["attempts"], u["tokens"], f"${u['cost_usd']:.4f}", f"{u['agent_seconds']:.0f}")
        for u in report["usage"]
    ]
    return text_table("Usage per arm", ("arm", "attempts", "tokens", "cost", "agent s"), rows)


def render_text(report: dict[str, Any]) -> str:
    """Every table of the report as plain text, the experiment named at the top."""
    lines = header_lines(report)
    for section in (
        arm_lines,
        lift_lines,
        noise_lines,
        best_family_lines,
        tier_lines,
        ladder_lines,
        stats_lines,
        usage_lines,
    ):
        lines += section(report)
    seen = report["exclusion"].get("flags_seen") or {}
    if seen:
        lines += [
            "",
            "Flagged attempts (exclude with --fail-flag): "
            + ", ".join(f"{flag} {n}" for flag, n in sorted(seen.items())),
        ]
    return "\n".join(lines)
