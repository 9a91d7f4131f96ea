"""Run one attempt: build the variant, run Terminus-2 in a Harbor Trial, serve the mailbox,
collect the skill and implementation, and evaluate the implementation afresh.

Retries (up to ``spec.max_tries`` per phase) cover transient infrastructure failures only:
an execution retry restarts the agent in a fresh sandbox with the full budget and submission
allowance (every try keeps its own trial folder and its events stay recorded); a
final-evaluation retry re-grades the collected implementation only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HARBOR_TELEMETRY", "0")

from harbor import Trial, TrialConfig  # noqa: E402
from harbor.models.trial.config import (  # noqa: E402
    AgentConfig,
    EnvironmentConfig,
    TaskConfig,
    VerifierConfig,
)
from harbor.models.trial.result import TrialResult  # noqa: E402
from harbor.trial.hooks import TrialEvent, TrialHookEvent  # noqa: E402

from engine.attempts.agent import register_channel, unregister_channel  # noqa: E402
from engine.attempts.mailbox import (  # noqa: E402
    Collected,
    EventSink,
    Mailbox,
    grade_with_retries,
)
from engine.attempts.observer import AttemptObserver  # noqa: E402
from engine.attempts.spec import (  # noqa: E402
    LOCAL_NS_ENVIRONMENT,
    AttemptOutcome,
    AttemptSpec,
    ModelEndpoint,
    ModelEndpointError,
)
from engine.grading.api import Feedback, GradeRequest, GradingBackend  # noqa: E402
from engine.sandbox.venvs import venv_bin  # noqa: E402
from engine.tasks.builder import build_task  # noqa: E402

AGENT_IMPORT_PATH = "engine.attempts.agent:ObservedTerminus2"
FATAL_ERRORS = {"SandboxUnavailableError", "AgentAuthenticationError", "AuthenticationError"}
NORMAL_END_ERRORS = {"AgentTimeoutError"}


@dataclass
class TryReport:
    """What one execution try produced."""

    number: int
    result: TrialResult | None = None
    collected: Collected | None = None
    submissions_used: int = 0
    stopped: bool = False
    error_type: str | None = None
    error: str | None = None
    transient: bool = False
    valid: bool = False
    ended_by: str = ""
    trial_dir: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def classify(
    result: TrialResult | None, stopped: bool
) -> tuple[str, bool, bool, str | None, str | None]:
    """(ended_by, transient, valid, error_type, error) for a finished trial.

    ``valid``: the try measured the agent (normal end, budget expiry, stop, or a failure
    Harbor attributes to the agent itself); invalid tries are infrastructure failures,
    retried when ``transient``.
    """
    if stopped:
        return "stop", False, True, None, None
    if result is None:
        return "error", True, False, "NoResult", "the trial returned no result"
    info = result.exception_info
    if info is None:
        completed = _last_agent_step_completed(result)
        return ("task_complete" if completed else "shell_exited"), False, True, None, None
    name = info.exception_type
    if name in NORMAL_END_ERRORS:
        return "budget", False, True, None, None
    message = info.exception_message
    if name in FATAL_ERRORS:
        return "error", False, False, name, message
    policy = info.policy
    valid = policy.cause.value.startswith("agent_")
    return "error", policy.retry and not valid, valid, name, message


def _last_agent_step_completed(result: TrialResult) -> bool:
    """Whether the agent confirmed task completion (vs. its shell ending under it)."""
    meta = (result.agent_result.metadata or {}) if result.agent_result else {}
    return bool(meta.get("mkb_task_complete"))


def environment_kwargs(spec: AttemptSpec) -> dict[str, Any]:
    """The sandbox kwargs; the local sandbox gets the DSL's prepared venv when one exists."""
    kwargs = dict(spec.environment_kwargs)
    if _environment_target(spec) == LOCAL_NS_ENVIRONMENT and "python_bin" not in kwargs:
        prepared = venv_bin(spec.dsl)
        if prepared is not None:
            kwargs["python_bin"] = str(prepared)
    return kwargs


