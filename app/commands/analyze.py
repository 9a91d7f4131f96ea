"""`mkb analyze`: solo metrics, paired lift, tiers and tests from the store or a file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("analyze", help="lift, help/harm, tiers and tests")
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
    parser.add_argument("--draws", type=int, default=20_000,
                        help="sign-flip permutation draws (default 20000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def load_outcomes(args: argparse.Namespace) -> Any:
    from app.cli import UsageError
    from engine.analysis.outcomes import OutcomeError, from_store, load_jsonl
    from storage.db import StorageError, open_db

    try:
        if args.outcomes:
            return load_jsonl(args.outcomes)
        db = open_db(args.db, readonly=True)
        try:
            return from_store(db, args.experiment)
        finally:
            db.conn.close()
    except (OutcomeError, StorageError) as exc:
        raise UsageError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    from app.cli import UsageError
    from engine.analysis.report import (
        AnalysisOptions,
        analyze,
        render_text,
        write_csv,
    )
    from storage.sanitize import clean

    if args.draws < 1:
        raise UsageError("--draws must be at least 1")
    outcomes = load_outcomes(args)
    report = analyze(outcomes, AnalysisOptions(permutation_draws=args.draws, seed=args.seed,
                                               fail_flags=tuple(args.fail_flag)))
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
        print(render_text(report))
    return 0
