"""One engine per experiment: the run lock (table ``run_locks``, migration m003).

An engine writes its experiment's row before it plans or resumes anything, in the same
immediate transaction as the rest of its start (so of two engines started at once, the second
sees the first's row), refreshes ``heartbeat_at`` while it runs and deletes the row when it
stops. A second engine on the same experiment gets :class:`ExperimentBusyError`, which names
the holder (command, pid, host, since when) and says how to watch it instead.

A row whose holder is gone is taken over, so a run killed with ``kill -9`` still resumes:

* on the same host, the holder is dead when its pid no longer exists, is a zombie, or belongs
  to a later process (the boot id and start time recorded in ``proc_start`` differ: pid
  reuse); a row of this very process is live only while its engine runs (``register_owner``);
* from another host (a store on a shared file system), the holder is dead when its heartbeat
  is older than ``STALE_AFTER_S``.

Other writers (labels, annotations, edited skills, the TUI's store) take no run lock: their
transactions are short and wait for the engine's through the busy timeout.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import threading
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database

from storage.db import now
from storage.writes import append_event

HEARTBEAT_S = 10.0  # how often a running engine refreshes its row
STALE_AFTER_S = 60.0  # a row not refreshed for this long is dead (seen from another host)

_owners_lock = threading.Lock()
_live_owners: set[str] = set()


def this_command() -> str:
    """How this process was started, for the run lock (``mkb run x.toml``)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name in ("cli.py", "__main__.py"):
        name = "mkb"
    return " ".join([name, *sys.argv[1:]])[:300]


def register_owner(owner: str) -> None:
    """Mark ``owner`` (an engine's token) as running in this process."""
    with _owners_lock:
        _live_owners.add(owner)


def unregister_owner(owner: str) -> None:
    with _owners_lock:
        _live_owners.discard(owner)


def live_owners() -> frozenset[str]:
    with _owners_lock:
        return frozenset(_live_owners)


@functools.cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """``"<boot id>:<start ticks>"`` of a running process, ``""`` where the host has no
    ``/proc`` (the process exists; its start is unknown), None when there is no such live
    process (absent, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # /proc works: the process is gone
    except OSError:
        pass
    else:
        fields = stat[stat.rfind(")") + 2 :].split()
        if not fields or fields[0] in ("Z", "X"):
            return None
        return f"{_boot_id()}:{fields[19]}"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass  # it exists (another user's process)
    return ""


@dataclass(frozen=True)
class ProcessIdentity:
    """What identifies an engine's process across processes and hosts."""

    pid: int
    host: str
    proc_start: str

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(pid, socket.gethostname(), process_start(pid) or "")


@dataclass(frozen=True)
class RunLock:
    experiment_id: str
    owner: str
    pid: int
    host: str
    proc_start: str
    command: str
    started_at: str
    heartbeat_at: str

    def describe(self) -> str:
        what = f"`{self.command}`" if self.command else "an engine"
        return f"{what} (pid {self.pid} on {self.host}, since {self.started_at})"


class ExperimentBusyError(RuntimeError):
    """Another live engine runs this experiment; the message names it and what to do."""

    def __init__(self, holder: RunLock, db_path: str = "") -> None:
        db = f" --db {db_path}" if db_path else ""
        super().__init__(
            f"experiment {holder.experiment_id!r} is already running: {holder.describe()}, "
            f"last heartbeat {holder.heartbeat_at}. One engine runs an experiment at a time. "
            f"Watch it with `mkb tui --attach{db}` (labels and annotations can still be "
            "added meanwhile). To take the run over, stop that process (Ctrl-C, or kill it) "
            "and run this again: it resumes where it stopped."
        )
        self.holder = holder
        self.db_path = db_path


def current(db: Database, experiment_id: str) -> RunLock | None:
    """The experiment's lock row, live or not."""
    row = db.execute(
        "SELECT experiment_id, owner, pid, host, proc_start, command, started_at, heartbeat_at "
        "FROM run_locks WHERE experiment_id = ?",
        [experiment_id],
    ).fetchone()
    return RunLock(*row) if row else None


def _age_s(stamp: str, at: datetime) -> float:
    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return float("inf")
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (at - then).total_seconds()


def is_alive(
    lock: RunLock,
    *,
    me: ProcessIdentity | None = None,
    owners: Collection[str] | None = None,
    at: datetime | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> bool:
    """Whether the engine that wrote ``lock`` still runs (see the module docstring)."""
    me = me or ProcessIdentity.current()
    if lock.host == me.host:
        if lock.pid == me.pid and lock.proc_start == me.proc_start:
            return lock.owner in (live_owners() if owners is None else owners)
        started = process_start(lock.pid)
        if started is None:
            return False
        return not (lock.proc_start and started and started != lock.proc_start)
    return _age_s(lock.heartbeat_at, at or datetime.now(UTC)) <= stale_after_s


def _db_file(db: Database) -> str:
    for _, name, path in db.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(path or "")
    return ""


def acquire(
    db: Database,
    experiment_id: str,
    owner: str,
    *,
    command: str = "",
    me: ProcessIdentity | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> RunLock | None:
    """Take the experiment's lock for ``owner``; run it in a write transaction.

    Raises :class:`ExperimentBusyError` while a live engine holds it. Returns the dead
    holder it replaced (a killed run), else None; the ``run_lock_acquired`` event says so too.
    """
    me = me or ProcessIdentity.current()
    holder = current(db, experiment_id)
    taken_over = holder if holder is not None and holder.owner != owner else None
    if taken_over is not None and is_alive(taken_over, me=me, stale_after_s=stale_after_s):
        raise ExperimentBusyError(taken_over, _db_file(db))
    stamp = now()
    db.execute(
        "INSERT OR REPLACE INTO run_locks (experiment_id, owner, pid, host, proc_start, "
        "command, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [experiment_id, owner, me.pid, me.host, me.proc_start, command, stamp, stamp],
    )
    payload: dict[str, object] = {"pid": me.pid, "host": me.host, "command": command}
    if taken_over is not None:
        payload["taken_over"] = {
            "pid": taken_over.pid,
            "host": taken_over.host,
            "since": taken_over.started_at,
            "heartbeat_at": taken_over.heartbeat_at,
        }
    append_event(db, "run_lock_acquired", payload, experiment_id=experiment_id)
    return taken_over


def heartbeat(db: Database, experiment_id: str, owner: str) -> bool:
    """Refresh the lock; False when ``owner`` no longer holds it (it was taken over)."""
    cur = db.execute(
        "UPDATE run_locks SET heartbeat_at = ? WHERE experiment_id = ? AND owner = ?",
        [now(), experiment_id, owner],
    )
    return cur.rowcount == 1


def release(db: Database, experiment_id: str, owner: str) -> bool:
    """Drop the lock if ``owner`` holds it; returns whether it did."""
    cur = db.execute(
        "DELETE FROM run_locks WHERE experiment_id = ? AND owner = ?", [experiment_id, owner]
    )
    if cur.rowcount != 1:
        return False
    append_event(db, "run_lock_released", {}, experiment_id=experiment_id)
    return True
