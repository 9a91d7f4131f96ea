"""Comparisons as results land: ρ and help/harm/neutral once source, baseline and treatment
are terminal. An arm that is no result (``ungraded``: the grader failed; or a pass without a
valid runtime, from a store written before timings were checked where they enter) leaves its
comparison unresolved: a grader's failure never becomes ρ."""

from __future__ import annotations

from typing import Any

from engine.analysis.paired import ArmResult, rho, verdict
from engine.events import ComparisonUpdated, Publisher
from engine.plan import ComparisonSpec
from storage import queries, writes

TERMINAL = ("finished", "failed", "skipped")


def arm_result(row: queries.AttemptRow) -> ArmResult:
    return ArmResult(row.outcome in ("pass", "preview"), row.impl_median_ms, row.eager_median_ms)


def no_result(row: queries.AttemptRow) -> bool:
    """An arm the grader gave no result for: ungraded, or passing without a valid runtime."""
    result = arm_result(row)
    return row.outcome == "ungraded" or (result.passed and not result.timed)


def comparison_key(spec: ComparisonSpec) -> dict[str, Any]:
    """The columns that identify a comparison row."""
    return {
        "model": spec.model,
        "problem_id": spec.problem_id,
        "family": spec.family,
        "direction": spec.direction,
        "replicate": spec.replicate,
        "round": spec.round,
        "variant": spec.variant,
    }


def compute(db: Any, experiment_id: str, spec: ComparisonSpec, ids: dict[str, int]) -> None:
    """Recompute one comparison from its three attempts' rows."""
    src = queries.attempt(db, ids[spec.source_key])
    base = queries.attempt(db, ids[spec.baseline_key])
    treat = queries.attempt(db, ids[spec.treatment_key])
    assert src and base and treat
    arms = (base,) if treat.state == "skipped" else (base, treat)
    # a treatment skipped because its source is no result (its sandbox failed: no skill to
    # transfer) is our failure, not a blank skill's ρ = 1
    lost_source = treat.state == "skipped" and no_result(src)
    resolved = all(r.state in TERMINAL for r in (src, base, treat)) and not any(
        no_result(r) for r in arms
    ) and not lost_source
    fields: dict[str, Any] = {"resolved": int(resolved), "skipped": int(treat.state == "skipped")}
    if resolved:
        value = rho(arm_result(base), None if treat.state == "skipped" else arm_result(treat))
        fields.update(rho=value, verdict=verdict(value))
    else:
        fields.update(rho=None, verdict=None)
    writes.upsert_comparison(db, experiment_id, **comparison_key(spec), **fields)


async def update(
    publisher: Publisher, experiment_id: str, spec: ComparisonSpec, ids: dict[str, int]
) -> None:
    """Recompute and publish one comparison."""
    await publisher.publish(
        ComparisonUpdated(experiment_id, problem_id=spec.problem_id, direction=spec.direction),
        compute,
        experiment_id,
        spec,
        ids,
    )
