"""One execution try of an attempt: a Harbor trial running Terminus-2 in a sandbox, with the
submission mailbox served while the agent works, and how the try ended (:func:`classify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
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
from engine.attempts.mailbox import Collected, EventSink, Mailbox  # noqa: E402
from engine.attempts.observer import AttemptObserver, ReplyDelta  # noqa: E402
from engine.attempts.spec import LOCAL_NS_ENVIRONMENT, AttemptSpec  # noqa: E402
from engine.grading.api import GradingBackend  # noqa: E402
from engine.sandbox.venvs import venv_bin  # noqa: E402

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


async def run_try(
    spec: AttemptSpec,
    task_path: Path,
    number: int,
    backend: GradingBackend,
    observer: AttemptObserver,
    emit: EventSink,
    stop: asyncio.Event | None,
    *,
    limits: AttemptSpec | None = None,
) -> TryReport:
    """One execution try: a Harbor trial with the mailbox served while the agent runs.

    ``limits`` (default ``spec``) is the spec whose ``max_submissions`` the mailbox reads
    live: the one an operator's extend raises, where the model endpoint runs a copy."""
    run = _TryRun(spec, task_path, number, backend, observer, emit)
    run.limits = limits or spec
    register_channel(run.channel, run.sink, reply=run.reply)
    try:
        return await run.run(stop)
    finally:
        unregister_channel(run.channel)


