"""What a run has to do: the plan's rows in the store, and which attempts still need a run.

Runs are convergent: the plan's attempts are rows keyed by a plan key, so rerunning a config
reuses finished attempts, resumes failed or interrupted ones by the retry policy and detects
stale ones (task build or attached skill changed), rerun only with ``rerun_stale``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from engine.comparisons import comparison_key
from engine.config import ExperimentConfig
from engine.plan import Plan, PlanNode
from engine.retry import RetryPolicy
from problems.targets import DEFAULT_GPU, concrete_gpu
from storage import queries, run_locks, writes

CONTRACT_VERSION = "mkb-contract-1"
STOPPED_WHILE_RUNNING = "the engine stopped while this attempt ran"


def task_hash(node: PlanNode, config: ExperimentConfig) -> str:
    """Identity of the task variant an attempt ran on (problem file, DSL, budget, contract,
    grading GPU: a change of target makes finished attempts stale)."""
    from problems.registry import get

    problem = get(node.problem_id)
    h = hashlib.sha256()
    h.update(problem.path.read_bytes())
    h.update(
        f"|{node.dsl}|{config.budget_minutes}|{config.max_submissions}|{CONTRACT_VERSION}".encode()
    )
    if (gpu := concrete_gpu(config.gpu)) != DEFAULT_GPU:  # H200 hashes stay as they were
        h.update(f"|gpu={gpu}".encode())
    return h.hexdigest()[:16]


def skill_hash(text: str | None) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text else ""


class PreviewMixError(ValueError):
    """A CPU-preview run of an experiment whose store holds scored (GPU) verdicts."""


@dataclass
class RunLockClaim:
    """Who this engine is, for the run lock (``storage/run_locks.py``)."""

    owner: str
    command: str
    stale_after_s: float
    taken_over: run_locks.RunLock | None = None  # a dead engine's lock this one took


def prepare(
    db: Any, config: ExperimentConfig, plan: Plan, claim: RunLockClaim, *, preview: bool
) -> dict[str, int]:
    """The one write that starts a run; returns the attempt id of every plan key.

    First, in the same transaction, the run lock: a second engine on this experiment stops
    here (``ExperimentBusyError``) having changed nothing, as does a CPU-preview run of an
    experiment already scored on a GPU (:class:`PreviewMixError`).
    """
    if preview and queries.scored_on_a_gpu(db, config.id):
        raise PreviewMixError(
            f"experiment {config.id!r} in this store was graded on a GPU, and this run would "
            "grade in CPU preview: its verdicts would be mixed with scored ones. Resume it on a "
            "GPU host, or preview it in another store (--db)"
        )
    claim.taken_over = run_locks.acquire(
        db, config.id, claim.owner, command=claim.command, stale_after_s=claim.stale_after_s
    )
    writes.create_experiment(
        db,
        config.id,
        config.name,
        config_toml=config.source_text,
        preview=preview,
        grading_backend=config.grading,
        gpu=concrete_gpu(config.gpu),
    )
    ids: dict[str, int] = {}
    for node in plan.nodes:
        ids[node.key] = writes.ensure_attempt(
            db,
            config.id,
            node.key,
            model=node.model,
            problem_id=node.problem_id,
            family=node.family,
            dsl=node.dsl,
            arm=node.arm,
            replicate=node.replicate,
            round=node.round,
            variant=node.variant,
            budget_s=config.budget_s,
        )
    # attempts caught mid-run by a crash or kill -9 are interrupted, never lost
    writes.interrupt_active(db, config.id, STOPPED_WHILE_RUNNING)
    for spec in plan.comparisons:
        writes.upsert_comparison(
            db,
            config.id,
            **comparison_key(spec),
            source_attempt_id=ids[spec.source_key],
            baseline_attempt_id=ids[spec.baseline_key],
            treatment_attempt_id=ids[spec.treatment_key],
        )
    writes.set_experiment_state(db, config.id, "running")
    return ids


@dataclass
class Todo:
    """The plan keys to run, and the stale ones found on the way."""

    keys: set[str] = field(default_factory=set)
    stale: list[str] = field(default_factory=list)


def needs_run(
    row: queries.AttemptRow,
    node: PlanNode,
    config: ExperimentConfig,
    policy: RetryPolicy,
    todo: Todo,
    rerun_stale: bool,
) -> bool:
    """Whether a planned attempt runs in this run (a stale one is noted in ``todo``)."""
    if row.stop_reason is not None:  # an operator stopped it: only a retry runs it again
        return False
    if row.state == "planned":
        return True
    if row.state in ("interrupted", "failed"):
        return policy.resume(row.state, row.tries)
    if row.state in ("finished", "skipped"):
        if row.state == "finished" and row.task_hash and row.task_hash != task_hash(node, config):
            todo.stale.append(node.key)
            return rerun_stale
        return False
    return True


def close_over_sources(plan: Plan, keys: set[str]) -> None:
    """A source that runs again makes the treatments fed by it run again too."""
    changed = True
    while changed:
        changed = False
        for n in plan.nodes:
            if n.key not in keys and n.source_key in keys:
                keys.add(n.key)
                changed = True
