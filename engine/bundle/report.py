"""The re-grade's agreement report: built from the store after grading, rendered as text."""

from __future__ import annotations

import json
from typing import Any

from engine.analysis.compare import render_side_by_side, side_by_side
from engine.analysis.stored_compare import speedup_lines
from engine.analysis.text import PREVIEW_TAG, share
from engine.bundle.agreement import Pair, agreement
from engine.bundle.content import Bundle
from engine.bundle.regrade import RegradeSetup


def _regraded(db: Any, regrade_id: str) -> dict[tuple[str, int, str, int], dict[str, Any]]:
    """Feedback of every finished re-grading, by (plan key, try, purpose, n)."""
    rows = db.execute(
        "SELECT a.plan_key, s.try, s.purpose, s.n, s.feedback_json FROM submissions s "
        "JOIN attempts a ON a.id = s.attempt_id WHERE a.experiment_id = ? AND s.state = 'done'",
        [regrade_id],
    ).fetchall()
    return {(k, t, p, n): json.loads(fb or "{}") for k, t, p, n, fb in rows}


def _pairs(db: Any, bundle: Bundle, setup: RegradeSetup) -> list[Pair]:
    attempts = {int(a["id"]): a for a in bundle.attempts}
    done = _regraded(db, setup.regrade_id)
    skipped = setup.skip_problems
    pairs = []
    for impl in bundle.implementations:
        a = attempts.get(impl.attempt_id, {})
        label = {
            "model": a.get("model"),
            "problem": impl.problem_id,
            "dsl": impl.dsl,
            "arm": a.get("arm"),
            "replicate": a.get("replicate"),
            "purpose": impl.purpose,
            "n": impl.n,
            "member": impl.member,
        }
        key = (str(a.get("plan_key")), impl.try_number, impl.purpose, impl.n)
        why = (
            "this catalog's problem source differs from the bundle's"
            if impl.problem_id in skipped
            else None
        )
        pairs.append(Pair(label, impl.feedback, done.get(key), why))
    return pairs


def build_report(
    db: Any, bundle: Bundle, setup: RegradeSetup, host: dict[str, Any], *, device: str
) -> dict[str, Any]:
    """Every figure of the agreement report, JSON-ready."""
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import analyze
    from engine.convergence import CONTRACT_VERSION

    regraded = analyze(from_store(db, setup.regrade_id))
    original_devices = sorted({str(r["device"]) for r in bundle.hosts.get("graded_on", [])})
    pairs = _pairs(db, bundle, setup)
    regrade_preview = bool(regraded.get("preview"))
    contract = bundle.grading.get("contract_version")
    return {
        "bundle": {
            "path": bundle.path,
            "sha256": bundle.sha256,
            "created_at": bundle.manifest.get("created_at"),
            "include": bundle.manifest.get("include"),
        },
        "original_experiment": setup.original_id,
        "regrade_experiment": setup.regrade_id,
        "hosts": {
            "original": bundle.hosts.get("graded_on", []),
            "regrade": host,
            "regrade_device_option": device,
        },
        "contract": {
            "bundle": contract,
            "here": CONTRACT_VERSION,
            "same": contract == CONTRACT_VERSION,
        },
        "changed_problems": setup.changed_problems,
        **agreement(
            pairs,
            original_preview=bool(bundle.experiment.get("preview")),
            regrade_preview=regrade_preview,
            original_devices=original_devices,
            regrade_device=str(host.get("device")),
        ),
        "tables": side_by_side(bundle.analysis, regraded),
        "interventions": [_intervention_line(c) for c in bundle.interventions],
    }


def intervention_lines(report: dict[str, Any]) -> list[str]:
    """The bundle's notes, exclusions and interventions, for the text report."""
    found = report.get("interventions") or []
    if not found:
        return []
    return [f"Operators' interventions in the bundle ({len(found)}):", *(f"  {x}" for x in found)]


def _intervention_line(c: dict[str, Any]) -> str:
    """``exclude attempt 12 by alice (reason): applied (outcome)`` for the report."""
    what = f"attempt {c.get('attempt_id')}" if c.get("attempt_id") else "the run"
    why = f" ({c['reason']})" if c.get("reason") else ""
    out = f" ({c['outcome']})" if c.get("outcome") else ""
    return f"{c.get('action')} {what} by {c.get('actor')}{why}: {c.get('state')}{out}"


def _verdict_lines(report: dict[str, Any]) -> list[str]:
    v = report["verdicts"]
    lines = [
        f"Verdicts: {v['agree']} of {v['compared']} agree "
        f"({share(v['agreement'])}); {len(v['not_regraded'])} not re-graded"
    ]
    for c in v["changed"]:
        lines.append(
            f"  changed: {c['model']} {c['problem']} {c['dsl']} {c['arm']} "
            f"r{c['replicate']} {c['purpose']} {c['n']}: "
            f"{c['original']['verdict']} ({c['original']['reason'] or '-'}) -> "
            f"{c['regraded']['verdict']} ({c['regraded']['reason'] or '-'})"
        )
    for c in v["not_regraded"]:
        lines.append(
            f"  not re-graded: {c['problem']} {c['dsl']} {c['arm']} {c['purpose']} "
            f"{c['n']}: {c['why']}"
        )
    return lines


def render_report(report: dict[str, Any]) -> str:
    """The agreement report as plain text (what ``mkb regrade`` prints)."""
    host = report["hosts"]["regrade"]
    preview = report["tables"]["b"]["preview"]
    lines = [
        f"Re-grade of bundle {report['bundle']['sha256'][:16]} "
        f"({report['original_experiment']} -> {report['regrade_experiment']})"
        + (f"  {PREVIEW_TAG}" if preview else ""),
        f"Graded here on: {host.get('device')} (driver {host.get('driver') or '-'}, "
        f"torch {host.get('packages', {}).get('torch') or '-'})",
        "Graded originally on: "
        + ", ".join(f"{h['device']} ({h['gradings']})" for h in report["hosts"]["original"])
        or "-",
    ]
    if not report["contract"]["same"]:
        lines.append(
            f"Contract version differs: bundle {report['contract']['bundle']}, "
            f"here {report['contract']['here']}"
        )
    for c in report["changed_problems"]:
        what = "graded anyway (--allow-changed)" if c["graded_anyway"] else "not re-graded"
        lines.append(f"Problem {c['problem']}: source differs from the bundle's: {what}")
    lines += intervention_lines(report)
    lines += [
        "",
        *_verdict_lines(report),
        "",
        *speedup_lines(report, ratio="re-graded/original"),
        "",
        "The paper's tables: A = the bundle's results, B = re-graded here",
        render_side_by_side(report["tables"]),
    ]
    return "\n".join(lines)
