"""`mkb tui [--db DB] [--attach]`: the Textual app (plain `mkb` opens it too)."""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tui", help="open the terminal UI (launch, watch, inspect experiments)")
    add_db_argument(parser)
    parser.add_argument(
        "--attach", action="store_true",
        help="read-only view of a database another process writes (tails its events)")
    parser.add_argument("--theme", help="a Textual theme name, e.g. textual-light")
    parser.add_argument(
        "--serve", type=int, metavar="PORT",
        help="serve the read-only attach view in a browser on 127.0.0.1:PORT (textual-serve)")
    parser.set_defaults(func=run)


def open_tui(db: str | None = None, *, attach: bool = False, theme: str | None = None) -> int:
    from app.cli import UsageError
    from storage.db import StorageError

    try:
        from app.tui import MkbApp

        app = MkbApp(db, attach=attach, theme=theme)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    result = app.run()
    return int(result or 0)


def run(args: argparse.Namespace) -> int:
    if args.serve is not None:
        from app.cli import UsageError
        from app.serve import serve
        from storage.db import StorageError

        try:
            serve(args.db, port=args.serve)
        except (RuntimeError, StorageError) as exc:
            raise UsageError(str(exc)) from exc
        return 0
    return open_tui(args.db, attach=args.attach, theme=args.theme)


def default_command() -> int:
    """What plain `mkb` runs: the TUI on the default database."""
    from app.cli import UsageError

    try:
        return open_tui()
    except UsageError as exc:
        import sys

        print(f"mkb: error: {exc}", file=sys.stderr)
        return 2
