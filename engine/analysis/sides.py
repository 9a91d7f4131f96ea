"""Where a stored experiment came from and where it was graded, and which experiment re-grades
which: the labels ``mkb analyze --compare`` and the TUI's Experiments and Compare views put
on each side, so a CPU-preview or another GPU's figure is never read as comparable."""

from __future__ import annotations

import json
from typing import Any

from storage import provenance, queries

ORIGIN_TITLES = {
    "bundle": "restored from bundle",
    "regrade": "re-grade",
    "mkb-run": "imported public MetaKernelBench run",
    "harbor-job": "imported Harbor job",
}


def grading_devices(db: Any, experiment_id: str) -> list[str]:
    """The devices the experiment's stored feedback names (``cpu (preview)``, a GPU model)."""
    rows = db.execute(
        "SELECT s.feedback_json FROM submissions s JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id = ? AND s.state = 'done'",
        [experiment_id],
    ).fetchall()
    devices: set[str] = set()
    for (text,) in rows:
        try:
            feedback = json.loads(text or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(feedback, dict) and feedback.get("device"):
            devices.add(str(feedback["device"]))
    return sorted(devices)


def regrade_links(db: Any) -> dict[str, str]:
    """Each re-grade in the store → the experiment it re-grades: the one its agreement
    report names, else the bundle's restored experiment, else the id it was named after."""
    exps = queries.experiments(db)
    ids = {e.id for e in exps}
    restored = {e.origin: e.id for e in exps if e.origin.startswith("bundle:")}
    links: dict[str, str] = {}
    for e in exps:
        if not e.origin.startswith("regrade:"):
            continue
        report = provenance.latest_report(db, e.id, "regrade")
        source = report.payload.get("original_experiment") if report else None
        if source not in ids:
            digest = e.origin.split(":", 1)[1]
            source = restored.get(f"bundle:{digest}") or e.id.rsplit("-regrade-", 1)[0]
        if source in ids and source != e.id:
            links[e.id] = str(source)
    return links


def origin_label(origin: str, regrade_of: str | None = None) -> str:
    """``re-grade of demo (bundle 1a2b3c4d)``, ``imported Harbor job (jobs/x)``, ..."""
    if not origin:
        return "run in this store"
    kind, _, detail = origin.partition(":")
    title = ORIGIN_TITLES.get(kind, kind)
    if kind in ("bundle", "regrade"):
        detail = f"bundle {detail[:8]}"
    if kind == "regrade" and regrade_of:
        title = f"re-grade of {regrade_of}"
    return f"{title} ({detail})" if detail else title


def _attempt_counts(db: Any) -> dict[str, int]:
    rows = db.execute("SELECT experiment_id, count(*) FROM attempts GROUP BY experiment_id")
    return {str(eid): int(n) for eid, n in rows.fetchall()}


def _entry(
    e: queries.ExperimentRow, links: dict[str, str], attempts: int, devices: list[str]
) -> dict[str, Any]:
    regrade_of = links.get(e.id)
    return {
        "id": e.id,
        "name": e.name,
        "state": e.state,
        "preview": bool(e.preview) or "cpu (preview)" in devices,
        "origin": e.origin,
        "from": origin_label(e.origin, regrade_of),
        "devices": devices,
        "gpu": e.gpu,
        "attempts": attempts,
        "regrade_of": regrade_of,
        "regrades": [r for r, src in links.items() if src == e.id],  # newest first
    }


def describe(db: Any, experiment_id: str) -> dict[str, Any] | None:
    """One experiment's label: origin, grading devices, re-grade links (None: no such)."""
    row = queries.experiment(db, experiment_id)
    if row is None:
        return None
    count = db.execute("SELECT count(*) FROM attempts WHERE experiment_id = ?", [row.id])
    return _entry(row, regrade_links(db), count.fetchone()[0], grading_devices(db, row.id))


def experiment_entries(db: Any) -> list[dict[str, Any]]:
    """Every experiment of the store, newest first, labelled as :func:`describe` does."""
    links, counts = regrade_links(db), _attempt_counts(db)
    return [
        _entry(e, links, counts.get(e.id, 0), grading_devices(db, e.id))
        for e in queries.experiments(db)
    ]
