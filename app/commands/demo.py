"""`mkb demo [--headless] [--db DB]`: the demo experiment on the embedded default."""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.db import add_db_argument
from app.commands.run import add_unsafe_no_jail_argument, unsafe_no_jail


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the demo experiment (scripted model, local sandbox, local grader)")
    add_db_argument(parser)
    parser.add_argument("--headless", action="store_true",
                        help="run without the TUI (progress on stderr); exit when done")
    parser.add_argument("--json", action="store_true",
                        help="with --headless: stream engine events as JSON lines")
    add_unsafe_no_jail_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.demo import demo_config

    if args.headless or args.json:
        from app.commands.run import execute

        return execute(unsafe_no_jail(demo_config(), args), args.db, json_events=args.json)
    from app.errors import UsageError
    from app.third_party import library_output_to_log
    from storage.db import StorageError

    # with --unsafe-no-jail the config is built now: its warning prints before the TUI
    config = unsafe_no_jail(demo_config(), args) if args.unsafe_no_jail else None
    try:
        from app.tui import MkbApp

        app = MkbApp(args.db)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    # paint first: the config (it checks the catalog), the agent stack and the plan are
    # built off the UI loop once the App is on screen
    app.start_when_ready(demo_config if config is None else (lambda: config),
                         "demo experiment started: scripted model, local sandbox, CPU "
                         "preview grading")
    with library_output_to_log(app.db_path):  # library warnings: not over the TUI
        return int(app.run() or 0)
