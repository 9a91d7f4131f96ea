"""Opening the SQLite file safely: path resolution, validation, pragmas, migrations.

A corrupt file, a file that is not SQLite, or a database written by a newer schema gets a
:class:`StorageError` and is never modified: validation opens it read-only first.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database

from storage.migrations import MIGRATION_SET, migrations

DEFAULT_DB = Path("mkb-data") / "mkb.sqlite"
BUSY_TIMEOUT_MS = 30_000
SQLITE_MAGIC = b"SQLite format 3\x00"


class StorageError(RuntimeError):
    """The database file cannot be used as it is; the message says why."""


def now() -> str:
    """UTC ISO-8601 timestamp with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``--db`` if given, else ``$MKB_DB``, else ``./mkb-data/mkb.sqlite``."""
    if path:
        return Path(path)
    env = os.environ.get("MKB_DB")
    return Path(env) if env else DEFAULT_DB


def configure(conn: sqlite3.Connection) -> None:
    """Per-connection pragmas: foreign keys on, a busy timeout, normal sync under WAL."""
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous=NORMAL")


@contextlib.contextmanager
def immediate(db: Database) -> Iterator[Database]:
    """A write transaction that takes SQLite's write lock when it starts (``BEGIN IMMEDIATE``).

    A deferred ``BEGIN`` (what ``db.atomic()`` issues) that reads before it writes cannot
    wait for another writer: when the file changed since its read, the upgrade to a write
    fails at once with "database is locked", whatever the busy timeout. An immediate
    transaction waits up to the busy timeout for the lock instead, and its reads see the
    latest commit. Every write transaction of ours starts this way; nested, it is a
    savepoint.
    """
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.rollback()
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


@dataclass(frozen=True)
class SchemaStatus:
    applied: list[str]
    pending: list[str]
    unknown: list[str]  # applied names this code does not know: a newer schema

    @property
    def version(self) -> int:
        return len(self.applied)


def known_migrations() -> list[str]:
    return [m.name for m in migrations._migrations]


def inspect_file(path: Path) -> SchemaStatus:
    """Validate an existing file read-only and report its schema status."""
    try:
        with path.open("rb") as fh:
            header = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StorageError(f"{path}: cannot read: {exc.strerror}") from exc
    if header and header != SQLITE_MAGIC:
        raise StorageError(f"{path}: not an SQLite database (unexpected file header)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StorageError(f"{path}: cannot open: {exc}") from exc
    try:
        result = conn.execute("PRAGMA quick_check").fetchone()
        if not result or result[0] != "ok":
            raise StorageError(f"{path}: database is corrupt ({result[0] if result else '?'})")
        has_table = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='_sqlite_migrations'"
        ).fetchone()
        applied: list[str] = []
        if has_table:
            applied = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM _sqlite_migrations WHERE migration_set=? ORDER BY rowid",
                    (MIGRATION_SET,),
                )
            ]
        else:
            user_tables = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            ).fetchone()[0]
            if user_tables:
                raise StorageError(
                    f"{path}: an SQLite database of another program (no MetaKernelBench schema)"
                )
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{path}: not a usable SQLite database: {exc}") from exc
    finally:
        conn.close()
    known = known_migrations()
    unknown = [name for name in applied if name not in known]
    pending = [name for name in known if name not in applied]
    return SchemaStatus(applied=applied, pending=pending, unknown=unknown)


def connect(path: Path, *, readonly: bool = False) -> Database:
    """A configured connection to an already-validated file."""
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), check_same_thread=False)
    configure(conn)
    return Database(conn)


def open_db(
    path: str | os.PathLike[str] | None = None,
    *,
    migrate: bool = True,
    readonly: bool = False,
) -> Database:
    """Open (creating if absent) and migrate the database, refusing unusable files.

    With ``readonly`` the file must exist and is opened without writes or migrations.
    """
    p = resolve_path(path)
    exists = p.exists() and p.stat().st_size > 0
    if exists:
        status = inspect_file(p)
        if status.unknown:
            raise StorageError(
                f"{p}: written by a newer MetaKernelBench (unknown migrations: "
                f"{', '.join(status.unknown)}); upgrade the tool to use it"
            )
        if readonly:
            return connect(p, readonly=True)
        if status.pending and not migrate:
            raise StorageError(
                f"{p}: schema is out of date ({len(status.pending)} pending migrations); "
                "run `mkb db migrate`"
            )
    elif readonly:
        raise StorageError(f"{p}: no such database")
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    db = connect(p)
    db.enable_wal()
    if migrate and migrations.pending(db):
        # under the write lock, so two processes opening an old file at once migrate it once
        with immediate(db):
            migrations.apply(db)
    return db


def table_counts(db: Database) -> dict[str, int]:
    """Row count per table (excluding SQLite's and the migrations bookkeeping)."""
    names = [
        row["name"]
        for row in db.query(
            "SELECT name FROM sqlite_master WHERE type='table' "
            "AND name NOT LIKE 'sqlite_%' AND name != '_sqlite_migrations' ORDER BY name"
        )
    ]
    return {name: db.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}
