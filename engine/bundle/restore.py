"""A bundle's experiment written into a store: as it was graded (the original, labelled
``bundle:<sha256>``), or ready to be graded again (the re-grade, ``regrade:<sha256>``)."""

from __future__ import annotations

from typing import Any

from engine.bundle.content import Bundle, Implementation
from engine.imports.records import (
    AttemptRecord,
    GradedRecord,
    create_imported_experiment,
    write_attempt,
    write_comparisons,
)
from engine.plan import ComparisonSpec
from storage import writes

_COPIED = ("task_hash", "skill_hash", "tries", "unsafe_no_jail", "stop_reason")
_RESULTS = (
    "state",
    "outcome",
    "reason",
    "speedup",
    "impl_median_ms",
    "eager_median_ms",
    "error",
    "started_at",
    "ended_at",
)


def latest_finals(bundle: Bundle) -> dict[int, Implementation]:
    """Each attempt's last final evaluation in the bundle (its outcome came from it)."""
    out: dict[int, Implementation] = {}
    for impl in bundle.implementations:
        if impl.purpose != "final":
            continue
        held = out.get(impl.attempt_id)
        if held is None or (impl.try_number, impl.n) >= (held.try_number, held.n):
            out[impl.attempt_id] = impl
    return out


def _latest_skill(bundle: Bundle, attempt_id: int) -> str | None:
    own = [s for s in bundle.skills.values() if s.get("attempt_id") == attempt_id]
    return max(own, key=lambda s: int(s["id"]))["text"] if own else None


def _record(
    bundle: Bundle, row: dict[str, Any], graded: list[GradedRecord], final: Implementation | None
) -> AttemptRecord:
    rec = AttemptRecord(
        model=row["model"],
        problem_id=row["problem_id"],
        family=row.get("family") or "",
        arm=row["arm"],
        replicate=int(row["replicate"]),
        state=row["state"],
        round=int(row.get("round") or 0),
        variant=row.get("variant") or "",
        key=row["plan_key"],
        tokens_in=int(row.get("tokens_in") or 0),
        tokens_out=int(row.get("tokens_out") or 0),
        cost_usd=float(row.get("cost_usd") or 0.0),
        agent_seconds=float(row.get("agent_seconds") or 0.0),
        budget_s=row.get("budget_s"),
        skill=_latest_skill(bundle, int(row["id"])),
        final_source=final.source if final else None,
        graded=graded,
        extra={k: row[k] for k in _COPIED if k in row},
    )
    for name in _RESULTS:
        setattr(rec, name, row.get(name))
    return rec


def _graded(impls: list[Implementation], *, with_feedback: bool, backend: str) -> list[Any]:
    return [
        GradedRecord(
            purpose=i.purpose,
            n=i.n,
            source=i.source,
            try_number=i.try_number,
            feedback=i.feedback if with_feedback else None,
            backend=backend,
        )
        for i in impls
    ]


def restore(
    db: Any,
    bundle: Bundle,
    experiment_id: str,
    *,
    origin: str,
    name: str,
    regrade: bool,
    skip_problems: set[str] = frozenset(),  # type: ignore[assignment]
    gpu: str | None = None,
) -> dict[int, int]:
    """Write the bundle's experiment as ``experiment_id``; returns bundle attempt id → new id.

    ``regrade``: implementations are recorded ungraded and their attempts queued (an attempt
    with nothing to grade keeps its result); attempts on ``skip_problems`` are interrupted;
    ``gpu`` is then this host's grading target.
    """
    create_imported_experiment(
        db,
        experiment_id,
        name,
        origin,
        preview=bool(bundle.experiment.get("preview")) and not regrade,
        grading_backend="local" if regrade else str(bundle.experiment.get("grading_backend")),
        gpu=gpu if regrade else bundle.experiment.get("gpu"),
    )
    finals = latest_finals(bundle)
    ids: dict[int, int] = {}
    backend = f"{bundle.experiment.get('grading_backend')} (bundle)"
    for row in bundle.attempts:
        aid = int(row["id"])
        impls = [i for i in bundle.implementations if i.attempt_id == aid]
        skipped = row["problem_id"] in skip_problems
        graded = (
            []
            if regrade and skipped
            else _graded(impls, with_feedback=not regrade, backend=backend)
        )
        rec = _record(bundle, row, graded, finals.get(aid))
        if regrade and skipped:
            rec.state, rec.outcome, rec.speedup = "interrupted", None, None
            rec.error = "not re-graded: this catalog's problem source differs from the bundle's"
        elif regrade and aid in finals:
            rec.state, rec.outcome, rec.reason, rec.speedup = "queued", None, None, None
            rec.impl_median_ms = rec.eager_median_ms = None
        ids[aid] = write_attempt(db, experiment_id, rec)
    _link(db, bundle, ids)
    _interventions(db, bundle, experiment_id, ids)
    write_comparisons(db, experiment_id, comparison_specs(bundle))
    if regrade:
        writes.set_experiment_state(db, experiment_id, "running")
    return ids


