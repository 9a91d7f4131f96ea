"""`mkb tui [--db DB] [--attach | --create]`: the Textual app (plain `mkb` opens it too).

A database that does not exist is an error (a mistyped path must not silently become an
empty store); ``--create`` starts a new one on purpose.
"""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tui", help="open the terminal UI (launch, watch, inspect experiments)")
    add_db_argument(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--attach", action="store_true",
        help="watch a database another process writes (tails its events); actions on "
             "attempts and the run go to that process's engine as commands")
    mode.add_argument("--create", action="store_true",
                      help="create the database if it does not exist (else that is an error)")
    parser.add_argument("--theme", help="a Textual theme name, e.g. textual-light")
    parser.add_argument(
        "--serve", type=int, metavar="PORT",
        help="serve the attach view in a browser on 127.0.0.1:PORT (textual-serve); "
             "read-only unless --control")
    parser.add_argument(
        "--control", action="store_true",
        help="with --serve: let browser tabs act (stop, retry, …) after giving the token "
             "printed at start; without it every action there is refused and logged")
    parser.add_argument("--browser", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def open_tui(
    db: str | None = None, *, attach: bool = False, theme: str | None = None,
    create: bool = False, browser: bool = False,
) -> int:
    from app.errors import UsageError
    from storage.db import StorageError, resolve_path

    path = resolve_path(db)
    if not attach and not create and not path.exists():
        raise UsageError(f"no database at {path}: give an existing file, or add --create to "
                         "start a new one (`mkb demo` makes one with a demo experiment)")
    try:
        from app.tui import MkbApp

        app = MkbApp(db, attach=attach, theme=theme, browser=browser)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    if attach:
        return int(app.run() or 0)
    from app.third_party import library_output_to_log

    with library_output_to_log(app.db_path):  # an owned engine's libraries: not over the TUI
        return int(app.run() or 0)


def run(args: argparse.Namespace) -> int:
    if args.serve is not None:
        from app.errors import UsageError
        from app.serve import serve
        from storage.db import StorageError

        try:
            serve(args.db, port=args.serve, control=args.control)
        except (RuntimeError, StorageError) as exc:
            raise UsageError(str(exc)) from exc
        return 0
    if args.control:
        from app.errors import UsageError

        raise UsageError("--control goes with --serve PORT (the browser view)")
    return open_tui(args.db, attach=args.attach or args.browser, theme=args.theme,
                    create=args.create, browser=args.browser)


def default_command() -> int:
    """What plain `mkb` runs: the TUI on the default database."""
    from app.errors import UsageError

    try:
        return open_tui()
    except UsageError as exc:
        import sys

        print(f"mkb: error: {exc}", file=sys.stderr)
        return 2
