"""`mkb db info|migrate`: inspect and migrate the SQLite store."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """The shared ``--db`` option (default: $MKB_DB, else ./mkb-data/mkb.sqlite)."""
    parser.add_argument(
        "--db", default=None, help="SQLite file (default: $MKB_DB or ./mkb-data/mkb.sqlite)"
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("db", help="inspect or migrate the SQLite store")
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    info = sub.add_parser("info", help="path, schema version and row count per table")
    add_db_argument(info)
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run_info)
    migrate = sub.add_parser("migrate", help="apply pending schema migrations")
    add_db_argument(migrate)
    migrate.set_defaults(func=run_migrate)


def run_info(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from storage.db import StorageError, inspect_file, open_db, resolve_path, table_counts

    path = resolve_path(args.db)
    try:
        if path.exists() and path.stat().st_size > 0:
            status = inspect_file(path)
            if status.unknown:
                raise StorageError(
                    f"{path}: written by a newer MetaKernelBench (unknown migrations: "
                    f"{', '.join(status.unknown)})"
                )
            db = open_db(path, readonly=True)
        else:
            db = open_db(path)  # a new store: create and migrate it
            status = inspect_file(path)
        counts = table_counts(db)
        db.conn.close()
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    info = {
        "path": str(path.resolve()),
        "schema_version": status.version,
        "migrations": status.applied,
        "pending_migrations": status.pending,
        "tables": counts,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"database        {info['path']}")
    print(f"schema version  {status.version} ({', '.join(status.applied) or 'none'})")
    if status.pending:
        print(f"pending         {', '.join(status.pending)} (run `mkb db migrate`)")
    width = max((len(name) for name in counts), default=5)
    for name, n in counts.items():
        print(f"  {name:<{width}}  {n:>10,}")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from storage.db import StorageError, inspect_file, open_db, resolve_path

    path = resolve_path(args.db)
    try:
        before = inspect_file(path).applied if path.exists() and path.stat().st_size else []
        db = open_db(path, migrate=True)
        db.conn.close()
        after = inspect_file(path)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    applied = [name for name in after.applied if name not in before]
    print(f"{path}: schema version {after.version}; applied {len(applied)} migration(s)")
    for name in applied:
        print(f"  + {name}")
    return 0