def _environment_target(spec: AttemptSpec) -> str:
    target = spec.environment_import_path
    return LOCAL_NS_ENVIRONMENT if target in ("local", "local-ns", "") else target


def environment_config(spec: AttemptSpec) -> EnvironmentConfig:
    """An import path (``module:Class``) or a Harbor environment type (``docker``, ``modal``…)."""
    target = _environment_target(spec)
    if ":" in target:
        return EnvironmentConfig(import_path=target, kwargs=environment_kwargs(spec))
    return EnvironmentConfig(type=target, kwargs=dict(spec.environment_kwargs))


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


def _model_kwargs(spec: AttemptSpec, channel: str) -> dict[str, Any]:
    model = spec.model
    kwargs: dict[str, Any] = {"channel": channel, "record_terminal_session": False}
    if model.api_base:
        kwargs["api_base"] = model.api_base
    if model.model_info:
        kwargs["model_info"] = model.model_info
    if model.temperature is not None:
        kwargs["temperature"] = model.temperature
    kwargs.update(model.extra)
    return kwargs


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

    if spec.is_transfer and not (spec.source_skill or "").strip():
        outcome = AttemptOutcome(aid, "skipped", ended_by="skipped", error="no source skill")
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
            name=aid,
        )
    except Exception as exc:  # noqa: BLE001 - a bad spec ends the attempt cleanly
        outcome = AttemptOutcome(aid, "failed", ended_by="error", error=f"task build: {exc}")
        await emit({"kind": "task_build_failed", "message": str(exc)})
        await observer.attempt_finished(aid, outcome)
        return outcome
    await emit({"kind": "task_built", "path": str(task.path), "hash": task.inputs_sha256})
    try:
        async with (endpoint or direct_endpoint)(spec) as running:
            return await _run_and_evaluate(running, task.path, backend, observer, emit, stop)
    except ModelEndpointError as exc:
        outcome = AttemptOutcome(aid, "failed", ended_by="error", error=f"scenario: {exc}")
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
) -> AttemptOutcome:
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
        for number in range(1, spec.max_tries + 1):
            report = await _run_try(spec, task_path, number, backend, observer, emit, stop)
            reports.append(report)
            if report.transient and number < spec.max_tries and not report.stopped:
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
    spec: AttemptSpec, collected: Collected | None, backend: GradingBackend, emit
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
    return await grade_with_retries(backend, request, spec.max_tries, emit)


