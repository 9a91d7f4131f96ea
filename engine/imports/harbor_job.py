"""``mkb import harbor-job DIR``: a Harbor job of MetaKernelBench tasks as an experiment.

The layout, from Harbor 0.25's own source: a job directory (``harbor/job.py``: ``config.json``
a ``JobConfig``, ``lock.json``, ``result.json`` a ``JobResult``, ``job.log``) holds one
directory per trial (``harbor/models/trial/paths.py``, ``TrialPaths``: ``config.json`` a
``TrialConfig``, ``result.json`` a ``TrialResult``, ``trial.log``, ``exception.txt``,
``agent/`` with the ATIF ``trajectory.json``, ``verifier/`` with ``reward.json``, ``artifacts/``
mirroring container paths). A ``TrialResult`` (``harbor/models/trial/result.py``) carries
``task_name``, ``trial_name``, ``agent_info.model_info``, ``agent_result`` (tokens, cost),
``verifier_result.rewards``, ``exception_info`` and phase timings. MetaKernelBench tasks are
named ``<NN>_<slug>_<dsl>`` (the public ``catalog.task_name``) and their grader writes the
rewards ``imported``, ``correct``, ``speedup_vs_eager`` and ``passed`` with the medians in
``verifier/reward-details.json`` (the public ``template/grader.py``). A trial given an extra
instruction (``TrialConfig.extra_instruction_paths``, how the public harness attaches a
source's SKILL.md) is the treatment arm of its target DSL; replicates number each model's
trials of one task and arm in start order.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.imports.atif import trajectory_steps
from engine.imports.mkb_run import DSLS, problem_of, verdict_of
from engine.imports.records import AttemptRecord, GradedRecord
from engine.imports.report import ImportReport

JOB_FILES = {"config.json", "lock.json", "result.json", "job.log"}
TRIAL_FILES = {
    "config.json",
    "lock.json",
    "result.json",
    "trial.log",
    "exception.txt",
    "agent",
    "user-agent",
    "verifier",
    "artifacts",
    "steps",
}
TASK_NAME = re.compile(r"([0-9]{2}_[a-z0-9]+(?:_[a-z0-9]+)*?)_(cutedsl|tirx)")
TREATMENT = {"tirx": "cute2tirx_skill", "cute": "tirx2cute_skill"}
TIMEOUT = "AgentTimeoutError"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _seconds(timing: Any) -> float:
    try:
        start = datetime.fromisoformat(timing["started_at"])
        end = datetime.fromisoformat(timing["finished_at"])
    except (TypeError, KeyError, ValueError):
        return 0.0
    return max(0.0, (end - start).total_seconds())


def _model(result: dict[str, Any]) -> str:
    agent = (result.get("config") or {}).get("agent") or {}
    info = (result.get("agent_info") or {}).get("model_info") or {}
    if agent.get("model_name"):
        return str(agent["model_name"])
    name, provider = info.get("name"), info.get("provider")
    return f"{provider}/{name}" if provider and name else str(name or "unknown-model")


def _feedback(trial: Path, rewards: dict[str, float], pid: str, dsl: str) -> dict[str, Any]:
    verdict, reason = verdict_of(rewards)
    try:
        details = _json(trial / "verifier" / "reward-details.json")
    except (OSError, ValueError):
        details = {}  # absent (or unreadable): the times then come from the speedup
    medians = (details.get("median_ms") if isinstance(details, dict) else None) or {}
    passed = verdict == "pass"
    return {
        "verdict": verdict,
        "reason": reason,
        "problem_id": pid,
        "dsl": dsl,
        "speedup": rewards.get("speedup_vs_eager") if passed else None,
        "impl_median_ms": medians.get("kernel") if passed else None,
        "eager_median_ms": medians.get("eager") if passed else None,
        "rewards": rewards,
        "device": "harbor verifier",
        "origin": "harbor-job",
    }


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def read_trial(
    trial: Path, result: dict[str, Any], report: ImportReport
) -> tuple[AttemptRecord, str] | None:
    """One trial as an attempt (replicate set later) and its start time, else None."""
    task = str(result.get("task_name") or "")
    m = TASK_NAME.fullmatch(task)
    if m is None:
        report.not_understood(str(trial), f"task {task!r} is not a MetaKernelBench task name")
        return None
    found = problem_of(m.group(1), report, trial)
    if found is None:
        return None
    (pid, family), dsl = found, DSLS[m.group(2)]
    config = result.get("config") or {}
    attached = bool(config.get("extra_instruction_paths") or config.get("extra_instructions"))
    rec = AttemptRecord(
        model=_model(result),
        problem_id=pid,
        family=family,
        arm=TREATMENT[dsl] if attached else f"solo_{dsl}",
        replicate=0,
        state="finished",
        started_at=result.get("started_at"),
        ended_at=result.get("finished_at"),
    )
    usage = result.get("agent_result") or {}
    rec.tokens_in, rec.tokens_out = (
        int(usage.get("n_input_tokens") or 0),
        int(usage.get("n_output_tokens") or 0),
    )
    rec.cost_usd = float(usage.get("cost_usd") or 0.0)
    rec.agent_seconds = _seconds(result.get("agent_execution"))
    rec.skill = _text(trial / "artifacts" / "app" / "SKILL.md")
    rec.steps = trajectory_steps(trial / "agent" / "trajectory.json", report)
    exc = result.get("exception_info") or {}
    rewards = (result.get("verifier_result") or {}).get("rewards")
    if exc and exc.get("exception_type") != TIMEOUT:
        rec.state = "interrupted"
        rec.error = f"harbor: {exc.get('exception_type')}: {exc.get('exception_message')}"
        return rec, str(result.get("started_at") or "")
    if not isinstance(rewards, dict) or "passed" not in rewards:
        report.not_understood(
            str(trial / "result.json"), f"rewards {sorted(rewards or {})} hold no 'passed'"
        )
        return None
    feedback = _feedback(trial, {k: float(v) for k, v in rewards.items()}, pid, dsl)
    rec.final_source = _text(trial / "artifacts" / "app" / "kernel.py")
    rec.graded = [GradedRecord("final", 1, rec.final_source or "", feedback, backend="harbor-job")]
    rec.outcome, rec.reason, rec.speedup = (
        feedback["verdict"],
        feedback["reason"],
        feedback["speedup"],
    )
    rec.impl_median_ms, rec.eager_median_ms = (
        feedback["impl_median_ms"],
        feedback["eager_median_ms"],
    )
    if feedback["verdict"] == "pass" and not rec.impl_median_ms:
        rec.impl_median_ms, rec.eager_median_ms = 1.0 / float(rec.speedup or 1.0), 1.0
        report.count("finals with times derived from the speedup (no reward-details.json)")
    return rec, str(result.get("started_at") or "")


def read_job(root: Path, report: ImportReport) -> list[AttemptRecord]:
    """Every trial of a Harbor job directory; what is not imported is reported."""
    if not (root / "config.json").is_file() and not (root / "result.json").is_file():
        raise ValueError(f"{root}: not a Harbor job directory (no config.json or result.json)")
    found: list[tuple[AttemptRecord, str, str]] = []
    for entry in sorted(root.iterdir()):
        if entry.name in JOB_FILES or entry.name.startswith("."):
            continue
        if not entry.is_dir():
            report.not_understood(str(entry), "not part of a Harbor job directory")
            continue
        try:
            result = _json(entry / "result.json")
        except FileNotFoundError:
            report.aside("trial without result.json (not finished)", str(entry))
            continue
        except (OSError, ValueError) as exc:
            report.not_understood(str(entry / "result.json"), f"unreadable: {exc}")
            continue
        for extra in sorted({p.name for p in entry.iterdir()} - TRIAL_FILES):
            report.not_understood(str(entry / extra), "file this importer does not know")
        read = read_trial(entry, result, report) if isinstance(result, dict) else None
        if read is not None:
            found.append((*read, entry.name))
    return _number_replicates(found, report)


def _number_replicates(
    found: list[tuple[AttemptRecord, str, str]], report: ImportReport
) -> list[AttemptRecord]:
    groups: dict[tuple[str, str, str], list[tuple[str, str, AttemptRecord]]] = defaultdict(list)
    for rec, started, name in found:
        groups[(rec.model, rec.problem_id, rec.arm)].append((started, name, rec))
    out: list[AttemptRecord] = []
    for members in groups.values():
        for rep, (_, _, rec) in enumerate(sorted(members, key=lambda m: m[:2]), start=1):
            rec.replicate = rep
            out.append(rec)
    models = sorted({rec.model for rec in out})
    report.model = models[0] if len(models) == 1 else f"{len(models)} models"
    return out