class _TryRun:
    """The state of one execution try: its trial, mailbox, pump and what it collected."""

    def __init__(
        self,
        spec: AttemptSpec,
        task_path: Path,
        number: int,
        backend: GradingBackend,
        observer: AttemptObserver,
        emit: EventSink,
    ) -> None:
        self.spec, self.task_path, self.number = spec, task_path, number
        self.backend, self.observer, self.emit = backend, observer, emit
        self.report = TryReport(number)
        self.channel = f"{spec.attempt_id}#try{number}"
        self.trials_dir = Path(spec.work_dir) / "trials"
        self.trial_name = _fresh_trial_name(self.trials_dir, f"{spec.attempt_id}-try{number}")
        self.report.trial_dir = str(self.trials_dir / self.trial_name)
        self.completed = False  # the latest agent turn confirmed completion
        self.trial: Trial | None = None
        self.mailbox: Mailbox | None = None
        self.pump: asyncio.Task[None] | None = None
        self.collected: Collected | None = None
        self.limits = spec  # what the mailbox reads its live submission limit from

    async def sink(self, step: dict[str, Any]) -> None:
        if step.get("source") == "agent":  # did the latest turn confirm completion?
            calls = step.get("tool_calls") or []
            self.completed = any(c.get("function_name") == "mark_task_complete" for c in calls)
        step = {**step, "attempt_try": self.number}
        await self.observer.step_recorded(self.spec.attempt_id, step)

    async def reply(self, delta: ReplyDelta) -> None:
        await self.observer.reply_streamed(self.spec.attempt_id, delta)

    def trial_config(self) -> TrialConfig:
        spec = self.spec
        return TrialConfig(
            task=TaskConfig(path=self.task_path),
            trials_dir=self.trials_dir,
            trial_name=self.trial_name,
            agent=AgentConfig(
                import_path=AGENT_IMPORT_PATH,
                model_name=spec.model.name,
                model_api_key_name=spec.model.api_key_env,
                kwargs=_model_kwargs(spec, self.channel),
                override_timeout_sec=float(spec.budget_s),
            ),
            environment=environment_config(spec),
            verifier=VerifierConfig(disable=True),
        )

    async def stop_pump(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
            self.pump = None

    async def collect(self) -> None:
        if self.mailbox is None or self.collected is not None:
            return
        await self.stop_pump()
        with contextlib.suppress(Exception):
            await self.mailbox.report_unprocessed()
        try:
            self.collected = await self.mailbox.collect()
        except Exception as exc:  # noqa: BLE001 - a dead sandbox leaves nothing to collect
            await self.emit({"kind": "collect_failed", "try": self.number, "message": str(exc)})

    async def on_agent_start(self, event: TrialHookEvent) -> None:
        assert self.trial is not None
        spec = self.spec
        mailbox = Mailbox(
            self.trial.agent_environment,
            attempt_id=spec.attempt_id,
            problem_id=spec.problem_id,
            dsl=spec.dsl,
            backend=self.backend,
            observer=self.observer,
            emit=self.emit,
            max_submissions=spec.max_submissions,
            limits=self.limits,
            grading_device=spec.grading_device,
            retry=spec.retry,
            poll_interval_s=spec.poll_interval_s,
        )
        await mailbox.prepare()
        self.mailbox = mailbox
        self.pump = asyncio.create_task(mailbox.run())
        await self.emit({"kind": "agent_started", "try": self.number, "trial": self.trial_name})

    async def on_agent_end(self, event: TrialHookEvent) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # stopped or interrupted: the try's
            await self.stop_pump()  # result is dropped, so reading it back only delays the
            return  # sandbox's teardown (docs/tui.md, "Supervising attempts")
        await self.collect()

    async def run(self, stop: asyncio.Event | None) -> TryReport:
        report = self.report
        await self.emit({"kind": "try_started", "try": self.number, "trial": self.trial_name})
        started = time.monotonic()
        try:
            self.trial = await Trial.create(self.trial_config())
        except Exception as exc:  # noqa: BLE001 - e.g. the sandbox class refuses the host
            report.error_type, report.error = type(exc).__name__, str(exc)
            report.transient = report.error_type not in FATAL_ERRORS
            report.ended_by = "error"
            await self.emit(_try_end_event(report, time.monotonic() - started))
            return report
        self.trial.add_hook(TrialEvent.AGENT_START, self.on_agent_start)
        self.trial.add_hook(TrialEvent.AGENT_END, self.on_agent_end)
        await self.run_trial(self.trial, stop)
        report.submissions_used = self.mailbox.used if self.mailbox else 0
        report.collected = self.collected
        await self.classify()
        await self.emit(_try_end_event(report, time.monotonic() - started))
        return report

    async def run_trial(self, trial: Trial, stop: asyncio.Event | None) -> None:
        """Run the trial to its end, or until ``stop``: then collect and cancel it."""
        run = asyncio.create_task(trial.run())
        waiter = asyncio.create_task(stop.wait()) if stop is not None else None
        try:
            pending = {run} | ({waiter} if waiter else set())
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if waiter is not None and waiter in done and not run.done():
                self.report.stopped = True
                await self.emit({"kind": "stop_requested", "try": self.number})
                await self.collect()
                run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                self.report.result = await run
        except asyncio.CancelledError:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            raise
        finally:
            if waiter is not None:
                waiter.cancel()
            await self.stop_pump()
            if self.mailbox is not None:
                self.mailbox.close()

    async def classify(self) -> None:
        """How the try ended (see :func:`classify`), recorded on the report."""
        report = self.report
        result = report.result
        if result is not None and result.agent_result is not None:
            meta = dict(result.agent_result.metadata or {})
            meta["mkb_task_complete"] = self.completed
            result.agent_result.metadata = meta
        ended_by, transient, valid, etype, error = classify(result, report.stopped)
        report.ended_by, report.transient, report.valid = ended_by, transient, valid
        report.error_type, report.error = etype, error
        if ended_by == "shell_exited":
            await self.emit(
                {
                    "kind": "shell_exited",
                    "try": self.number,
                    "message": "the agent's terminal session ended before it marked the task "
                    "complete; collected files are evaluated",
                }
            )


def _fresh_trial_name(trials_dir: Path, base: str) -> str:
    """``base``, or ``base-runN`` when an earlier run left that trial (never overwritten)."""
    name, rerun = base, 1
    while (trials_dir / name).exists():
        rerun += 1
        name = f"{base}-run{rerun}"
    return name


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
