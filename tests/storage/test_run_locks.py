"""Immediate write transactions and the run lock: one engine per experiment, dead ones expire."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage import run_locks, writes
from storage.db import immediate, inspect_file, open_db
from storage.migrations import migrations
from storage.run_locks import ExperimentBusyError, ProcessIdentity, RunLock
from storage.store import Store

ME = ProcessIdentity.current()


def _read_then_write(db, i: int) -> None:  # type: ignore[no-untyped-def]
    db.execute("SELECT count(*) FROM events").fetchone()  # a read first, as comparisons do
    writes.append_event(db, "tick", {"i": i})


async def test_two_stores_on_one_file_never_see_database_is_locked(db_path: Path) -> None:
    """Two writers (two engines, or an engine and the TUI) doing read-then-write transactions:
    a deferred BEGIN failed these at once with "database is locked"; immediate ones wait."""
    first, second = Store(db_path), Store(db_path)
    try:

        async def burst(store: Store, n: int) -> None:
            for i in range(n):
                await store.write(_read_then_write, i)

        await asyncio.gather(*(burst(s, 60) for s in (first, second) for _ in range(3)))
        count = first.read_sync(lambda db: db.execute("SELECT count(*) FROM events").fetchone())
        assert count[0] == 360
    finally:
        first.close()
        second.close()


def test_immediate_rolls_back_and_nests(db_path: Path) -> None:
    db = open_db(db_path)
    with pytest.raises(RuntimeError), immediate(db):
        writes.append_event(db, "gone")
        raise RuntimeError("boom")
    with immediate(db):
        writes.append_event(db, "kept")
        with pytest.raises(RuntimeError), immediate(db):  # a savepoint inside
            writes.append_event(db, "inner")
            raise RuntimeError("boom")
    kinds = [row[0] for row in db.execute("SELECT kind FROM events")]
    db.conn.close()
    assert kinds == ["kept"]


def test_connections_opening_an_old_file_at_once_migrate_it_once(db_path: Path) -> None:
    db = open_db(db_path, migrate=False)
    migrations.apply(db, stop_before="m003_create_run_locks")
    db.conn.close()
    assert inspect_file(db_path).pending[0] == "m003_create_run_locks"  # and any later
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_it() -> None:
        try:
            start.wait()
            open_db(db_path).conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    status = inspect_file(db_path)
    assert status.pending == [] and status.applied.count("m003_create_run_locks") == 1


def _lock(**changes: object) -> RunLock:
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
    fields: dict[str, object] = {
        "experiment_id": "e1",
        "owner": "other",
        "pid": ME.pid,
        "host": ME.host,
        "proc_start": ME.proc_start,
        "command": "mkb run e1.toml",
        "started_at": stamp,
        "heartbeat_at": stamp,
    }
    fields.update(changes)
    return RunLock(**fields)  # type: ignore[arg-type]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_liveness_on_the_same_host() -> None:
    assert not run_locks.is_alive(_lock(pid=_dead_pid()))  # pid gone: kill -9
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = run_locks.process_start(sleeper.pid)
        assert start  # a live process with a known start
        assert run_locks.is_alive(_lock(pid=sleeper.pid, proc_start=start))
        # the pid now belongs to a later process (pid reuse): the holder is gone
        assert not run_locks.is_alive(_lock(pid=sleeper.pid, proc_start="boot:1"))
        # no /proc start recorded: the pid alone decides
        assert run_locks.is_alive(_lock(pid=sleeper.pid, proc_start=""))
    finally:
        sleeper.kill()
        sleeper.wait()
    # this process: live only while an engine of ours holds that token
    assert not run_locks.is_alive(_lock(owner="left-behind"), owners=set())
    assert run_locks.is_alive(_lock(owner="running"), owners={"running"})


def test_liveness_from_another_host_is_the_heartbeat() -> None:
    at = datetime.now(UTC)
    fresh = (at - timedelta(seconds=5)).isoformat(timespec="milliseconds")
    old = (at - timedelta(seconds=run_locks.STALE_AFTER_S + 1)).isoformat(timespec="milliseconds")
    assert run_locks.is_alive(_lock(host="gpu-7", heartbeat_at=fresh), at=at)
    assert not run_locks.is_alive(_lock(host="gpu-7", heartbeat_at=old), at=at)
    assert not run_locks.is_alive(_lock(host="gpu-7", heartbeat_at="garbage"), at=at)


def test_acquire_refuses_a_live_holder_and_says_who_and_how_to_watch(db_path: Path) -> None:
    db = open_db(db_path)
    run_locks.register_owner("first")
    try:
        with immediate(db):
            assert run_locks.acquire(db, "e1", "first", command="mkb run e1.toml") is None
        with pytest.raises(ExperimentBusyError) as info, immediate(db):
            run_locks.acquire(db, "e1", "second", command="mkb tui")
        message = str(info.value)
        holder = run_locks.current(db, "e1")
        assert holder is not None and holder.owner == "first"
        for part in (
            f"pid {ME.pid}",
            f"on {ME.host}",
            f"since {holder.started_at}",
            "`mkb run e1.toml`",
            f"mkb tui --attach --db {db_path}",
        ):
            assert part in message
        assert info.value.holder == holder
        # another experiment in the same store is not affected
        with immediate(db):
            assert run_locks.acquire(db, "e2", "second") is None
        # heartbeats and release belong to the holder only
        with immediate(db):
            assert run_locks.heartbeat(db, "e1", "first")
            assert not run_locks.heartbeat(db, "e1", "second")
            assert not run_locks.release(db, "e1", "second")
            assert run_locks.release(db, "e1", "first")
        assert run_locks.current(db, "e1") is None
    finally:
        run_locks.unregister_owner("first")
        db.conn.close()


def test_a_dead_holder_is_taken_over_and_recorded(db_path: Path) -> None:
    db = open_db(db_path)
    dead = _dead_pid()
    other = ProcessIdentity(dead, ME.host, "")
    with immediate(db):
        run_locks.acquire(db, "e1", "killed", command="mkb run e1.toml", me=other)
    with immediate(db):
        previous = run_locks.acquire(db, "e1", "resumer", command="mkb run e1.toml")
    assert previous is not None and previous.pid == dead and previous.owner == "killed"
    holder = run_locks.current(db, "e1")
    assert holder is not None and holder.owner == "resumer" and holder.pid == ME.pid
    with immediate(db):  # the killed engine, were it somehow back, has lost its lock
        assert not run_locks.heartbeat(db, "e1", "killed")
    payload = db.execute(
        "SELECT payload_json FROM events WHERE kind='run_lock_acquired' ORDER BY id DESC"
    ).fetchone()[0]
    db.conn.close()
    assert f'"pid": {dead}' in payload and "taken_over" in payload
