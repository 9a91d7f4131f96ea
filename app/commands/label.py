"""`mkb label`: record human labels (one from flags, or many from a JSON-lines file).

Subjects: ``skill`` labels a skill id, ``uptake`` an attempt id (categories ``uptake`` and
``propagation``), ``cause`` a comparison id (category ``cause``). Values are checked against
the rubric. JSON-lines rows: {"task", "subject_id", "category"?, "value", "evidence"?}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.commands.db import add_db_argument
from app.commands.rubric import add_rubric_argument, load_rubric_arg, open_store_db

DEFAULT_CATEGORY = {"uptake": "uptake", "cause": "cause"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("label", help="record human rubric labels")
    add_db_argument(parser)
    parser.add_argument("--annotator", required=True, help="who labels (a person's name)")
    parser.add_argument("--task", choices=("skill", "uptake", "cause"))
    parser.add_argument("--subject", type=int, help="skill, attempt or comparison id")
    parser.add_argument("--category", help="skill category, or uptake/propagation")
    parser.add_argument("--value", help="present/absent, an uptake rating, yes/no, a cause")
    parser.add_argument("--evidence", default="", help="quote or note")
    parser.add_argument("--jsonl", metavar="FILE", help="many labels, one JSON object a line")
    add_rubric_argument(parser)
    parser.set_defaults(func=run)


def _subject_exists(db: Any, task: str, subject_id: int) -> bool:
    from storage import queries

    lookup = {"skill": queries.skill, "uptake": queries.attempt, "cause": queries.comparison}
    return lookup[task](db, subject_id) is not None


def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from app.errors import UsageError

    if args.jsonl:
        if any(v is not None for v in (args.task, args.subject, args.category, args.value)):
            raise UsageError("--jsonl replaces --task/--subject/--category/--value")
        rows = []
        try:
            lines = Path(args.jsonl).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"{args.jsonl}: {exc.strerror or exc}") from exc
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{args.jsonl}:{n}: not JSON: {exc.msg}") from exc
            if not isinstance(row, dict):
                raise UsageError(f"{args.jsonl}:{n}: expected a JSON object")
            row["_where"] = f"{args.jsonl}:{n}"
            rows.append(row)
        return rows
    missing = [f"--{n}" for n in ("task", "subject", "value") if getattr(args, n) is None]
    if missing:
        raise UsageError(f"missing {', '.join(missing)} (or give --jsonl FILE)")
    return [{"task": args.task, "subject_id": args.subject, "category": args.category,
             "value": args.value, "evidence": args.evidence, "_where": "arguments"}]


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.rubric.model import SUBJECT_TYPES, RubricError
    from storage import writes
    from storage.db import immediate

    rubric = load_rubric_arg(args.rubric)
    rows = _rows(args)
    db = open_store_db(args.db, readonly=False)
    try:
        checked = []
        for row in rows:
            where = row["_where"]
            task = row.get("task")
            if task not in SUBJECT_TYPES:
                raise UsageError(f"{where}: task must be skill, uptake or cause")
            subject = row.get("subject_id")
            if isinstance(subject, bool) or not isinstance(subject, int):
                raise UsageError(f"{where}: subject_id must be an integer")
            category = row.get("category") or DEFAULT_CATEGORY.get(task)
            if category is None:
                raise UsageError(f"{where}: a skill label needs a category")
            value = str(row.get("value", ""))
            try:
                rubric.check_label(task, category, value)
            except RubricError as exc:
                raise UsageError(f"{where}: {exc}") from exc
            if not _subject_exists(db, task, subject):
                raise UsageError(f"{where}: no {SUBJECT_TYPES[task]} {subject} in the database")
            checked.append((task, subject, category, value, str(row.get("evidence", ""))))
        with immediate(db):  # all or nothing; waits for a running engine's write, if any
            for task, subject, category, value, evidence in checked:
                writes.add_label(db, task=task, subject_type=SUBJECT_TYPES[task],
                                 subject_id=subject, category=category, value=value,
                                 annotator=args.annotator, annotator_kind="human",
                                 evidence=evidence, rubric_hash=rubric.hash)
    finally:
        db.conn.close()
    print(f"recorded {len(checked)} label{'s' if len(checked) != 1 else ''} by "
          f"{args.annotator}")
    return 0
