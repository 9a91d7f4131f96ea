"""Per-thread read connections that can be closed while reads are still running elsewhere.

Reads run on worker threads (``asyncio.to_thread``), each thread with its own connection.
Closing a connection that another thread is using crashes SQLite (a segfault, not an
exception), so :meth:`ThreadReaders.close` refuses new reads, interrupts the ones in flight,
waits for them to return and only then closes the connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from storage.db import connect, open_db

T = TypeVar("T")


class StoreClosedError(RuntimeError):
    """A read was asked of a store that is closing or closed."""


class ThreadReaders:
    """One read connection per thread, and a close that waits for reads in flight."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        self._local = threading.local()
        self._all: list[Database] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False

    def _connection(self) -> Database:
        db = getattr(self._local, "db", None)
        if db is None:
            db = connect(self.path, readonly=self.readonly)
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    def read_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(db, *args, **kwargs)`` on this thread's connection."""
        with self._lock:
            if self._closed:
                raise StoreClosedError("the store is closed")
            self._in_flight += 1
        try:
            return fn(self._connection(), *args, **kwargs)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._idle.notify_all()

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(self.read_sync, fn, *args, **kwargs)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def close(self, wait_s: float = 10.0) -> None:
        """Refuse new reads, let running ones finish (interrupting them after ``wait_s``),
        then close every connection. A connection still in use is left to the process."""
        with self._lock:
            self._closed = True
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout=wait_s):
                for db in self._all:
                    with contextlib.suppress(Exception):
                        db.conn.interrupt()  # thread-safe: the query fails soon
                self._idle.wait_for(lambda: self._in_flight == 0, timeout=2.0)
            if self._in_flight:
                return  # closing under a running query would crash the process
            for db in self._all:
                with contextlib.suppress(Exception):
                    db.conn.close()
            self._all.clear()


class ReadOnlyReader(ThreadReaders):
    """Per-thread read-only connections to a database another process writes."""

    def __init__(self, path: Path) -> None:
        open_db(path, readonly=True).conn.close()  # validates the file (never modifies it)
        super().__init__(path, readonly=True)
