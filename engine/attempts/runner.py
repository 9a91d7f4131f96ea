"""Run one attempt: build the variant, run Terminus-2 in a Harbor Trial, serve the mailbox,
collect the skill and implementation, and evaluate the implementation afresh.

Retries follow the attempt's :class:`~engine.retry.RetryPolicy` (``spec.retry``) and cover
transient infrastructure failures only:
an execution retry restarts the agent in a fresh sandbox with the full budget and submission
allowance (every try keeps its own trial folder and its events stay recorded); a
final-evaluation retry re-grades the collected implementation only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before Harbor loads litellm
os.environ.setdefault("HARBOR_TELEMETRY", "0")

from engine.attempts.mailbox import Collected, EventSink  # noqa: E402
from engine.attempts.observer import AttemptObserver  # noqa: E402
from engine.attempts.spec import (  # noqa: E402
    AttemptId,
    AttemptOutcome,
    AttemptSpec,
    ModelEndpoint,
    ModelEndpointError,
)
from engine.attempts.trial import (  # noqa: E402
    TryReport,
    environment_config,
    environment_kwargs,
    run_try,
)
from engine.grading.api import Feedback, GradeRequest, GradingBackend  # noqa: E402
from engine.tasks.builder import build_task  # noqa: E402

__all__ = ["direct_endpoint", "environment_config", "environment_kwargs", "run_attempt"]


@contextlib.asynccontextmanager
async def direct_endpoint(spec: AttemptSpec) -> AsyncIterator[AttemptSpec]:
    """The production model endpoint: the model as the spec names it.

    A ``scenario`` in the model's extras asks for a scripted stand-in model, which only the
    stand-in endpoint serves: pass ``endpoint=engine.standins.scripted_llm.scripted_endpoint``
    to :func:`run_attempt` (the factory does so for ``[[models]] scenario = ...``).
    """
    if "scenario" in spec.model.extra:
        raise ModelEndpointError(
            "a scripted scenario needs the stand-in endpoint "
            "(engine.standins.scripted_llm.scripted_endpoint)"
        )
    yield spec


async def run_attempt(
    spec: AttemptSpec,
    backend: GradingBackend,
    observer: AttemptObserver,
    stop: asyncio.Event | None = None,
    *,
    endpoint: ModelEndpoint | None = None,
) -> AttemptOutcome:
    """Run one attempt to its end (see the module docstring); never raises for attempt faults.

    ``stop`` requests an early stop: the skill and implementation are collected and
    evaluated as at budget expiry. Cancelling the coroutine itself interrupts the attempt
    (no final evaluation) and re-raises after reporting it. ``endpoint`` sets up the model
    for the attempt (default :func:`direct_endpoint`; see ``ModelEndpoint``).
    """
    aid = spec.attempt_id

    async def emit(event: dict[str, Any]) -> None:
        await observer.event(aid, event)

    if spec.skip_reason() is not None:
        outcome = AttemptOutcome(
            aid, "skipped", ended_by="skipped", error="no source skill", retryable=False
        )
        await emit({"kind": "skipped", "message": "the source skill is blank or missing"})
        await observer.attempt_finished(aid, outcome)
        return outcome

    work = Path(spec.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        task = build_task(
            spec.problem_id,
            spec.dsl,
            work / "task",
            budget_s=spec.budget_s,
            max_submissions=spec.max_submissions,
            source_skill=spec.source_skill if spec.is_transfer else None,
            source_dsl=spec.transfer_from,
            name=str(aid),
            gpu=spec.gpu,
        )
    except Exception as exc:  # noqa: BLE001 - a bad spec ends the attempt cleanly
        outcome = AttemptOutcome(
            aid, "failed", ended_by="error", error=f"task build: {exc}", retryable=False
        )
        await emit({"kind": "task_build_failed", "message": str(exc)})
        await observer.attempt_finished(aid, outcome)
        return outcome
    await emit({"kind": "task_built", "path": str(task.path), "hash": task.inputs_sha256})
    try:
        async with (endpoint or direct_endpoint)(spec) as running:
            return await _run_and_evaluate(
                running, task.path, backend, observer, emit, stop, limits=spec
            )
    except ModelEndpointError as exc:
        outcome = AttemptOutcome(
            aid, "failed", ended_by="error", error=f"scenario: {exc}", retryable=False
        )
        await emit({"kind": "scenario_failed", "message": str(exc)})
        await observer.attempt_finished(aid, outcome)
        return outcome


async def _run_and_evaluate(
    spec: AttemptSpec,
    task_path: Path,
    backend: GradingBackend,
    observer: AttemptObserver,
    emit: EventSink,
    stop: asyncio.Event | None,
    *,
    limits: AttemptSpec,
) -> AttemptOutcome:
    """``limits`` is the spec an operator's extend raises (the endpoint may run a copy)."""
    aid = spec.attempt_id
    if not spec.model.model_info:
        await emit(
            {
                "kind": "warning",
                "message": "no model_info for this model: litellm assumes a 1M-token context, "
                "so Terminus-2's summarisation may never trigger",
            }
        )
    reports: list[TryReport] = []
    try:
        for number in spec.retry.execution_tries():
            report = await run_try(
                spec, task_path, number, backend, observer, emit, stop, limits=limits
            )
            reports.append(report)
            if spec.retry.retry_execution(
                number, transient=report.transient, stopped=report.stopped
            ):
                await emit(
                    {
                        "kind": "execution_retry",
                        "try": number,
                        "error_type": report.error_type,
                        "message": report.error or "",
                    }
                )
                continue
            break
    except asyncio.CancelledError:
        outcome = _outcome(aid, reports, "interrupted", "interrupted", None)
        await observer.attempt_finished(aid, outcome)
        raise

    last = reports[-1]
    collected = last.collected
    if not last.valid:  # an infrastructure failure: artifacts kept, nothing evaluated
        outcome = _outcome(aid, reports, "failed", last.ended_by, None)
        outcome.error = f"{last.error_type}: {last.error}"
        await observer.attempt_finished(aid, outcome)
        return outcome

    try:
        final = await _final_evaluation(spec, collected, backend, emit)
    except asyncio.CancelledError:
        outcome = _outcome(aid, reports, "interrupted", last.ended_by, None)
        await observer.attempt_finished(aid, outcome)
        raise
    await emit({"kind": "final_evaluation", "verdict": final.verdict, "reason": final.reason})
    if final.verdict == "error":  # the grader kept failing: retryable later, not a verdict
        outcome = _outcome(aid, reports, "failed", last.ended_by, final)
        outcome.error = f"final evaluation failed: {final.message or final.reason}"
        await observer.attempt_finished(aid, outcome)
        return outcome
    outcome = _outcome(aid, reports, "finished", last.ended_by, final)
    if last.error_type:
        outcome.error = f"{last.error_type}: {last.error}"
    await observer.attempt_finished(aid, outcome)
    return outcome


