"""A small Harbor job of MetaKernelBench tasks, written by Harbor 0.25's own models.

Sources (the installed package): the job directory's ``config.json`` is
``JobConfig.model_dump_json(indent=4, exclude_defaults=True)`` and ``result.json`` is
``JobResult.model_dump_json(indent=4)`` (``harbor/job.py``, ``_write_job_result`` and the
config write); each trial directory follows ``harbor/models/trial/paths.py`` (``TrialPaths``:
``config.json``, ``result.json``, ``trial.log``, ``agent/``, ``verifier/reward.json``,
``artifacts/<container path>``) with ``TrialResult`` from ``harbor/models/trial/result.py``
and ``TrialConfig`` (``extra_instruction_paths``) from ``harbor/models/trial/config.py``.
Task names and rewards are the public MetaKernelBench's (``catalog.task_name`` =
``<problem>_<dsl>``; ``template/grader.py`` ``REWARD_KEYS`` and ``reward-details.json`` with
``median_ms``); trial names are Harbor's ``<task>__<id>``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from run_fixtures import MODEL, trajectory

PROBLEM = "28_fused_add_rmsnorm_h4096_llama31_8b_bf16"
START = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)


@dataclass
class JobTrial:
    task: str  # e.g. "<problem>_cutedsl"
    minute: int  # start, minutes after START (numbers the replicates)
    speedup: float | None = 1.5  # None: failed
    attached: bool = False  # a treatment: a skill attached as an extra instruction
    exception: str | None = None  # e.g. "AgentTimeoutError", "EnvironmentStartTimeoutError"
    rewards: dict[str, float] | None = None  # override (e.g. a non-MKB task's)
    finished: bool = True  # False: no result.json yet


def default_trials() -> list[JobTrial]:
    """p28, both DSLs, two replicates of each arm; one timed out (still graded), one failed
    to start, one unfinished, one trial of a task that is not MetaKernelBench's."""
    c, t = f"{PROBLEM}_cutedsl", f"{PROBLEM}_tirx"
    return [
        JobTrial(c, 0, 2.0),
        JobTrial(t, 1, 1.2),
        JobTrial(t, 30, 3.0, attached=True),
        JobTrial(c, 31, 1.0, attached=True, exception="AgentTimeoutError"),
        JobTrial(c, 60, None),
        JobTrial(t, 61, 2.5),
        JobTrial(t, 90, 2.0, attached=True),
        JobTrial(c, 91, 0.8, attached=True),
        JobTrial(c, 120, exception="EnvironmentStartTimeoutError"),
        JobTrial(t, 121, finished=False),
        JobTrial("hello-world", 5, rewards={"reward": 1.0}),
    ]


def _rewards(j: JobTrial) -> dict[str, float] | None:
    if j.rewards is not None:
        return j.rewards
    if j.exception and j.exception != "AgentTimeoutError":
        return None
    ok = j.speedup is not None
    return {
        "imported": 1.0,
        "correct": 1.0 if ok else 0.0,
        "speedup_vs_eager": j.speedup if ok else 0.0,
        "passed": 1.0 if ok else 0.0,
    }


def _trial_result(j: JobTrial, d: Path) -> object:
    from harbor.models.agent.context import AgentContext
    from harbor.models.task.id import LocalTaskId
    from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
    from harbor.models.trial.result import (
        AgentInfo,
        ExceptionInfo,
        ModelInfo,
        TimingInfo,
        TrialResult,
    )
    from harbor.models.verifier.result import VerifierResult

    started = START + timedelta(minutes=j.minute)
    extra = [d.parent / "skills" / f"{d.name}.md"] if j.attached else []
    config = TrialConfig(
        task=TaskConfig(path=Path("/build/tasks") / j.task),
        trial_name=d.name,
        trials_dir=d.parent,
        extra_instruction_paths=extra,
        agent=AgentConfig(name="terminus-2", model_name=MODEL),
    )
    rewards = _rewards(j)
    return TrialResult(
        task_name=j.task,
        trial_name=d.name,
        trial_uri=d.as_uri(),
        task_id=LocalTaskId(path=Path("/build/tasks") / j.task),
        task_checksum="0" * 64,
        config=config,
        agent_info=AgentInfo(
            name="terminus-2",
            version="2.0.0",
            model_info=ModelInfo(name="kernel-model-1", provider="openrouter"),
        ),
        agent_result=AgentContext(
            n_input_tokens=2000, n_cache_tokens=0, n_output_tokens=300, cost_usd=0.02
        ),
        verifier_result=None if rewards is None else VerifierResult(rewards=rewards),
        exception_info=None
        if j.exception is None
        else ExceptionInfo(
            exception_type=j.exception,
            exception_message="it happened",
            exception_traceback="",
            occurred_at=started + timedelta(minutes=3),
        ),
        started_at=started,
        finished_at=started + timedelta(minutes=4),
        agent_execution=TimingInfo(
            started_at=started, finished_at=started + timedelta(seconds=150)
        ),
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_job(root: Path, trials: list[JobTrial] | None = None) -> Path:
    """A job directory ``root`` (its name the job's) with every trial; returns it."""
    from harbor.models.job.config import JobConfig
    from harbor.models.job.result import JobResult, JobStats
    from harbor.models.trial.config import AgentConfig, TaskConfig

    trials = default_trials() if trials is None else trials
    results = []
    for i, j in enumerate(trials):
        d = root / f"{j.task}__{uuid.UUID(int=i + 1).hex[-7:]}"
        _write(d / "trial.log", "trial log\n")
        if not j.finished:
            continue
        result = _trial_result(j, d)
        results.append(result)
        _write(d / "result.json", result.model_dump_json(indent=4))  # type: ignore[attr-defined]
        _write(d / "config.json", result.config.model_dump_json(indent=4))  # type: ignore
        _write(d / "agent" / "trajectory.json", trajectory(i))
        rewards = _rewards(j)
        if rewards is not None:
            _write(d / "verifier" / "reward.json", json.dumps(rewards, indent=2))
        if rewards and rewards.get("passed"):
            _write(
                d / "verifier" / "reward-details.json",
                json.dumps(
                    {"error": None, "median_ms": {"kernel": 0.25, "eager": 0.25 * j.speedup}}
                ),
            )
            _write(d / "artifacts" / "app" / "kernel.py", f"def solve(*xs):  # {i}\n    ...\n")
            _write(d / "artifacts" / "app" / "SKILL.md", f"- trial {i}: rows in float32\n")
    config = JobConfig(
        job_name=root.name,
        jobs_dir=root.parent,
        n_attempts=2,
        agents=[AgentConfig(name="terminus-2", model_name=MODEL)],
        tasks=[
            TaskConfig(path=Path("/build/tasks") / f"{PROBLEM}_{d}") for d in ("cutedsl", "tirx")
        ],
    )
    _write(root / "config.json", config.model_dump_json(indent=4, exclude_defaults=True))
    job = JobResult(
        id=uuid.UUID(int=99),
        started_at=START,
        finished_at=START + timedelta(hours=3),
        n_total_trials=len(trials),
        stats=JobStats.from_trial_results(results),
    )
    _write(root / "result.json", job.model_dump_json(indent=4))
    _write(root / "job.log", "job log\n")
    return root
