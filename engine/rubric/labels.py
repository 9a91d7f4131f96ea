"""Reading labels: filtered by experiment, and resolved to one value per item.

Resolution (several annotators on one item): a human label wins (the latest, if several
people labelled it); otherwise the majority value of the LLM annotators; a tie goes to the
value given by the alphabetically first annotator among the tied values. Pass ``annotator``
to use a single annotator's labels instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from sqlite_utils import Database

from engine.rubric import subjects
from storage import queries

LabelKey = tuple[str, int, str]  # (task, subject_id, category)


@dataclass(frozen=True)
class LabelRecord:
    task: str
    subject_type: str
    subject_id: int
    category: str
    value: str
    evidence: str
    annotator: str
    annotator_kind: str
    id: int


def experiment_subjects(db: Database, experiment_id: str) -> dict[str, set[int]]:
    """Subject ids per task that belong to an experiment (its skills, attempts, comparisons)."""
    comps = queries.comparisons(db, experiment_id)
    skills = {sid for c in comps if (sid := subjects.comparison_skill_id(db, c)) is not None}
    attempts = {a.id for a in queries.attempts_for_experiment(db, experiment_id)}
    return {"skill": skills, "uptake": attempts, "cause": {c.id for c in comps}}


def label_rows(db: Database, *, task: str | None = None, experiment_id: str | None = None,
               annotator: str | None = None) -> list[LabelRecord]:
    rows = [LabelRecord(r.task, r.subject_type, r.subject_id, r.category, r.value, r.evidence,
                        r.annotator, r.annotator_kind, r.id)
            for r in queries.labels(db, task=task)]
    if annotator is not None:
        rows = [r for r in rows if r.annotator == annotator]
    if experiment_id is not None:
        allowed = experiment_subjects(db, experiment_id)
        rows = [r for r in rows if r.subject_id in allowed.get(r.task, set())]
    return rows


def resolve(rows: list[LabelRecord]) -> dict[LabelKey, str]:
    """One value per (task, subject, category), by the rule in this module's docstring."""
    grouped: dict[LabelKey, list[LabelRecord]] = defaultdict(list)
    for row in rows:
        grouped[(row.task, row.subject_id, row.category)].append(row)
    out: dict[LabelKey, str] = {}
    for key, group in grouped.items():
        humans = [r for r in group if r.annotator_kind == "human"]
        if humans:
            out[key] = max(humans, key=lambda r: r.id).value
            continue
        counts = Counter(r.value for r in group)
        top = max(counts.values())
        tied = {v for v, n in counts.items() if n == top}
        out[key] = min((r for r in group if r.value in tied), key=lambda r: r.annotator).value
    return out


def resolved_labels(db: Database, *, task: str | None = None, experiment_id: str | None = None,
                    annotator: str | None = None) -> dict[LabelKey, str]:
    return resolve(label_rows(db, task=task, experiment_id=experiment_id, annotator=annotator))
