"""Attempt outcomes as the analysis sees them, from a JSON-lines file or the store.

One row per attempt::

    {"model", "problem", "family", "dsl": "cute"|"tirx", "arm": "solo"|"skill",
     "replicate": int, "passed": bool, "runtime_ms": float|null,
     "ref_runtime_ms": float|null, "skill_blank": bool}

For a ``skill`` row, ``dsl`` is the target DSL. ``skill_blank`` is meaningful on solo rows: a
missing or blank skill makes the reverse-direction treatment skipped. Optional keys:
``flags`` (list of strings, for exclusion rules), ``sol_ms`` (the problem's speed of light on
the grading GPU), ``tokens``, ``cost_usd``, ``agent_seconds``, ``runtime_repeats_ms`` (the
passing runtimes of repeated final gradings, whose median is ``runtime_ms``), ``host`` (the
grading host, for the noise bands: docs/analysis.md) and the GPU span time source
(``span_ms``, ``ref_span_ms``, ``span_repeats_ms``: the runners' per-call GPU spans of the
implementation and the eager reference, read by ``mkb analyze --time span``). From the store,
``flags`` and ``sol_ms`` come from each attempt's final evaluation (e.g.
``sol.faster_than_sol``); spans only when asked for (``from_store(..., time="span")``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.analysis.noise import Series
from engine.analysis.scored import ScoredAttempt as ScoredAttempt
from engine.grading.admission import runtime_defect

DSLS = ("cute", "tirx")
DIRECTIONS = ("cute->tirx", "tirx->cute")


class OutcomeError(ValueError):
    """A malformed outcome row; the message names the line."""


@dataclass
class OutcomeSet:
    rows: list[ScoredAttempt] = field(default_factory=list)
    preview: bool = False  # computed from CPU preview verdicts: label every table PREVIEW
    experiment_id: str | None = None  # set when read from the store
    experiment_name: str | None = None
    gpu: str | None = None  # the grading GPU, e.g. "NVIDIA B200 (Blackwell, sm_100a)"
    series: list[Series] | None = None  # stored A/A series (None: from the rows' repeats)
    time: str = "e2e"  # the runtime figure the rows carry (engine.analysis.noise.TIME_SOURCES)
    # attempts left out as no result, by reason: ungraded (the grader failed: ``infra.*``) or
    # a pass without a finite positive runtime (``timing.invalid``); never counted as failures
    ungraded: dict[str, int] = field(default_factory=dict)
    # passing repeated gradings left out of medians and bands, by reason (``timing.invalid``)
    excluded_repeats: dict[str, int] = field(default_factory=dict)
    excluded: list[dict[str, Any]] = field(default_factory=list)  # left out by an operator


def _number(value: Any, where: str, key: str, *, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OutcomeError(f"{where}: {key} must be a number{' or null' if allow_none else ''}")
    if not math.isfinite(value) or value <= 0:
        raise OutcomeError(f"{where}: {key} must be a positive finite number")
    return float(value)


def parse_row(data: Any, where: str) -> ScoredAttempt:
    """Validate one JSON object into an :class:`ScoredAttempt`."""
    if not isinstance(data, dict):
        raise OutcomeError(f"{where}: expected a JSON object")
    for key in ("model", "problem", "dsl", "arm", "replicate", "passed"):
        if key not in data:
            raise OutcomeError(f"{where}: missing key {key!r}")
    for key in ("model", "problem"):
        if not isinstance(data[key], str) or not data[key]:
            raise OutcomeError(f"{where}: {key} must be a non-empty string")
    if data["dsl"] not in DSLS:
        raise OutcomeError(f"{where}: dsl must be 'cute' or 'tirx'")
    if data["arm"] not in ("solo", "skill"):
        raise OutcomeError(f"{where}: arm must be 'solo' or 'skill'")
    rep = data["replicate"]
    if isinstance(rep, bool) or not isinstance(rep, int):
        raise OutcomeError(f"{where}: replicate must be an integer")
    if not isinstance(data["passed"], bool):
        raise OutcomeError(f"{where}: passed must be true or false")
    runtime = _number(data.get("runtime_ms"), where, "runtime_ms")
    ref = _number(data.get("ref_runtime_ms"), where, "ref_runtime_ms")
    if data["passed"] and runtime is None:
        raise OutcomeError(f"{where}: a passing attempt needs runtime_ms")
    blank = data.get("skill_blank", False)
    if not isinstance(blank, bool):
        raise OutcomeError(f"{where}: skill_blank must be true or false")
    flags = data.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise OutcomeError(f"{where}: flags must be a list of strings")
    repeats = data.get("runtime_repeats_ms", [])
    if not isinstance(repeats, list):
        raise OutcomeError(f"{where}: runtime_repeats_ms must be a list of numbers")
    span_repeats = data.get("span_repeats_ms", [])
    if not isinstance(span_repeats, list):
        raise OutcomeError(f"{where}: span_repeats_ms must be a list of numbers")
    host = data.get("host", "")
    if not isinstance(host, str):
        raise OutcomeError(f"{where}: host must be a string")
    return ScoredAttempt(
        model=data["model"],
        problem=data["problem"],
        family=str(data.get("family") or "unknown"),
        dsl=data["dsl"],
        arm=data["arm"],
        replicate=rep,
        passed=data["passed"],
        runtime_ms=runtime,
        ref_runtime_ms=ref,
        skill_blank=blank,
        flags=tuple(flags),
        sol_ms=_number(data.get("sol_ms"), where, "sol_ms"),
        tokens=int(data.get("tokens") or 0),
        cost_usd=float(data.get("cost_usd") or 0.0),
        agent_seconds=float(data.get("agent_seconds") or 0.0),
        repeats_ms=tuple(
            float(_number(v, where, "runtime_repeats_ms[]", allow_none=False) or 0.0)
            for v in repeats
        ),
        host=host,
        span_ms=_number(data.get("span_ms"), where, "span_ms"),
        ref_span_ms=_number(data.get("ref_span_ms"), where, "ref_span_ms"),
        span_repeats_ms=tuple(
            float(_number(v, where, "span_repeats_ms[]", allow_none=False) or 0.0)
            for v in span_repeats
        ),
    )


def load_jsonl(path: str | Path) -> OutcomeSet:
    """Read an outcomes file; a malformed line raises :class:`OutcomeError` naming it."""
    p = Path(path)
    rows: list[ScoredAttempt] = []
    seen: set[tuple[str, str, str, str, int]] = set()
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise OutcomeError(f"{p}: cannot read: {exc.strerror}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{p}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OutcomeError(f"{where}: not valid JSON ({exc.msg})") from exc
        row = parse_row(data, where)
        key = (row.model, row.problem, row.dsl, row.arm, row.replicate)
        if key in seen:
            raise OutcomeError(f"{where}: duplicate attempt {key}")
        seen.add(key)
        rows.append(row)
    return OutcomeSet(rows)


def from_store(db: Any, experiment_id: str | None = None, time: str = "e2e") -> OutcomeSet:
    """The paper's four arms of an experiment (round 1, no variants) as outcome rows, with
    their repeated finals and the stored A/A series of their problems (``time``: the runtime
    figure, ``engine.analysis.noise.TIME_SOURCES``; ``span`` adds each attempt's GPU spans and
    the span series, ``engine/analysis/spans.py``)."""
    from engine.analysis.noise import check_time_source
    from engine.analysis.noise_store import attach_repeats
    from storage import controls, queries

    check_time_source(time)

    experiments = [e.id for e in queries.experiments(db)]
    if experiment_id is None:
        if not experiments:
            return OutcomeSet([])
        experiment_id = experiments[0]  # the newest
    exp = queries.experiment(db, experiment_id)
    if exp is None:
        raise OutcomeError(f"no experiment {experiment_id!r} in the database")
    rows: list[ScoredAttempt] = []
    attempt_ids: list[int] = []
    ungraded: dict[str, int] = {}
    finals = queries.final_feedback(db, experiment_id)
    unverdicted = queries.unverdicted_finals(db, experiment_id)
    excluded, left_out = controls.exclusions_by_attempt(db, experiment_id), []
    intervened = controls.intervened_attempts(db, experiment_id)
    for a in queries.attempts_for_experiment(db, experiment_id):
        if a.variant or a.round > 1 or a.state not in ("finished", "failed"):
            continue
        if a.id in excluded:  # an operator left it out (mkb attempt exclude), with a reason
            left_out.append({"attempt_id": a.id, "model": a.model, "problem": a.problem_id,
                             "dsl": a.dsl, "arm": a.arm, "replicate": a.replicate,
                             "reason": excluded[a.id]})
            continue
        if (why := no_result(a, unverdicted)) is not None:
            ungraded[why] = ungraded.get(why, 0) + 1
            continue
        final = finals.get(a.id, {})
        flags = final.get("flags") or []
        sol = final.get("sol_ms")
        solo = a.arm.startswith("solo")
        attempt_ids.append(a.id)
        skill = queries.latest_skill(db, a.id)
        blank = skill is None or not skill.text.strip()
        rows.append(ScoredAttempt(
            model=a.model,
            problem=a.problem_id,
            family=a.family or "unknown",
            dsl=a.dsl,
            arm="solo" if solo else "skill",
            replicate=a.replicate,
            passed=a.outcome in ("pass", "preview"),
            runtime_ms=a.impl_median_ms,
            ref_runtime_ms=a.eager_median_ms,
            skill_blank=blank if solo else False,
            tokens=a.tokens_in + a.tokens_out,
            cost_usd=a.cost_usd,
            agent_seconds=a.agent_seconds,
            preview=a.outcome == "preview",
            flags=tuple(str(f) for f in flags) if isinstance(flags, list) else (),
            sol_ms=float(sol) if isinstance(sol, (int, float)) and sol > 0 else None,
            interventions=tuple(intervened.get(a.id, ())),
        ))
    rows, series, dropped = attach_repeats(db, experiment_id, rows, attempt_ids)
    if time == "span":
        from engine.analysis.spans import attach_spans

        rows, series = attach_spans(db, experiment_id, rows, attempt_ids, finals)
    return OutcomeSet(
        rows,
        series=series,
        time=time,
        preview=bool(exp.preview) or any(r.preview for r in rows),
        experiment_id=exp.id,
        experiment_name=exp.name,
        gpu=_gpu_label(exp.gpu),
        ungraded=ungraded,
        excluded_repeats=dropped,
        excluded=left_out,
    )


def no_result(attempt: Any, unverdicted: dict[int, str]) -> str | None:
    """Why a stored attempt is no result (``None``: it is one): ungraded with its reason, a
    ``fail`` whose final never got a verdict or that failed for our infrastructure (stores
    from before ``ungraded`` and m011: named as the engine names them now), or a pass whose
    runtime is not a finite positive number."""
    from engine.attempt_records import LEGACY_INFRASTRUCTURE, failed_reason
    from engine.grading.admission import INFRA_JUDGE_CRASH, INVALID_TIMING, infra_reason

    if attempt.outcome == "ungraded":
        return str(attempt.reason or INFRA_JUDGE_CRASH)
    if attempt.outcome == "fail" and attempt.reason == LEGACY_INFRASTRUCTURE:
        return failed_reason(attempt.error)  # a store from before m011: our failure
    if attempt.id in unverdicted:
        return infra_reason(None, unverdicted[attempt.id])
    if attempt.outcome in ("pass", "preview") and runtime_defect(attempt.impl_median_ms):
        return INVALID_TIMING
    return None


def _gpu_label(key: str) -> str:
    """The stored grading target, described (an unknown key is shown as it is)."""
    from problems.targets import TARGETS

    known = TARGETS.get(key)
    return known.describe() if known else key


def to_jsonl(outcomes: OutcomeSet) -> str:
    """Serialise rows in the ``--outcomes`` format (round-trips through :func:`parse_row`)."""
    lines = []
    for r in outcomes.rows:
        lines.append(json.dumps({
            "model": r.model, "problem": r.problem, "family": r.family, "dsl": r.dsl,
            "arm": r.arm, "replicate": r.replicate, "passed": r.passed,
            "runtime_ms": r.runtime_ms, "ref_runtime_ms": r.ref_runtime_ms,
            "skill_blank": r.skill_blank, "flags": list(r.flags), "tokens": r.tokens,
            "cost_usd": r.cost_usd, "agent_seconds": r.agent_seconds, "sol_ms": r.sol_ms,
            "runtime_repeats_ms": list(r.repeats_ms), "host": r.host,
            "span_ms": r.span_ms, "ref_span_ms": r.ref_span_ms,
            "span_repeats_ms": list(r.span_repeats_ms),
        }))
    return "\n".join(lines) + ("\n" if lines else "")
