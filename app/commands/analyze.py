"""`mkb analyze`: every table of the Lift and Rubric screens, from the store or a file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("analyze", help="lift, tiers, tests and rubric views")
    src = parser.add_mutually_exclusive_group()
    add_db_argument(src)  # type: ignore[arg-type]
    src.add_argument("--outcomes", help="JSON lines, one object per attempt")
    parser.add_argument("--experiment", help="experiment id in the database (default: newest)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the whole analysis as JSON")
    out.add_argument("--csv", metavar="DIR", help="write one CSV per table into DIR")
    parser.add_argument("--figures", metavar="DIR", help="write PNG figures into DIR")
    parser.add_argument("--fail-flag", action="append", default=[], metavar="FLAG",
                        help="score attempts carrying FLAG as failing (exclusion sensitivity)")
    parser.add_argument("--without-intervened", action="store_true",
                        help="leave out attempts an operator stopped, retried or extended")
    parser.add_argument("--draws", type=int, default=20_000,
                        help="sign-flip permutation draws (default 20000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"),
                        help="two experiments of the store side by side (e.g. one and its "
                             "re-grade): the paper's tables of each, as text or --json")
    parser.add_argument("--time", default="e2e", metavar="SOURCE",
                        help="the runtime the tables and noise bands use: e2e, the contract's "
                        "end-to-end median (default), or span, the runners' GPU span per call "
                        "(informational; attempts without spans are left out and counted; "
                        "docs/analysis.md)")
    parser.set_defaults(func=run)


def check_time(time: str) -> None:
    """A usage error naming ``--time`` for a time source that is not recorded."""
    from app.errors import UsageError
    from engine.analysis.noise import TIME_SOURCES

    if time not in TIME_SOURCES:
        raise UsageError(f"--time must be one of {', '.join(TIME_SOURCES)} (got {time!r})")


def load_inputs(
    args: argparse.Namespace,
) -> tuple[Any, dict[str, Any] | None, dict[str, Any] | None]:
    """The outcomes (file or store) and, from the store, the experiment's rubric views and its
    paired comparisons."""
    from app.errors import UsageError
    from engine.analysis.outcomes import OutcomeError, from_store, load_jsonl
    from engine.analysis.paired_lift import paired_report
    from engine.rubric.views import report as rubric_report
    from storage.db import StorageError, open_db

    check_time(args.time)
    try:
        if args.outcomes:
            outcomes = load_jsonl(args.outcomes)
            outcomes.time = args.time  # spans from the rows' span_ms / ref_span_ms keys
            return outcomes, None, None
        db = open_db(args.db, readonly=True)
        try:
            outcomes = from_store(db, args.experiment, time=args.time)
            exp = outcomes.experiment_id
            if exp is None:
                return outcomes, None, None
            return outcomes, rubric_report(db, experiment_id=exp), paired_report(db, exp)
        finally:
            db.conn.close()
    except (OutcomeError, StorageError) as exc:
        raise UsageError(str(exc)) from exc


def render(report: dict[str, Any]) -> str:
    """The analysis tables, then the rubric views when the outcomes came from the store."""
    from app.commands.rubric import render_report
    from engine.analysis.text import render_text

    text = render_text(report)
    if report.get("rubric") is None:
        return text
    note = (
        " (from the stored comparisons: --fail-flag does not apply)"
        if report["exclusion"]["fail_flags"]
        else ""
    )
    return f"{text}\n\nRubric views{note}\n{render_report(report['rubric'])}"


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.analysis.report import AnalysisOptions, analyze, write_csv
    from storage.sanitize import clean

    if args.draws < 1:
        raise UsageError("--draws must be at least 1")
    check_time(args.time)
    if args.compare:
        from app.commands._compare import run_compare

        return run_compare(args)
    outcomes, rubric, paired = load_inputs(args)
    report = analyze(outcomes, AnalysisOptions(permutation_draws=args.draws, seed=args.seed,
                                               fail_flags=tuple(args.fail_flag),
                                               without_intervened=args.without_intervened))
    report["rubric"] = rubric
    report["paired"] = paired
    report = clean(report)  # stored names and flags, safe in a terminal and in exports
    if args.figures:
        from engine.analysis.figures import write_figures

        for path in write_figures(report, args.figures):
            print(f"wrote {path}")
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.csv:
        for path in write_csv(report, args.csv):
            print(f"wrote {path}")
    else:
        print(render(report))
    return 0
