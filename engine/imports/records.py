"""An experiment written into the store from records made elsewhere: a bundle, a public
MetaKernelBench run, a Harbor job.

Importers turn what they read into :class:`AttemptRecord` values; :func:`write_attempt`
writes one through the store's own write functions (attempt, collected skill, trajectory
steps, graded submissions with their grading job), so an imported experiment is read by the
analysis and the TUI like a run of this store. Plan keys are the planner's
(:func:`engine.plan.node_key`), so comparisons are recomputed by :mod:`engine.comparisons`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.comparisons import compute
from engine.plan import DIRECTION_ARM, SOLO, ComparisonSpec, node_key
from storage import provenance, writes

ARM_DSL = {
    "solo_cute": "cute",
    "solo_tirx": "tirx",
    "cute2tirx_skill": "tirx",
    "tirx2cute_skill": "cute",
}
ARM_SOURCE = {"cute2tirx_skill": "solo_cute", "tirx2cute_skill": "solo_tirx"}


@dataclass
class GradedRecord:
    """One graded implementation: a submission (``n`` from 1) or a final evaluation."""

    purpose: str  # "submission" | "final"
    n: int
    source: str
    feedback: dict[str, Any] | None  # None: recorded but never graded
    try_number: int = 1
    backend: str = "import"


@dataclass
class AttemptRecord:
    """One attempt as an importer read it; ``state``/``outcome`` use the store's enums."""

    model: str
    problem_id: str
    family: str
    arm: str
    replicate: int
    state: str
    outcome: str | None = None
    reason: str | None = None
    speedup: float | None = None
    impl_median_ms: float | None = None
    eager_median_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    agent_seconds: float = 0.0
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    final_source: str | None = None
    budget_s: float | None = None
    round: int | None = None  # default: 0 for a solo arm, 1 for a treatment
    variant: str = ""
    skill: str | None = None  # the attempt's own SKILL.md
    steps: list[dict[str, Any]] = field(default_factory=list)  # trajectory_steps columns
    graded: list[GradedRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # attempt columns copied as they are
    key: str | None = None  # the plan key, when the record carries one (a bundle's)

    @property
    def dsl(self) -> str:
        return ARM_DSL[self.arm]

    @property
    def plan_key(self) -> str:
        if self.key:
            return self.key
        return node_key(
            self.model,
            self.problem_id,
            self.replicate,
            self.arm,
            self.effective_round,
            self.variant,
        )

    @property
    def effective_round(self) -> int:
        if self.round is not None:
            return self.round
        return 0 if self.arm.startswith("solo") else 1


def create_imported_experiment(
    db: Any,
    experiment_id: str,
    name: str,
    origin: str,
    *,
    preview: bool = False,
    config_toml: str = "",
    grading_backend: str = "import",
    gpu: str | None = None,
) -> None:
    """The experiment row, labelled with its origin, and marked finished; ``gpu`` the
    grading target it was graded on, where the records say (``problems/targets.py``)."""
    target = {"gpu": gpu} if gpu else {}
    writes.create_experiment(
        db,
        experiment_id,
        name,
        config_toml=config_toml,
        preview=preview,
        grading_backend=grading_backend,
        **target,
    )
    provenance.set_origin(db, experiment_id, origin)
    writes.set_experiment_state(db, experiment_id, "finished")


def _attempt_fields(rec: AttemptRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "state": rec.state,
        "outcome": rec.outcome,
        "reason": rec.reason,
        "speedup": rec.speedup,
        "impl_median_ms": rec.impl_median_ms,
        "eager_median_ms": rec.eager_median_ms,
        "tokens_in": rec.tokens_in,
        "tokens_out": rec.tokens_out,
        "cost_usd": rec.cost_usd,
        "agent_seconds": rec.agent_seconds,
        "error": rec.error,
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "final_source": rec.final_source,
    }
    if rec.budget_s is not None:
        fields["budget_s"] = rec.budget_s
    fields.update(rec.extra)
    return fields


def write_graded(db: Any, attempt_id: int, graded: GradedRecord) -> int:
    """A submission row and, when it was graded, one finished grading job carrying its
    feedback (the store's own path: :func:`storage.writes.finish_grading_job`)."""
    sub_id = writes.add_submission(
        db,
        attempt_id,
        graded.n,
        graded.source,
        purpose=graded.purpose,
        try_number=graded.try_number,
    )
    if graded.feedback is not None:
        state = db.execute("SELECT state FROM submissions WHERE id=?", [sub_id]).fetchone()[0]
        if state != "done":
            job_id = writes.start_grading_job(db, sub_id, graded.backend)
            writes.finish_grading_job(db, job_id, graded.feedback)
    return sub_id


def write_attempt(db: Any, experiment_id: str, rec: AttemptRecord) -> int:
    """Write one attempt with its skill, steps and graded implementations; returns its id."""
    attempt_id = writes.ensure_attempt(
        db,
        experiment_id,
        rec.plan_key,
        model=rec.model,
        problem_id=rec.problem_id,
        family=rec.family,
        dsl=rec.dsl,
        arm=rec.arm,
        replicate=rec.replicate,
        round=rec.effective_round,
        variant=rec.variant,
    )
    if rec.skill is not None and rec.skill.strip():
        writes.add_skill(db, rec.skill, attempt_id=attempt_id)
    for index, step in enumerate(rec.steps, start=1):
        writes.add_step(db, attempt_id, int(step.pop("step_index", index)), **step)
    for graded in rec.graded:
        write_graded(db, attempt_id, graded)
    writes.update_attempt(db, attempt_id, **_attempt_fields(rec))
    return attempt_id


def _attempt_ids(db: Any, experiment_id: str) -> dict[str, int]:
    return {
        str(key): int(aid)
        for aid, key in db.execute(
            "SELECT id, plan_key FROM attempts WHERE experiment_id=?", [experiment_id]
        ).fetchall()
    }


def link_treatments(db: Any, experiment_id: str) -> None:
    """Each treatment's source attempt and the skill attached to it (the source's latest)."""
    ids = _attempt_ids(db, experiment_id)
    rows = db.execute(
        "SELECT id, model, problem_id, replicate, arm FROM attempts WHERE experiment_id=? "
        "AND variant='' AND arm IN ('cute2tirx_skill', 'tirx2cute_skill')",
        [experiment_id],
    ).fetchall()
    for aid, model, pid, rep, arm in rows:
        source_id = ids.get(node_key(model, pid, rep, ARM_SOURCE[arm]))
        if source_id is None:
            continue
        skill = db.execute(
            "SELECT id FROM skills WHERE attempt_id=? ORDER BY id DESC LIMIT 1", [source_id]
        ).fetchone()
        writes.update_attempt(
            db,
            int(aid),
            source_attempt_id=source_id,
            attached_skill_id=int(skill[0]) if skill else None,
        )


def paper_comparisons(db: Any, experiment_id: str) -> list[ComparisonSpec]:
    """The paper's comparisons (both directions, round 1) among the experiment's attempts."""
    keys = set(_attempt_ids(db, experiment_id))
    specs: list[ComparisonSpec] = []
    for model, pid, family, rep in db.execute(
        "SELECT DISTINCT model, problem_id, family, replicate FROM attempts "
        "WHERE experiment_id=? AND variant='' ORDER BY model, problem_id, replicate",
        [experiment_id],
    ).fetchall():
        for direction, arm in DIRECTION_ARM.items():
            src, tgt = direction.split("->")
            spec = ComparisonSpec(
                model,
                pid,
                family,
                direction,
                int(rep),
                1,
                "",
                node_key(model, pid, rep, SOLO[src]),
                node_key(model, pid, rep, SOLO[tgt]),
                node_key(model, pid, rep, arm),
            )
            if {spec.source_key, spec.baseline_key, spec.treatment_key} <= keys:
                specs.append(spec)
    return specs


def write_comparisons(db: Any, experiment_id: str, specs: list[ComparisonSpec]) -> int:
    """Compute every comparison (:func:`engine.comparisons.compute`); returns how many."""
    ids = _attempt_ids(db, experiment_id)
    for spec in specs:
        compute(db, experiment_id, spec, ids)
    return len(specs)
