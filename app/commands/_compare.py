"""`mkb analyze --compare A B`: two experiments of one store side by side (the paper's
tables of each: pass rates, GM, paired lift, help/harm per family and model, the ladder)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def compare_report(db: Any, a: str, b: str, options: Any) -> dict[str, Any]:
    """The side-by-side comparison of two stored experiments."""
    from engine.analysis.compare import side_by_side
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import analyze

    return side_by_side(analyze(from_store(db, a), options), analyze(from_store(db, b), options))


def run_compare(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.analysis.compare import render_side_by_side
    from engine.analysis.outcomes import OutcomeError
    from engine.analysis.report import AnalysisOptions
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
            report = clean(compare_report(db, args.compare[0], args.compare[1], options))
        finally:
            db.conn.close()
    except (OutcomeError, StorageError) as exc:
        raise UsageError(str(exc)) from exc
    print(json.dumps(report, indent=2) if args.json else render_side_by_side(report))
    return 0
