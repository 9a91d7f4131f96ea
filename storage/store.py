"""One writer thread, reads off the event loop.

``await store.write(fn, *args)`` runs ``fn(db, *args)`` inside a transaction on the single
writer thread (SQLite allows one writer at a time; a queue keeps callers from ever seeing
"database is locked"); writes waiting in the queue are committed together (group commit),
each in its own savepoint so one failing write never undoes another. The transaction starts
``BEGIN IMMEDIATE``, so another process writing the same file (a second store, ``mkb label``)
is waited for up to the busy timeout instead of failing a read-then-write.
``await store.read(fn, *args)`` runs ``fn`` on a worker thread with its own read connection
(WAL gives each read a consistent snapshot).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from storage.db import connect, immediate, open_db, resolve_path
from storage.readers import ThreadReaders

T = TypeVar("T")
_STOP = object()


class Store:
    """Owns the writer thread and hands out read connections per thread."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path: Path = resolve_path(path)
        boot = open_db(self.path)  # validates, creates, migrates
        boot.conn.close()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._readers = ThreadReaders(self.path)
        self._closed = False
        self.max_batch = 500
        self._writer = threading.Thread(target=self._run_writer, name="mkb-writer", daemon=True)
        self._writer.start()

    # -- writing -----------------------------------------------------------------------------
    def _run_writer(self) -> None:
        db = connect(self.path)
        try:
            while True:
                batch = [self._queue.get()]
                while len(batch) < self.max_batch:  # group commit: drain what is waiting
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(item is _STOP for item in batch)
                self._run_batch(db, [item for item in batch if item is not _STOP])
                if stop:
                    break
        finally:
            db.conn.close()

    @staticmethod
    def _run_batch(db: Database, batch: list[Any]) -> None:
        """Run queued writes in one transaction, each in its own savepoint."""
        outcomes: list[tuple[concurrent.futures.Future[Any], bool, Any]] = []
        try:
            with immediate(db):
                for fn, args, kwargs, future in batch:
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        with db.atomic():
                            result = fn(db, *args, **kwargs)
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        outcomes.append((future, False, exc))
                    else:
                        outcomes.append((future, True, result))
        except BaseException as exc:  # noqa: BLE001 - the commit itself failed
            for future, _, _ in outcomes:
                future.set_exception(exc)
            return
        for future, ok, value in outcomes:
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def submit_write(
        self, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        """Queue a write from any thread; returns a concurrent future."""
        if self._closed:
            raise RuntimeError("store is closed")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((fn, args, kwargs, future))
        return future

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(db, *args, **kwargs)`` in one transaction on the writer thread."""
        return await asyncio.wrap_future(self.submit_write(fn, *args, **kwargs))

    def write_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Blocking write, for code that is not on an event loop."""
        return self.submit_write(fn, *args, **kwargs).result()

    # -- reading -----------------------------------------------------------------------------
    def read_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(db, *args, **kwargs)`` on this thread's read connection."""
        return self._readers.read_sync(fn, *args, **kwargs)

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(db, *args, **kwargs)`` on a worker thread with its own connection."""
        return await asyncio.to_thread(self.read_sync, fn, *args, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Finish queued writes, stop the writer and close read connections."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._writer.join()
        self._readers.close()  # waits for reads in flight before closing their connections

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
