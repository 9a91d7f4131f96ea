"""`mkb import mkb-run|harbor-job DIR`: a run made elsewhere as an experiment of the store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import", help="import a public MetaKernelBench run or a Harbor job as an experiment"
    )
    sub = parser.add_subparsers(dest="import_kind", metavar="KIND", required=True)
    for kind, what in (
        (
            "mkb-run",
            "a public MetaKernelBench result store (one model's results/<model>/ directory)",
        ),
        ("harbor-job", "a Harbor job directory of MetaKernelBench tasks"),
    ):
        one = sub.add_parser(kind, help=f"import {what}")
        one.add_argument("dir", metavar="DIR")
        add_db_argument(one)
        one.add_argument("--id", help="the new experiment's id (default: <kind>-<model>)")
        one.add_argument("--json", action="store_true", help="print the import report as JSON")
        one.set_defaults(func=run, kind=kind)


def run(args: argparse.Namespace) -> int:
    from app.commands.rubric import open_store_db
    from app.errors import UsageError
    from engine.imports.report import render
    from engine.imports.run import ImportFailure, import_dir
    from storage.sanitize import clean

    db = open_store_db(args.db, readonly=False)
    try:
        report = import_dir(db, args.kind, args.dir, args.id)
    except ImportFailure as exc:
        raise UsageError(str(exc)) from exc
    finally:
        db.conn.close()
    report = clean(report)  # names and texts from the imported files
    print(json.dumps(report, indent=2) if args.json else render(report))
    rep = report.get("reproduction")
    return 1 if rep is not None and not rep["reproduced"] else 0
