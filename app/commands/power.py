"""`mkb power CONFIG --from DB`: comparisons and replicates each cell of CONFIG needs to detect a
paired lift, and the power its plan has, from a pilot experiment's spread of ρ and its A/A
bands (docs/analysis.md, "Power")."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "power", help="replicates per cell to detect a lift, from a pilot's noise and spread"
    )
    parser.add_argument("config", metavar="CONFIG", help="the experiment TOML to plan")
    parser.add_argument(
        "--from", dest="db", required=True, metavar="DB", help="the store holding the pilot"
    )
    parser.add_argument(
        "--pilot",
        metavar="EXPERIMENT",
        help="pilot experiment id (default: the newest with resolved "
        "comparisons, other than CONFIG's)",
    )
    parser.add_argument(
        "--lift",
        type=float,
        action="append",
        metavar="PCT",
        help="ΔGM to detect, in percent (repeatable; default 5 and 10)",
    )
    parser.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    parser.add_argument("--alpha", type=float, default=0.05, help="test level (default 0.05)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="R",
        help="repeated finals per arm (default: CONFIG's final_repeats)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> list[float]:
    from app.errors import UsageError

    lifts = [v / 100 for v in (args.lift or [5.0, 10.0])]
    if not all(math.isfinite(v) and v > 0 for v in lifts):
        raise UsageError("--lift must be a positive percentage")
    if not 0 < args.power < 1:
        raise UsageError("--power must be between 0 and 1")
    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.repeats is not None and not 1 <= args.repeats <= 20:
        raise UsageError("--repeats must be within 1..20")
    return lifts


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.analysis.outcomes import OutcomeError
    from engine.analysis.power_store import plan_from_store
    from engine.config import ConfigError, load_config
    from storage.db import StorageError, open_db
    from storage.sanitize import clean

    lifts = _check(args)
    try:
        config = load_config(args.config, check_problems=False)  # the catalog is not imported
        db = open_db(args.db, readonly=True)
        try:
            result = plan_from_store(
                db,
                config,
                args.pilot,
                lifts=lifts,
                alpha=args.alpha,
                power=args.power,
                repeats=args.repeats,
            )
        finally:
            db.conn.close()
    except (ConfigError, StorageError, OutcomeError) as exc:
        raise UsageError(str(exc)) from exc
    except KeyError as exc:
        raise UsageError(f"{args.config} [experiment].problems: {exc.args[0]}") from exc
    if result is None:
        raise UsageError(f"{args.db}: no pilot experiment with resolved comparisons")
    result = clean(result)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """Per band: what one comparison's paired test detects at k pairs, and the k it needs."""
    from engine.analysis.text import text_table

    rows = [
        (
            b["problem"],
            b["dsl"],
            b["host"],
            f"{b['sigma']:.4f}",
            b["pairs"],
            f"{b['detect_0.1']:.0%}",
            f"{b['detect_0.3']:.0%}",
            b["pairs_for_0.1"],
            b["pairs_for_0.3"],
        )
        for b in result.get("per_comparison", [])
    ]
    heading = (
        f"Per comparison on each band's host (paired test, exact noncentral t at alpha "
        f"{result['alpha']}; BH across an experiment needs at least as many pairs): the chance "
        f"k pairs call a 1.1x / 1.3x help beyond noise, and the k that reaches "
        f"{result['power']:.0%}"
    )
    header = (
        "problem",
        "dsl",
        "host",
        "sigma",
        "k",
        "P(1.1x)",
        "P(1.3x)",
        "k for 1.1x",
        "k for 1.3x",
    )
    return text_table(heading, header, rows, left=3) if rows else []


def render(result: dict[str, Any]) -> str:
    """The plan as a table: one row per cell, power and replicates needed per lift."""
    from engine.analysis.text import text_table

    lifts = result["lifts"]
    header = ["model", "direction", "family", "problems", "reps", "sigma_b", "sigma_m"]
    for lift in lifts:
        header += [f"power {lift:+.0%}", f"reps for {lift:+.0%}"]
    rows = []
    for c in result["cells"]:
        cells = [
            c["model"],
            c["direction"],
            c["family"],
            c["problems"],
            c["replicates"],
            _num(c["sigma_between"]) + ("*" if c["sigma_between_from"] == "pooled" else ""),
            _num(c["sigma_m"], ".4f"),
        ]
        for lf in c["lifts"] or [None] * len(lifts):
            cells += ["-", "-"] if lf is None else [f"{lf['power']:.0%}", lf["replicates_needed"]]
        rows.append(cells)
    preview = "  [PREVIEW pilot: CPU-graded, not comparable]" if result["preview"] else ""
    heading = (
        f"Power plan from pilot {result['pilot']} ({result['pilot_comparisons']} comparisons; "
        f"R={result['repeats']} repeated finals per arm; two-sided alpha {result['alpha']}, "
        f"target power {result['power']:.0%}; * sigma_b pooled over the pilot){preview}"
    )
    lines = text_table(heading, header, rows, left=3)
    lines += comparison_lines(result)
    if not any(b["sigma"] is not None for b in result["bands"]):
        lines.append(
            "  no A/A band in the store: sigma_m unknown, taken as 0 (optimistic); "
            "measure it with `mkb noise` or [grading] final_repeats >= 2"
        )
    return "\n".join(lines).lstrip("\n")
