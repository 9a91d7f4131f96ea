"""`mkb demo [--headless] [--db DB]`: the demo experiment on the embedded default."""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the demo experiment (scripted model, local sandbox, local grader)")
    add_db_argument(parser)
    parser.add_argument("--headless", action="store_true",
                        help="run without the TUI (progress on stderr); exit when done")
    parser.add_argument("--json", action="store_true",
                        help="with --headless: stream engine events as JSON lines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.demo import demo_config

    config = demo_config()
    if args.headless or args.json:
        from app.commands.run import execute

        return execute(config, args.db, json_events=args.json)
    from app.cli import UsageError
    from storage.db import StorageError

    try:
        from app.tui import MkbApp

        app = MkbApp(args.db)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc

    def start() -> None:
        app.start_experiment(config)
        app.notify("demo experiment started: scripted model, local sandbox, CPU preview "
                   "grading", title="demo")

    app.call_later(start)
    return int(app.run() or 0)
