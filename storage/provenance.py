"""Where an experiment came from, and the reports written about it (migration m005).

``experiments.origin`` is empty for an experiment run in this store; an imported or
re-graded one says where it came from (``bundle:<sha256>``, ``regrade:<sha256>``,
``mkb-run:<dir>``, ``harbor-job:<dir>``). ``experiment_reports`` keeps one JSON document per
report: an import's record of what it read and what it did not understand, a re-grade's
agreement report. Write functions take a ``Database`` inside the caller's transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from storage.db import now
from storage.event_rows import append_event

REPORT_KINDS = ("import", "regrade", "bundle")
ORIGIN_KINDS = ("bundle", "regrade", "mkb-run", "harbor-job")


@dataclass(frozen=True)
class ReportRow:
    id: int
    experiment_id: str
    kind: str
    payload_json: str
    created_at: str

    @property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.payload_json)
        return value if isinstance(value, dict) else {"value": value}


def set_origin(db: Database, experiment_id: str, origin: str) -> None:
    """Label an experiment with where it came from (``<kind>:<detail>``)."""
    kind = origin.split(":", 1)[0]
    if kind not in ORIGIN_KINDS:
        raise ValueError(f"origin must start with one of {ORIGIN_KINDS}, not {origin!r}")
    db.execute(
        "UPDATE experiments SET origin=?, updated_at=? WHERE id=?", [origin, now(), experiment_id]
    )
    append_event(db, "experiment_origin", {"origin": origin}, experiment_id=experiment_id)


def origin_of(db: Database, experiment_id: str) -> str:
    row = db.execute("SELECT origin FROM experiments WHERE id=?", [experiment_id]).fetchone()
    return str(row[0]) if row else ""


def add_report(db: Database, experiment_id: str, kind: str, payload: dict[str, Any]) -> int:
    """Store one report about an experiment; returns its id."""
    if kind not in REPORT_KINDS:
        raise ValueError(f"report kind must be one of {REPORT_KINDS}, not {kind!r}")
    report_id = int(
        db.table("experiment_reports")
        .insert(
            {
                "experiment_id": experiment_id,
                "kind": kind,
                "payload_json": json.dumps(payload, default=str),
                "created_at": now(),
            }
        )
        .last_pk  # type: ignore[arg-type]
    )
    append_event(
        db, "experiment_report", {"kind": kind, "report_id": report_id}, experiment_id=experiment_id
    )
    return report_id


def reports(db: Database, experiment_id: str, kind: str | None = None) -> list[ReportRow]:
    """An experiment's reports, oldest first (of one kind when given)."""
    sql = "SELECT id, experiment_id, kind, payload_json, created_at FROM experiment_reports "
    sql += "WHERE experiment_id=?" + (" AND kind=?" if kind else "") + " ORDER BY id"
    params = [experiment_id, kind] if kind else [experiment_id]
    return [ReportRow(*row) for row in db.execute(sql, params).fetchall()]


def latest_report(db: Database, experiment_id: str, kind: str) -> ReportRow | None:
    found = reports(db, experiment_id, kind)
    return found[-1] if found else None