def _outcome(
    aid: str, reports: list[TryReport], state: str, ended_by: str, final: Feedback | None
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


async def _run_try(
    spec: AttemptSpec,
    task_path: Path,
    number: int,
    backend: GradingBackend,
    observer: AttemptObserver,
    emit,
    stop: asyncio.Event | None,
) -> TryReport:
    aid = spec.attempt_id
    report = TryReport(number)
    channel = f"{aid}#try{number}"
    trials_dir = Path(spec.work_dir) / "trials"
    trial_name = f"{aid}-try{number}"
    rerun = 1
    while (trials_dir / trial_name).exists():  # never overwrite an earlier run's trial
        rerun += 1
        trial_name = f"{aid}-try{number}-run{rerun}"
    report.trial_dir = str(trials_dir / trial_name)
    completed = {"flag": False}

    async def sink(step: dict[str, Any]) -> None:
        if step.get("source") == "agent":  # did the latest turn confirm completion?
            calls = step.get("tool_calls") or []
            completed["flag"] = any(c.get("function_name") == "mark_task_complete" for c in calls)
        await observer.step_recorded(aid, {**step, "attempt_try": number})

    register_channel(channel, sink)
    config = TrialConfig(
        task=TaskConfig(path=task_path),
        trials_dir=trials_dir,
        trial_name=trial_name,
        agent=AgentConfig(
            import_path=AGENT_IMPORT_PATH,
            model_name=spec.model.name,
            model_api_key_name=spec.model.api_key_env,
            kwargs=_model_kwargs(spec, channel),
            override_timeout_sec=float(spec.budget_s),
        ),
        environment=environment_config(spec),
        verifier=VerifierConfig(disable=True),
    )
    state: dict[str, Any] = {"mailbox": None, "pump": None, "collected": None}

    async def stop_pump() -> None:
        pump = state["pump"]
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            state["pump"] = None

    async def collect() -> None:
        mailbox: Mailbox | None = state["mailbox"]
        if mailbox is None or state["collected"] is not None:
            return
        await stop_pump()
        with contextlib.suppress(Exception):
            await mailbox.report_unprocessed()
        try:
            state["collected"] = await mailbox.collect()
        except Exception as exc:  # noqa: BLE001 - a dead sandbox leaves nothing to collect
            await emit({"kind": "collect_failed", "try": number, "message": str(exc)})

    async def on_agent_start(event: TrialHookEvent) -> None:
        mailbox = Mailbox(
            trial.agent_environment,
            attempt_id=aid,
            problem_id=spec.problem_id,
            dsl=spec.dsl,
            backend=backend,
            observer=observer,
            emit=emit,
            max_submissions=spec.max_submissions,
            grading_device=spec.grading_device,
            grading_tries=spec.max_tries,
            poll_interval_s=spec.poll_interval_s,
        )
        await mailbox.prepare()
        state["mailbox"] = mailbox
        state["pump"] = asyncio.create_task(mailbox.run())
        await emit({"kind": "agent_started", "try": number, "trial": trial_name})

    async def on_agent_end(event: TrialHookEvent) -> None:
        await collect()

    await emit({"kind": "try_started", "try": number, "trial": trial_name})
    started = time.monotonic()
    try:
        try:
            trial = await Trial.create(config)
        except Exception as exc:  # noqa: BLE001 - e.g. the sandbox class refuses the host
            report.error_type, report.error = type(exc).__name__, str(exc)
            report.transient = report.error_type not in FATAL_ERRORS
            report.ended_by = "error"
            await emit(_try_end_event(report, time.monotonic() - started))
            return report
        trial.add_hook(TrialEvent.AGENT_START, on_agent_start)
        trial.add_hook(TrialEvent.AGENT_END, on_agent_end)
        run = asyncio.create_task(trial.run())
        waiter = asyncio.create_task(stop.wait()) if stop is not None else None
        try:
            pending = {run} | ({waiter} if waiter else set())
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if waiter is not None and waiter in done and not run.done():
                report.stopped = True
                await emit({"kind": "stop_requested", "try": number})
                await collect()
                run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                report.result = await run
        except asyncio.CancelledError:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            raise
        finally:
            if waiter is not None:
                waiter.cancel()
            await stop_pump()
            if state["mailbox"] is not None:
                state["mailbox"].close()
        mailbox = state["mailbox"]
        report.submissions_used = mailbox.used if mailbox else 0
        report.collected = state["collected"]
        result = report.result
        if result is not None and result.agent_result is not None:
            meta = dict(result.agent_result.metadata or {})
            meta["mkb_task_complete"] = completed["flag"]
            result.agent_result.metadata = meta
        ended_by, transient, valid, etype, error = classify(result, report.stopped)
        report.ended_by, report.transient, report.valid = ended_by, transient, valid
        report.error_type, report.error = etype, error
        if ended_by == "shell_exited":
            await emit(
                {
                    "kind": "shell_exited",
                    "try": number,
                    "message": "the agent's terminal session ended before it marked the task "
                    "complete; collected files are evaluated",
                }
            )
        await emit(_try_end_event(report, time.monotonic() - started))
        return report
    finally:
        unregister_channel(channel)


def _try_end_event(report: TryReport, seconds: float) -> dict[str, Any]:
    return {
        "kind": "try_finished",
        "try": report.number,
        "ended_by": report.ended_by,
        "transient": report.transient,
        "valid": report.valid,
        "error_type": report.error_type,
        "message": report.error or "",
        "seconds": round(seconds, 3),
        "submissions_used": report.submissions_used,
    }
