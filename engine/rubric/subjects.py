"""What the annotators label, read from the store: source skills, uptake attempts, harmed
comparisons, and the material (trajectory, implementation, skills) shown for each."""

from __future__ import annotations

from dataclasses import dataclass

from sqlite_utils import Database

from engine.rubric.prompts import UptakeMaterial
from storage import queries
from storage.queries import AttemptRow, ComparisonRow

SKILL_ARMS = ("cute2tirx_skill", "tirx2cute_skill")


def final_source(db: Database, attempt_id: int) -> str:
    row = db.execute("SELECT final_source FROM attempts WHERE id=?", [attempt_id]).fetchone()
    return (row[0] or "") if row else ""


def source_skill_id(db: Database, treatment: AttemptRow | None,
                    source_attempt_id: int | None) -> int | None:
    """The skill a treatment received: its attached skill, else the source's latest skill."""
    if treatment is not None and treatment.attached_skill_id is not None:
        return treatment.attached_skill_id
    if source_attempt_id is None:
        return None
    skill = queries.latest_skill(db, source_attempt_id)
    return skill.id if skill is not None else None


def comparison_skill_id(db: Database, comp: ComparisonRow) -> int | None:
    """The source skill transferred in a comparison (None when skipped or missing)."""
    if comp.skipped:
        return None
    treatment = queries.attempt(db, comp.treatment_attempt_id) if comp.treatment_attempt_id \
        else None
    skill_id = source_skill_id(db, treatment, comp.source_attempt_id)
    if skill_id is None:
        return None
    skill = queries.skill(db, skill_id)
    return skill_id if skill is not None and skill.text.strip() else None


@dataclass(frozen=True)
class Subject:
    """One item to label: its task, subject type and id, and a short description."""

    task: str
    subject_type: str
    subject_id: int
    title: str


def skill_subjects(db: Database, experiment_id: str | None) -> list[Subject]:
    """Every distinct non-blank source skill transferred in the experiment's comparisons."""
    seen: dict[int, Subject] = {}
    for comp in queries.comparisons(db, experiment_id):
        skill_id = comparison_skill_id(db, comp)
        if skill_id is not None and skill_id not in seen:
            title = f"skill {skill_id} ({comp.model} {comp.problem_id} {comp.direction})"
            seen[skill_id] = Subject("skill", "skill", skill_id, title)
    return sorted(seen.values(), key=lambda s: s.subject_id)


def uptake_subjects(db: Database, experiment_id: str | None) -> list[Subject]:
    """Skill-conditioned attempts that ran (not skipped) with a non-blank source skill."""
    out: list[Subject] = []
    for comp in queries.comparisons(db, experiment_id):
        if comp.treatment_attempt_id is None or comparison_skill_id(db, comp) is None:
            continue
        treatment = queries.attempt(db, comp.treatment_attempt_id)
        if treatment is None or treatment.state != "finished":
            continue
        out.append(Subject("uptake", "attempt", treatment.id,
                           f"attempt {treatment.id} ({treatment.model} {treatment.problem_id} "
                           f"{treatment.arm})"))
    return sorted({s.subject_id: s for s in out}.values(), key=lambda s: s.subject_id)


def cause_subjects(db: Database, experiment_id: str | None) -> list[Subject]:
    """Harmed comparisons whose treatment ran with a transferred skill."""
    return [
        Subject("cause", "comparison", c.id,
                f"comparison {c.id} ({c.model} {c.problem_id} {c.direction} r{c.replicate})")
        for c in queries.comparisons(db, experiment_id, resolved_only=True)
        if c.verdict == "harm" and c.treatment_attempt_id is not None and not c.skipped
    ]


def render_trajectory(db: Database, attempt_id: int) -> str:
    parts: list[str] = []
    for step in queries.steps(db, attempt_id, limit=100_000):
        head = f"## step {step.step_index} (try {step.try_number}, {step.source})"
        body = [f"{name}: {text.strip()}" for name, text in (
            ("analysis", step.analysis), ("plan", step.plan), ("keystrokes", step.keystrokes),
            ("output", step.terminal_output), ("message", step.message)) if text.strip()]
        parts.append("\n".join([head, *body]))
    for sub in queries.submissions(db, attempt_id):
        parts.append(f"## {sub.purpose} {sub.n}: verdict {sub.verdict or sub.state}"
                     f"{f' ({sub.reason})' if sub.reason else ''}"
                     f"{f', speedup {sub.speedup:.3g}x' if sub.speedup else ''}")
    return "\n".join(parts) if parts else "(no trajectory recorded)"


def attempt_material(db: Database, attempt_id: int) -> UptakeMaterial:
    attempt = queries.attempt(db, attempt_id)
    if attempt is None:
        raise LookupError(f"no attempt {attempt_id}")
    skill_id = source_skill_id(db, attempt, attempt.source_attempt_id)
    source = queries.skill(db, skill_id) if skill_id is not None else None
    own = queries.latest_skill(db, attempt_id)
    if own is not None and source is not None and own.id == source.id:
        own = None
    return UptakeMaterial(
        source_skill=source.text if source else "",
        trajectory=render_trajectory(db, attempt_id),
        implementation=final_source(db, attempt_id),
        own_skill=own.text if own else "",
    )


def describe_attempt(row: AttemptRow | None) -> str:
    if row is None:
        return "(missing)"
    speed = f", speedup {row.speedup:.3g}x" if row.speedup else ""
    return (f"attempt {row.id} {row.arm} ({row.dsl}): state {row.state}, outcome "
            f"{row.outcome or '-'}{f' ({row.reason})' if row.reason else ''}{speed}, "
            f"implementation median {row.impl_median_ms} ms")


def comparison_summary(db: Database, comp: ComparisonRow) -> tuple[str, str]:
    """(summary line, baseline description) for a cause prompt."""
    treatment = (queries.attempt(db, comp.treatment_attempt_id)
                 if comp.treatment_attempt_id is not None else None)
    summary = (f"model {comp.model}, problem {comp.problem_id} ({comp.family}), direction "
               f"{comp.direction}, paired ratio rho={comp.rho} (verdict {comp.verdict}); "
               f"treatment: {describe_attempt(treatment)}")
    baseline = describe_attempt(queries.attempt(db, comp.baseline_attempt_id)
                                if comp.baseline_attempt_id else None)
    return summary, baseline
