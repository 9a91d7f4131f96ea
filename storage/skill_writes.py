"""Writes of what people and agents author: skills (collected and edited, with lineage)
and labels. Each also appends its ``events`` row in the same transaction."""

from __future__ import annotations

from sqlite_utils import Database

from storage.db import now
from storage.event_rows import append_event, text_hash


def add_skill(
    db: Database,
    text: str,
    *,
    attempt_id: int | None = None,
    kind: str = "collected",
    author: str = "",
    parent_skill_id: int | None = None,
) -> int:
    """Store a skill text (collected from an attempt or edited by a person)."""
    skill_id = int(
        db.table("skills")
        .insert(
            {
                "attempt_id": attempt_id,
                "kind": kind,
                "text": text,
                "text_hash": text_hash(text),
                "author": author,
                "parent_skill_id": parent_skill_id,
                "created_at": now(),
            }
        )
        .last_pk  # type: ignore[arg-type]
    )
    append_event(db, "skill_updated", {"skill_id": skill_id, "kind": kind}, attempt_id=attempt_id)
    return skill_id


def ensure_edited_skill(
    db: Database, text: str, source_skill_id: int | None, *, author: str = "config"
) -> int:
    """An edited skill with this text that descends from ``source_skill_id`` (the one a
    person saved before launching it, maybe an edit of an edit), else a new one whose parent
    is ``source_skill_id``; returns its id."""
    for (skill_id,) in db.execute(
        "SELECT id FROM skills WHERE kind='edited' AND text_hash=? ORDER BY id", [text_hash(text)]
    ).fetchall():
        if _descends_from(db, int(skill_id), source_skill_id):
            return int(skill_id)
    return add_skill(db, text, kind="edited", author=author, parent_skill_id=source_skill_id)


def _descends_from(db: Database, skill_id: int, ancestor_id: int | None) -> bool:
    """Whether ``ancestor_id`` is on the parent chain of ``skill_id`` (None: it has no
    parent)."""
    seen: set[int] = set()
    current: int | None = skill_id
    while current is not None and current not in seen:
        seen.add(current)
        row = db.execute("SELECT parent_skill_id FROM skills WHERE id=?", [current]).fetchone()
        parent = row[0] if row else None
        if ancestor_id is None:
            return parent is None and current == skill_id
        if parent == ancestor_id:
            return True
        current = parent
    return False


def add_label(
    db: Database,
    *,
    task: str,
    subject_type: str,
    subject_id: int,
    category: str,
    value: str,
    annotator: str,
    annotator_kind: str,
    evidence: str = "",
    rubric_hash: str = "",
    raw_reply: str | None = None,
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost_usd: float = 0.0,
) -> None:
    """Record (or replace) one annotator's label for one subject and category."""
    db.execute(
        "INSERT INTO labels (task, subject_type, subject_id, category, value, evidence, "
        "annotator, annotator_kind, rubric_hash, raw_reply, tokens_in, tokens_out, cost_usd, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (task, subject_type, subject_id, category, annotator) DO UPDATE SET "
        "value=excluded.value, evidence=excluded.evidence, rubric_hash=excluded.rubric_hash, "
        "raw_reply=excluded.raw_reply, tokens_in=excluded.tokens_in, "
        "tokens_out=excluded.tokens_out, cost_usd=excluded.cost_usd, "
        "created_at=excluded.created_at",
        [
            task,
            subject_type,
            subject_id,
            category,
            value,
            evidence,
            annotator,
            annotator_kind,
            rubric_hash,
            raw_reply,
            tokens_in,
            tokens_out,
            cost_usd,
            now(),
        ],
    )
    append_event(
        db,
        "label_added",
        {"task": task, "subject_id": subject_id, "category": category, "annotator": annotator},
    )