async def _final_evaluation(
    spec: AttemptSpec, collected: Collected | None, backend: GradingBackend, emit: EventSink
) -> Feedback:
    if collected is None or collected.source is None:
        why = collected.source_problem if collected else "nothing was collected"
        return Feedback(
            verdict="fail",
            reason="no_implementation",
            message=why or "no implementation",
            problem_id=spec.problem_id,
            dsl=spec.dsl,
            request_id=f"{spec.attempt_id}-final",
        )
    request = GradeRequest(
        problem_id=spec.problem_id,
        dsl=spec.dsl,
        source=collected.source,
        device=spec.grading_device,
        request_id=f"{spec.attempt_id}-final",
        purpose="final",
    )
    return await spec.retry.grade(backend, request, emit)


def _outcome(
    aid: AttemptId, reports: list[TryReport], state: str, ended_by: str, final: Feedback | None
) -> AttemptOutcome:
    last = reports[-1] if reports else TryReport(0)
    collected = last.collected
    outcome = AttemptOutcome(
        attempt_id=aid,
        state=state,  # type: ignore[arg-type]
        ended_by=ended_by,
        final_feedback=final,
        skill=collected.skill if collected else None,
        final_source=collected.source if collected else None,
        submissions_used=last.submissions_used,
        tries=len(reports),
        trial_dirs=[r.trial_dir for r in reports if r.trial_dir],
        retryable=False,  # this runner spent the policy's tries itself
    )
    for report in reports:
        res = report.result
        if res is None or res.agent_result is None:
            continue
        ctx = res.agent_result
        outcome.input_tokens += ctx.n_input_tokens or 0
        outcome.output_tokens += ctx.n_output_tokens or 0
        outcome.cache_tokens += ctx.n_cache_tokens or 0
        if ctx.cost_usd:
            outcome.cost_usd = (outcome.cost_usd or 0.0) + ctx.cost_usd
        timing = res.agent_execution
        if timing and timing.started_at and timing.finished_at:
            outcome.agent_seconds += (timing.finished_at - timing.started_at).total_seconds()
    return outcome
