"""`mkb analyze --compare A B`: two experiments of one store side by side (where each came
from and was graded, verdict agreement, per-problem speedup log ratios and their rank
correlation, the paper's tables of each); the TUI's Compare view shows the same data."""

from __future__ import annotations

import argparse
import json
from typing import Any


def compare_report(db: Any, a: str, b: str, options: Any, time: str = "e2e") -> dict[str, Any]:
    """The side-by-side comparison of two stored experiments (on the time source ``time``)."""
    from engine.analysis.stored_compare import compare_experiments

    return compare_experiments(db, a, b, options, time=time)


def run_compare(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.analysis.outcomes import OutcomeError
    from engine.analysis.report import AnalysisOptions
    from engine.analysis.stored_compare import render_comparison
    from storage.db import StorageError, open_db
    from storage.sanitize import clean

    if args.outcomes:
        raise UsageError("--compare reads two experiments of a store (--db), not --outcomes")
    if args.csv or args.figures:
        raise UsageError("--compare prints text or --json; --csv and --figures do not apply")
    options = AnalysisOptions(
        permutation_draws=args.draws, seed=args.seed, fail_flags=tuple(args.fail_flag)
    )
    try:
        db = open_db(args.db, readonly=True)
        try:
            report = clean(compare_report(db, args.compare[0], args.compare[1], options, args.time))
        finally:
            db.conn.close()
    except (OutcomeError, StorageError) as exc:
        raise UsageError(str(exc)) from exc
    print(json.dumps(report, indent=2) if args.json else render_comparison(report))
    return 0
