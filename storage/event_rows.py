"""Rows of the ``events`` table, appended in the writer's transaction, and text hashes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlite_utils import Database

from storage.db import now


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append_event(
    db: Database,
    kind: str,
    payload: Mapping[str, Any] | None = None,
    *,
    experiment_id: str | None = None,
    attempt_id: int | None = None,
) -> int:
    """Append one event; returns its id (monotonic, never reused)."""
    cur = db.execute(
        "INSERT INTO events (experiment_id, attempt_id, kind, payload_json, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [experiment_id, attempt_id, kind, json.dumps(dict(payload or {}), default=str), now()],
    )
    return int(cur.lastrowid or 0)


def append_events(db: Database, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append many events: each row has ``kind`` and optional payload/experiment/attempt ids."""
    stamp = now()
    cur = db.conn.executemany(
        "INSERT INTO events (experiment_id, attempt_id, kind, payload_json, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (
                r.get("experiment_id"),
                r.get("attempt_id"),
                r["kind"],
                json.dumps(dict(r.get("payload") or {}), default=str),
                stamp,
            )
            for r in rows
        ],
    )
    return cur.rowcount
