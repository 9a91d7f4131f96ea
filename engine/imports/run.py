"""An import, start to end: read the directory, write the experiment in one transaction,
check it against the run's own snapshot where there is one, store the report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from engine.imports import harbor_job, mkb_run
from engine.imports.records import (
    AttemptRecord,
    create_imported_experiment,
    link_treatments,
    paper_comparisons,
    write_attempt,
    write_comparisons,
)
from engine.imports.report import ImportReport
from engine.imports.snapshot import check_snapshot
from storage import provenance, queries
from storage.db import immediate

KINDS = ("mkb-run", "harbor-job")


class ImportFailure(ValueError):
    """The directory cannot be imported; the message says why."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def _read(kind: str, root: Path, report: ImportReport) -> list[AttemptRecord]:
    if kind == "mkb-run":
        return mkb_run.read_store(root, report)
    return harbor_job.read_job(root, report)


def _write(db: Any, records: list[AttemptRecord], report: ImportReport, name: str) -> None:
    create_imported_experiment(
        db,
        report.experiment_id,
        name,
        f"{report.kind}:{report.source}",
        grading_backend=report.kind,
        gpu=mkb_run.TARGET_GPU if report.kind == "mkb-run" else None,
    )
    seen: set[str] = set()
    for rec in records:
        if rec.plan_key in seen:
            report.not_understood(
                rec.plan_key,
                "a second record for the same model, problem, "
                "arm and replicate (the first was imported)",
            )
            continue
        seen.add(rec.plan_key)
        write_attempt(db, report.experiment_id, rec)
        report.count("attempts")
        report.count("skills", int(bool(rec.skill and rec.skill.strip())))
        report.count("final evaluations", sum(g.purpose == "final" for g in rec.graded))
        report.count("submissions", sum(g.purpose == "submission" for g in rec.graded))
    link_treatments(db, report.experiment_id)
    report.count(
        "comparisons",
        write_comparisons(db, report.experiment_id, paper_comparisons(db, report.experiment_id)),
    )


def import_dir(
    db: Any, kind: str, root: str | Path, experiment_id: str | None = None
) -> dict[str, Any]:
    """Import one run directory as a new experiment; returns the stored report."""
    if kind not in KINDS:
        raise ImportFailure(f"kind must be one of {KINDS}, not {kind!r}")
    path = Path(root)
    if not path.is_dir():
        raise ImportFailure(f"{path}: not a directory")
    report = ImportReport(kind, str(path.resolve()))
    try:
        records = _read(kind, path, report)
    except ValueError as exc:
        raise ImportFailure(str(exc)) from exc
    if not records:
        raise ImportFailure(
            f"{path}: no trial of this layout to import "
            f"({len(report.unknown)} records not understood)"
        )
    report.experiment_id = experiment_id or f"{kind}-{_slug(report.model)}"
    if queries.experiment(db, report.experiment_id) is not None:
        raise ImportFailure(
            f"experiment {report.experiment_id!r} exists in this store: give another --id"
        )
    name = f"{report.model} [{kind} import]"
    with immediate(db):
        _write(db, records, report, name)
        snapshot = path / "results.json"
        if kind == "mkb-run" and snapshot.is_file():
            report.reproduction = {
                "snapshot": str(snapshot),
                **check_snapshot(
                    json.loads(snapshot.read_text(encoding="utf-8")), db, report.experiment_id
                ),
            }
        payload = report.to_dict()
        provenance.add_report(db, report.experiment_id, "import", payload)
    return payload
