"""Closing read connections while reads run on other threads (it used to crash SQLite)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from storage.db import open_db
from storage.readers import StoreClosedError, ThreadReaders


@pytest.fixture
def path(tmp_path: Path) -> Path:
    db_path = tmp_path / "r.sqlite"
    open_db(db_path).conn.close()
    return db_path


def test_close_waits_for_a_read_in_flight(path: Path) -> None:
    readers = ThreadReaders(path)
    started, release = threading.Event(), threading.Event()
    result: list[object] = []

    def slow_read(db):  # type: ignore[no-untyped-def]
        started.set()
        release.wait(5)
        return db.execute("SELECT count(*) FROM events").fetchone()[0]

    worker = threading.Thread(target=lambda: result.append(readers.read_sync(slow_read)))
    worker.start()
    started.wait(5)
    closer = threading.Thread(target=readers.close)
    closer.start()
    time.sleep(0.2)
    assert closer.is_alive() and readers.in_flight == 1  # close waits for the read
    release.set()
    worker.join(5)
    closer.join(5)
    assert result == [0] and not closer.is_alive()
    with pytest.raises(StoreClosedError):
        readers.read_sync(lambda db: 1)


def test_a_read_that_outlasts_the_wait_is_interrupted(path: Path) -> None:
    readers = ThreadReaders(path)
    started = threading.Event()
    errors: list[BaseException] = []

    def endless(db):  # type: ignore[no-untyped-def]
        started.set()
        db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT count(*) FROM c").fetchone()

    def run() -> None:
        try:
            readers.read_sync(endless)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    started.wait(5)
    readers.close(wait_s=0.2)
    worker.join(5)
    assert not worker.is_alive() and readers.in_flight == 0
    assert errors and isinstance(errors[0], sqlite3.OperationalError)  # "interrupted"