def _link(db: Any, bundle: Bundle, ids: dict[int, int]) -> None:
    """Sources and attached skills of treatments, mapped onto the new attempts."""
    for row in bundle.attempts:
        source = row.get("source_attempt_id")
        if source is None or int(source) not in ids:
            continue
        skill_id = None
        attached = bundle.skills.get(int(row["attached_skill_id"] or -1))
        if attached is not None and attached.get("attempt_id") in ids:
            found = db.execute(
                "SELECT id FROM skills WHERE attempt_id=? ORDER BY id DESC LIMIT 1",
                [ids[attached["attempt_id"]]],
            ).fetchone()
            skill_id = int(found[0]) if found else None
        elif attached is not None:  # an edited skill, not an attempt's
            skill_id = writes.add_skill(
                db,
                attached["text"],
                kind=attached.get("kind", "edited"),
                author=attached.get("author") or "bundle",
            )
        writes.update_attempt(
            db, ids[int(row["id"])], source_attempt_id=ids[int(source)], attached_skill_id=skill_id
        )


def _interventions(db: Any, bundle: Bundle, experiment_id: str, ids: dict[int, int]) -> None:
    """The bundle's notes, exclusions and interventions, on the new attempts; a command the
    exporting store had not answered yet is recorded refused (no engine here applies it)."""
    for c in bundle.interventions:
        attempt = c.get("attempt_id")
        if attempt is not None and int(attempt) not in ids:
            continue
        state = c.get("state") or "refused"
        ended = state not in ("pending", "applying")
        db.execute(
            "INSERT INTO control_commands (experiment_id, attempt_id, action, args_json, "
            "reason, actor, state, outcome, created_at, applied_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                experiment_id,
                ids[int(attempt)] if attempt is not None else None,
                c.get("action"),
                c.get("args_json") or "{}",
                c.get("reason") or "",
                c.get("actor") or "bundle",
                state if ended else "refused",
                c.get("outcome") if ended else "not applied before the bundle was exported",
                c.get("created_at"),
                c.get("applied_at"),
            ],
        )


def comparison_specs(bundle: Bundle) -> list[ComparisonSpec]:
    """The bundle's comparisons, with attempts named by their plan keys."""
    keys = {int(a["id"]): str(a["plan_key"]) for a in bundle.attempts}
    specs: list[ComparisonSpec] = []
    for c in bundle.comparisons:
        members = [c.get(f"{role}_attempt_id") for role in ("source", "baseline", "treatment")]
        if any(m is None or int(m) not in keys for m in members):
            continue
        src, base, treat = (keys[int(m)] for m in members)  # type: ignore[arg-type]
        specs.append(
            ComparisonSpec(
                c["model"],
                c["problem_id"],
                c.get("family") or "",
                c["direction"],
                int(c["replicate"]),
                int(c["round"]),
                c.get("variant") or "",
                src,
                base,
                treat,
            )
        )
    return specs
