"""`mkb attempt stop|retry|extend|note|exclude|include ID`: act on one attempt.

Each action is a row of ``control_commands`` (``storage/controls.py``), recorded with who
(the OS user), when, why and what came of it. ``note``, ``exclude`` and ``include`` change
only data and apply at once; ``stop``, ``retry`` and ``extend`` are applied by the engine
that runs the attempt's experiment (within a second); without one they are refused at once.
"""

from __future__ import annotations

import argparse
import getpass
import time
from typing import Any

from app.commands.db import add_db_argument

WAIT_S = 5.0  # how long the command waits for the engine's answer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "attempt", help="stop, retry, extend, note, exclude or include one attempt")
    sub = parser.add_subparsers(dest="attempt_action", metavar="ACTION", required=True)
    helps = {
        "stop": "end the attempt's agent, sandbox and gradings (state stopped)",
        "retry": "run a new try of the same plan slot (the earlier one is kept, linked); "
                 "an attempt ungraded by its grader's failure has its final re-graded instead",
        "extend": "more submissions (or wall minutes, from the next try) for a running attempt",
        "exclude": "leave the attempt out of the analysis (--reason required)",
        "include": "take an excluded attempt back into the analysis (--reason required)",
    }
    for action, text in helps.items():
        p = sub.add_parser(action, help=text)
        p.add_argument("id", type=int, help="attempt id")
        p.add_argument("--reason", default="", help="why (recorded with the intervention)")
        if action == "extend":
            p.add_argument("--submissions", type=int, default=0, help="extra submissions")
            p.add_argument("--minutes", type=float, default=0.0,
                           help="extra wall minutes (from the attempt's next try)")
        add_db_argument(p)
        p.set_defaults(func=run)
    note = sub.add_parser("note", help="pin free text to the attempt (shown in its detail)")
    note.add_argument("id", type=int, help="attempt id")
    note.add_argument("text", help="the note")
    add_db_argument(note)
    note.set_defaults(func=run, reason="")


def actor() -> str:
    """Who acts: the OS user."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "human"


def _args(args: argparse.Namespace) -> dict[str, Any]:
    from app.errors import UsageError

    action = args.attempt_action
    if action == "note":
        return {"text": args.text}
    if action != "extend":
        return {}
    if args.submissions < 0 or args.minutes < 0 or not (args.submissions or args.minutes):
        raise UsageError("extend needs --submissions N and/or --minutes M (positive)")
    return {"submissions": args.submissions, "minutes": args.minutes}


def run(args: argparse.Namespace) -> int:
    from app.commands.rubric import open_store_db
    from app.errors import UsageError
    from storage import controls, queries
    from storage.db import immediate
    from storage.sanitize import clean_text

    payload = _args(args)
    db = open_store_db(args.db, readonly=False)
    try:
        row = queries.attempt(db, args.id)
        if row is None:
            raise UsageError(f"no attempt {args.id} in this database")
        try:
            with immediate(db):
                command = controls.submit(
                    db, row.experiment_id, args.attempt_action, actor=actor(),
                    attempt_id=row.id, reason=args.reason, args=payload)
        except controls.ControlError as exc:
            raise UsageError(str(exc)) from exc
        deadline = time.monotonic() + WAIT_S
        while command.state in ("pending", "applying") and time.monotonic() < deadline and (
            command.outcome != controls.NEXT_RUN
        ):
            time.sleep(0.1)
            command = controls.command(db, command.id)
    finally:
        db.conn.close()
    print(clean_text(command.describe()))
    if command.state == "pending" and command.outcome == controls.NEXT_RUN:
        print("the experiment's next `mkb run` applies it before anything else")
    elif command.state in ("pending", "applying"):
        print("the engine has not answered yet; `mkb tui --attach` shows when it does")
    return 0 if command.state in ("applied", "pending", "applying") else 1
