"""Opening, validating and migrating the SQLite file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from app.cli import main
from storage.db import StorageError, inspect_file, open_db, resolve_path, table_counts
from storage.migrations import migrations

EXPECTED_TABLES = {
    "experiments",
    "attempts",
    "trajectory_steps",
    "submissions",
    "grading_jobs",
    "skills",
    "comparisons",
    "labels",
    "events",
}


def test_new_database_has_every_table_empty(db_path: Path) -> None:
    db = open_db(db_path)
    counts = table_counts(db)
    assert set(counts) >= EXPECTED_TABLES
    assert all(n == 0 for n in counts.values())


def test_connection_pragmas(db_path: Path) -> None:
    db = open_db(db_path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_foreign_keys_are_enforced(db_path: Path) -> None:
    db = open_db(db_path)
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO trajectory_steps (attempt_id, step_index, created_at) VALUES (999, 0, 'x')"
        )


def test_enum_checks_reject_unknown_values(db_path: Path) -> None:
    db = open_db(db_path)
    db.execute(
        "INSERT INTO experiments (id, name, created_at, updated_at) VALUES ('e', 'e', 'x', 'x')"
    )
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO attempts (experiment_id, plan_key, model, problem_id, dsl, arm, "
            "created_at, updated_at) VALUES ('e', 'k', 'm', 'p01', 'cuda', 'solo_cute', 'x', 'x')"
        )


def test_resolve_path_prefers_flag_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MKB_DB", "/tmp/from-env.sqlite")
    assert resolve_path("given.sqlite") == Path("given.sqlite")
    assert resolve_path(None) == Path("/tmp/from-env.sqlite")
    monkeypatch.delenv("MKB_DB")
    assert resolve_path(None) == Path("mkb-data/mkb.sqlite")


def test_non_sqlite_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"just some text, not a database\n")
    before = path.read_bytes()
    with pytest.raises(StorageError, match="not an SQLite database"):
        open_db(path)
    assert path.read_bytes() == before


def test_corrupt_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.sqlite"
    db = open_db(path)
    db.execute("INSERT INTO events (kind, created_at) VALUES ('x', 'y')")
    db.conn.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # wreck the schema page after the header
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(StorageError):
        open_db(path)
    assert path.read_bytes() == before


def test_newer_schema_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite"
    db = open_db(path)
    db.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('metakernelbench', 'm999_from_the_future', 'now')"
    )
    db.conn.commit()
    db.conn.close()
    assert inspect_file(path).unknown == ["m999_from_the_future"]
    mtime = path.stat().st_mtime_ns
    with pytest.raises(StorageError, match="newer"):
        open_db(path)
    assert path.stat().st_mtime_ns == mtime


def test_other_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StorageError, match="another program"):
        open_db(path)


def test_db_info_json_on_new_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "NEW.sqlite"
    assert main(["db", "info", "--json", "--db", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info["tables"]) >= EXPECTED_TABLES
    assert info["tables"]["events"] == 0
    assert info["schema_version"] == len(migrations._migrations)


def test_db_info_reports_bad_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_text("hello")
    assert main(["db", "info", "--db", str(path)]) == 2
    assert "not an SQLite database" in capsys.readouterr().err
    assert path.read_text() == "hello"


def test_db_migrate_applies_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old.sqlite"
    db = open_db(path, migrate=False)
    db.conn.close()
    assert inspect_file(path).pending
    assert main(["db", "migrate", "--db", str(path)]) == 0
    assert "applied" in capsys.readouterr().out
    assert inspect_file(path).pending == []
