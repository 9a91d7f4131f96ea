"""`mkb noise PROBLEM --dsl D IMPL.py [--repeats K]`: the noise floor of one file on this host.

Grades the file K times, each in a fresh child process, ``--gap-s`` apart, and prints the
spread of its runtime and its A/A band (the interval of log(t₁/t₂) between two gradings of the
same file), for the implementation when it passes and for the eager reference. The gradings
are stored as one series (``--db``), so the store's band for the problem on this grading host
pools every run (docs/analysis.md). Exit codes: 0 when every grading completed, 1 when one hit
a grading error or nothing was timed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from app.commands.db import add_db_argument

PREVIEW = "PREVIEW (CPU grading, not scored, not comparable with GPU figures)"
MAX_REPEATS = 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "noise",
        help="grade one file K times and print its runtime spread and A/A band",
        description="Grade IMPL.py K times (fresh child processes, spread in time) and print "
        "the spread of its runtime and the A/A band; the gradings join the store's A/A band "
        "for the problem on this grading host.",
    )
    parser.add_argument("problem", metavar="PROBLEM", help="problem id (p28), number or slug")
    parser.add_argument("impl", metavar="IMPL.py", help="the file to grade")
    parser.add_argument("--dsl", required=True, help="cute or tirx")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        metavar="K",
        help=f"gradings (default 5, at least 2, at most {MAX_REPEATS}; a band "
        "needs 5: docs/analysis.md)",
    )
    parser.add_argument(
        "--gap-s", type=float, default=2.0, metavar="S", help="seconds between gradings (default 2)"
    )
    parser.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds per grading for import, correctness, warmup, timing",
    )
    add_db_argument(parser)
    parser.add_argument("--no-store", action="store_true", help="do not record the gradings")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def _request(args: argparse.Namespace) -> tuple[Any, str]:
    """The grading request and device, or a UsageError naming what is wrong."""
    from app.commands.grade import request_from_args
    from app.errors import UsageError

    if not 2 <= args.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be within 2..{MAX_REPEATS} (got {args.repeats})")
    if not (math.isfinite(args.gap_s) and args.gap_s >= 0):
        raise UsageError(f"--gap-s must be a number ≥ 0 (got {args.gap_s})")
    try:
        return request_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from engine.grading.options import EvalConfig
    from engine.noise_run import measure
    from storage.store import Store

    request, device = _request(args)
    store = None if args.no_store else Store(args.db)
    tag = f"  [{PREVIEW}]" if device == "cpu" else ""

    def report(k: int, feedback: dict[str, Any]) -> None:
        if not args.json:
            print(f"[{k}/{args.repeats}] {grading_line(feedback)}{tag}", flush=True)

    try:
        summary = measure(
            request,
            EvalConfig(timeout_s=args.timeout),
            device,
            args.repeats,
            gap_s=args.gap_s,
            store=store,
            report=report,
        )
    finally:
        if store is not None:
            store.close()
    if args.json:
        json.dump(summary, sys.stdout, indent=2, default=str)
        print()
    else:
        print(render(summary))
    timed = summary["implementation"]["n"] or summary["eager"]["n"]
    return 0 if summary["errors"] == 0 and timed else 1


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _pct(log_value: float | None) -> str:
    """A log-ratio half-width as the range of runtime ratios it allows."""
    if log_value is None:
        return "-"
    return f"{math.exp(-log_value):.3f}x to {math.exp(log_value):.3f}x"


def grading_line(fb: dict[str, Any]) -> str:
    """One grading: verdict, runtimes and speedup (agent-written text cleaned)."""
    from storage.sanitize import clean

    verdict = str(fb.get("verdict")).upper()
    reason = f" ({clean(str(fb['reason']))})" if fb.get("reason") else ""
    speedup = "-" if fb.get("speedup") is None else f"{fb['speedup']:.3g}x"
    return (
        f"{verdict}{reason}: implementation {_ms(fb.get('impl_median_ms'))}, eager "
        f"{_ms(fb.get('eager_median_ms'))}, speedup {speedup}"
    )


def _series_lines(label: str, figures: dict[str, Any], tag: str) -> list[str]:
    if not figures["n"]:
        return [f"{label}: no timed grading"]
    line = (
        f"{label}: {figures['n']} timed, median {_ms(figures['median_ms'])} "
        f"(min {_ms(figures['min_ms'])}, max {_ms(figures['max_ms'])})"
    )
    lines = [line + tag]
    if figures["sigma"] is not None:
        lines.append(
            f"  SD of log runtime {figures['sigma']:.4f}; A/A band (95% of two gradings' "
            f"ratio t1/t2) {_pct(figures['aa_band'])}; observed ratios "
            f"{_pct_range(figures['pairwise_low'], figures['pairwise_high'])}; "
            f"beyond-noise limit for single-grading comparisons {_pct(figures['limit_r1'])} "
            f"(needs 5 gradings){tag}"
        )
    return lines


def _pct_range(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"{math.exp(low):.3f}x to {math.exp(high):.3f}x"


def render(summary: dict[str, Any]) -> str:
    """The run's summary for the terminal; every figure tagged PREVIEW on CPU."""
    from storage.sanitize import clean

    tag = f"  [{PREVIEW}]" if summary["preview"] else ""
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary["verdicts"].items()))
    lines = [
        f"{summary['problem_id']} ({summary['dsl']}) on {clean(summary['host'])}: "
        f"{summary['gradings']} gradings ({counts}), series {summary['series']}",
        *_series_lines("implementation", summary["implementation"], tag),
        *_series_lines("eager reference", summary["eager"], tag),
    ]
    band = summary.get("stored_band")
    if not summary.get("stored"):
        lines.append("gradings not stored (--no-store)")
    elif band is None or not band["series"]:
        lines.append(
            f"stored A/A band of {summary['problem_id']} on this host: none yet (no "
            "series with 2 passing gradings)"
        )
    else:
        sigma = "-" if band["sigma"] is None else f"{band['sigma']:.4f}"
        lines.append(
            f"stored A/A band of {summary['problem_id']} on this host ({band['series']} series, "
            f"{band['gradings']} gradings, {band['dof']} dof): SD of log runtime {sigma}, "
            f"band {_pct(band['aa_band'])}, limit R=1 {_pct(band['limit_r1'])}, "
            f"R=3 {_pct(band['limit_r3'])}{tag}"
        )
    if summary["preview"]:
        lines.append(f"{PREVIEW}: CPU timings say nothing about the GPU's noise.")
    return "\n".join(lines)
