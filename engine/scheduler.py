"""The experiment engine: turns a plan into attempts, runs them with bounded concurrency,
records everything, and computes comparisons as results land.

Runs are convergent: the plan's attempts are rows keyed by a plan key, so rerunning a config
reuses finished attempts, reruns failed or interrupted ones by policy and detects stale ones
(task build or attached skill changed) — rerun only with ``rerun_stale``. An attempt's
outcome is written in one transaction, so ``kill -9`` at any point loses no finished attempt
and never duplicates one; attempts caught mid-run are marked interrupted on the next start.

One engine runs an experiment at a time: :meth:`Engine.run` takes the experiment's run lock
(``storage/run_locks.py``) in the transaction that starts the run, refreshes it while running
and drops it when it stops. A second engine on the same experiment (another ``mkb run``, the
TUI's launch form) gets :class:`~storage.run_locks.ExperimentBusyError` before it plans or
touches anything; a lock left by a killed engine is detected dead and taken over, so resuming
after ``kill -9`` works as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.analysis.paired import ArmResult, rho, verdict
from engine.config import ExperimentConfig, ModelConfig
from engine.events import EventBus
from engine.grading.api import Feedback, GradingBackend
from engine.grading.gate import GradingGate
from engine.plan import ComparisonSpec, Plan, PlanNode, build_plan
from engine.recording import RecordingBackend, StoreObserver
from storage import queries, run_locks, writes
from storage.db import now
from storage.store import Store

TERMINAL = ("finished", "failed", "skipped")
CONTRACT_VERSION = "mkb-contract-1"
STOPPED_WHILE_RUNNING = "the engine stopped while this attempt ran"


@dataclass(frozen=True)
class AttemptJob:
    """Everything an attempt runner needs for one try of one attempt."""

    attempt_id: int
    experiment_id: str
    node: PlanNode
    model: ModelConfig
    try_number: int
    budget_s: float
    max_submissions: int
    source_skill: str | None
    sandbox: str
    sandbox_options: dict[str, Any]
    work_dir: Path


@dataclass
class AttemptResult:
    """What an attempt runner returns."""

    state: str  # "finished" | "failed" | "interrupted"
    final: Feedback | None = None
    skill: str | None = None
    final_source: str | None = None
    submissions_used: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    agent_seconds: float = 0.0
    error: str | None = None
    retryable: bool = True  # False when the runner already spent its own tries


class AttemptRunner(Protocol):
    async def __call__(
        self, job: AttemptJob, backend: GradingBackend, observer: StoreObserver
    ) -> AttemptResult: ...


@dataclass
class RunSummary:
    experiment_id: str
    attempts: int
    by_state: dict[str, int]
    reused: int
    ran: int
    skipped: int
    stale: list[str] = field(default_factory=list)
    comparisons_resolved: int = 0
    interrupted: bool = False


def task_hash(node: PlanNode, config: ExperimentConfig) -> str:
    """Identity of the task variant an attempt ran on (problem file, DSL, budget, contract)."""
    from problems.registry import get

    problem = get(node.problem_id)
    h = hashlib.sha256()
    h.update(problem.path.read_bytes())
    h.update(f"|{node.dsl}|{config.budget_minutes}|{config.max_submissions}|{CONTRACT_VERSION}"
             .encode())
    return h.hexdigest()[:16]


def skill_hash(text: str | None) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text else ""


def outcome_of(final: Feedback | None) -> tuple[str, str | None]:
    """Attempt outcome and reason from its final evaluation."""
    if final is None:
        return "fail", "no_implementation"
    if final.verdict in ("pass", "preview"):
        return final.verdict, None
    return "fail", final.reason or final.verdict


def _passed(row: queries.AttemptRow) -> bool:
    return row.outcome in ("pass", "preview")


def arm_result(row: queries.AttemptRow) -> ArmResult:
    return ArmResult(_passed(row), row.impl_median_ms, row.eager_median_ms)


def this_command() -> str:
    """How this process was started, for the run lock (``mkb run x.toml``)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name in ("cli.py", "__main__.py"):
        name = "mkb"
    return " ".join([name, *sys.argv[1:]])[:300]


class Engine:
    """Runs one experiment config against a store."""

    def __init__(
        self,
        store: Store,
        config: ExperimentConfig,
        runner: AttemptRunner,
        backend: GradingBackend,
        *,
        bus: EventBus | None = None,
        work_root: Path | None = None,
        rerun_stale: bool = False,
        preview: bool = False,
        command: str | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.runner = runner
        self.backend = backend
        self.bus = bus or EventBus()
        self.work_root = work_root or Path(store.path).parent / "work" / config.id
        self.rerun_stale = rerun_stale
        self.preview = preview
        self.plan: Plan = build_plan(config)
        self.ids: dict[str, int] = {}
        self._paused = asyncio.Event()
        self._paused.set()
        self._stopping = False
        self._stop_requested = asyncio.Event()  # wakes the scheduling loop at once
        self.gate = GradingGate(config.concurrency.grading_slots)
        # the run lock: this engine's token, what the lock row shows, how it is kept fresh
        self.owner = uuid.uuid4().hex
        self.command = command if command is not None else this_command()
        self.heartbeat_s = run_locks.HEARTBEAT_S
        self.stale_after_s = run_locks.STALE_AFTER_S
        self.taken_over: run_locks.RunLock | None = None  # a dead engine's lock this one took
        self.lock_lost = False  # another engine took the lock: write nothing more

    # -- controls ------------------------------------------------------------------------------
    def pause(self) -> None:
        """Start no new attempts until :meth:`resume` (running ones continue)."""
        self._paused.clear()
        self.bus.emit("engine_paused", self.config.id)

    def resume(self) -> None:
        self._paused.set()
        self.bus.emit("engine_resumed", self.config.id)

    def stop(self) -> None:
        """Start nothing new; running attempts are cancelled and recorded as interrupted."""
        self._stopping = True
        self._paused.set()
        self._stop_requested.set()

    # -- setup ---------------------------------------------------------------------------------
    def _prepare(self, db: Any) -> dict[str, int]:
        # first, in the same transaction: a second engine on this experiment stops here
        self.taken_over = run_locks.acquire(db, self.config.id, self.owner,
                                            command=self.command,
                                            stale_after_s=self.stale_after_s)
        writes.create_experiment(
            db,
            self.config.id,
            self.config.name,
            config_toml=self.config.source_text,
            preview=self.preview,
            grading_backend=self.config.grading,
        )
        ids: dict[str, int] = {}
        for node in self.plan.nodes:
            ids[node.key] = writes.ensure_attempt(
                db,
                self.config.id,
                node.key,
                model=node.model,
                problem_id=node.problem_id,
                family=node.family,
                dsl=node.dsl,
                arm=node.arm,
                replicate=node.replicate,
                round=node.round,
                variant=node.variant,
                budget_s=self.config.budget_s,
            )
        # attempts caught mid-run by a crash or kill -9 are interrupted, never lost
        writes.interrupt_active(db, self.config.id, STOPPED_WHILE_RUNNING)
        for spec in self.plan.comparisons:
            writes.upsert_comparison(db, self.config.id, **self._comparison_key(spec),
                                     source_attempt_id=ids[spec.source_key],
                                     baseline_attempt_id=ids[spec.baseline_key],
                                     treatment_attempt_id=ids[spec.treatment_key])
        writes.set_experiment_state(db, self.config.id, "running")
        return ids

    @staticmethod
    def _comparison_key(spec: ComparisonSpec) -> dict[str, Any]:
        return {
            "model": spec.model,
            "problem_id": spec.problem_id,
            "family": spec.family,
            "direction": spec.direction,
            "replicate": spec.replicate,
            "round": spec.round,
            "variant": spec.variant,
        }

    def _needs_run(self, row: queries.AttemptRow, node: PlanNode, stale: list[str]) -> bool:
        if row.state == "planned":
            return True
        if row.state == "interrupted":
            return row.tries < self.config.max_tries or self.config.max_tries <= 0
        if row.state == "failed":
            return self.config.rerun_failed and row.tries < self.config.max_tries
        if row.state in ("finished", "skipped"):
            if row.state == "finished" and row.task_hash and row.task_hash != task_hash(
                node, self.config
            ):
                stale.append(node.key)
                return self.rerun_stale
            return False
        return True

    # -- running -------------------------------------------------------------------------------
    async def run(self) -> RunSummary:
        """Run the experiment to its end, holding its run lock throughout.

        Raises :class:`~storage.run_locks.ExperimentBusyError`, having changed nothing, when
        another live engine runs the same experiment.
        """
        run_locks.register_owner(self.owner)
        try:
            self.ids = await self.store.write(self._prepare)
        except BaseException:  # busy, or cancelled while starting: never keep the lock
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.write(
                    run_locks.release, self.config.id, self.owner))
            run_locks.unregister_owner(self.owner)
            raise
        if self.taken_over is not None:  # a killed engine's lock: say whose run resumes
            self.bus.emit("run_lock_taken_over", self.config.id, pid=self.taken_over.pid,
                          host=self.taken_over.host, since=self.taken_over.started_at)
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"run-lock-{self.config.id}")
        try:
            return await self._run()
        finally:
            heartbeat.cancel()
            if not self.lock_lost:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.write(
                        run_locks.release, self.config.id, self.owner))
            run_locks.unregister_owner(self.owner)

    async def _heartbeat(self) -> None:
        """Keep the run lock fresh; stop at once if another engine took it over."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                held = await self.store.write(run_locks.heartbeat, self.config.id, self.owner)
            except Exception:  # noqa: BLE001 - a busy store: try again next beat
                continue
            if not held:
                self.lock_lost = True
                self.bus.emit("run_lock_lost", self.config.id)
                self.stop()
                return

    async def _run(self) -> RunSummary:
        self.bus.emit("experiment_started", self.config.id, attempts=len(self.plan.nodes))
        rows = {r.plan_key: r for r in await self.store.read(
            queries.attempts_for_experiment, self.config.id)}
        stale: list[str] = []
        todo = {n.key for n in self.plan.nodes if self._needs_run(rows[n.key], n, stale)}
        for n in self.plan.nodes:  # a treatment whose attached skill changed is stale too
            row = rows[n.key]
            if n.key in todo or not n.is_treatment or row.state != "finished":
                continue
            if row.skill_hash != skill_hash(await self._source_skill(n)):
                stale.append(n.key)
                if self.rerun_stale:
                    todo.add(n.key)
        reused = len(self.plan.nodes) - len(todo)
        if stale:
            await self.store.write(
                writes.append_event, "stale_attempts",
                {"keys": stale, "rerun": self.rerun_stale}, experiment_id=self.config.id,
            )
        # a stale source makes its treatments stale too
        changed = True
        while changed:
            changed = False
            for n in self.plan.nodes:
                if n.key not in todo and n.source_key in todo:
                    todo.add(n.key)
                    changed = True
        for spec in self.plan.comparisons:
            await self._update_comparison(spec)

        running: dict[asyncio.Task[str], PlanNode] = {}
        per_model: dict[str, int] = {}
        started_order: dict[str, float] = {}
        ran = skipped = 0
        interrupted = False

        running_keys: set[str] = set()

        def ready(node: PlanNode) -> bool:
            src = node.source_key
            return src is None or (src not in todo and src not in running_keys)

        stop_requested = asyncio.ensure_future(self._stop_requested.wait())
        try:
            while todo or running:
                if self._stopping:
                    break
                await self._paused.wait()
                candidates = [
                    n for n in self.plan.nodes
                    if n.key in todo and ready(n)
                    and per_model.get(n.model, 0) < self.config.concurrency.attempts_per_model
                ]
                while candidates and len(running) < self.config.concurrency.sandboxes:
                    # fairness: the model with the fewest running attempts, longest waiting first
                    candidates.sort(key=lambda n: (per_model.get(n.model, 0),
                                                   started_order.get(n.model, 0.0)))
                    node = candidates.pop(0)
                    todo.discard(node.key)
                    per_model[node.model] = per_model.get(node.model, 0) + 1
                    started_order[node.model] = time.monotonic()
                    task = asyncio.create_task(self._run_node(node), name=node.key)
                    running[task] = node
                    running_keys.add(node.key)
                    candidates = [
                        n for n in candidates
                        if per_model.get(n.model, 0) < self.config.concurrency.attempts_per_model
                    ]
                if not running:
                    if todo:  # nothing can start: a dependency never ran (should not happen)
                        raise RuntimeError(f"unschedulable attempts: {sorted(todo)[:5]}")
                    break
                done, _ = await asyncio.wait({*running, stop_requested},
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in [t for t in running if t in done]:  # not the stop request
                    node = running.pop(task)
                    running_keys.discard(node.key)
                    per_model[node.model] -= 1
                    result = task.result()
                    if result == "skipped":
                        skipped += 1
                    else:
                        ran += 1
        except asyncio.CancelledError:
            interrupted = True
            raise
        finally:
            stop_requested.cancel()
            if running:
                interrupted = True
                for task in running:
                    task.cancel()
                await self._record_interrupted()
                await asyncio.gather(*running, return_exceptions=True)
            state = "stopped" if (interrupted or self._stopping) else "finished"
            with contextlib.suppress(Exception):
                if not self.lock_lost:  # else the new holder owns the experiment's state
                    await self.store.write(writes.set_experiment_state, self.config.id, state)
            self.bus.emit("experiment_" + state, self.config.id)
        by_state = await self.store.read(queries.attempt_states, self.config.id)
        resolved = sum(c.resolved for c in await self.store.read(
            queries.comparisons, self.config.id))
        return RunSummary(self.config.id, len(self.plan.nodes), by_state, reused, ran, skipped,
                          stale, resolved, interrupted or self._stopping)

    async def _record_interrupted(self) -> None:
        """Shutdown: record the attempts in flight as interrupted at once, before their
        runners finish cleaning up (a sandbox can take a while), so the store says what
        happened even when the process exits next; the next run resumes them."""
        if self.lock_lost:  # the engine that took over has done so, and may be running them
            return
        with contextlib.suppress(Exception):
            await asyncio.shield(self.store.write(
                writes.interrupt_active, self.config.id, STOPPED_WHILE_RUNNING,
                ended_at=now()))

    async def _source_skill(self, node: PlanNode) -> str | None:
        if node.edited_skill is not None:
            return node.edited_skill
        assert node.source_key is not None
        skill = await self.store.read(queries.latest_skill, self.ids[node.source_key])
        return skill.text if skill else None

    @staticmethod
    def _edited_skill(db: Any, text: str, source_attempt_id: int) -> int:
        """The edited skill to attach, with its lineage: it descends from the source
        attempt's skill (a person's edit saved from the TUI is reused, not copied)."""
        parent = queries.latest_skill(db, source_attempt_id)
        return writes.ensure_edited_skill(db, text, parent.id if parent else None)

    async def _run_node(self, node: PlanNode) -> str:
        attempt_id = self.ids[node.key]
        experiment_id = self.config.id
        source_skill: str | None = None
        if node.is_treatment:
            source_skill = await self._source_skill(node)
            if not source_skill or not source_skill.strip():
                await self.store.write(
                    writes.update_attempt, attempt_id, "attempt_skipped", state="skipped",
                    outcome="skipped", reason="blank_or_missing_source_skill",
                    ended_at=now(),
                )
                self.bus.emit("attempt_skipped", experiment_id, attempt_id)
                await self._comparisons_for(node)
                return "skipped"
            current = await self.store.read(queries.attempt, attempt_id)
            if node.edited_skill is not None:
                if current is not None and current.attached_skill_id is not None:
                    skill_id = current.attached_skill_id
                else:
                    skill_id = await self.store.write(
                        self._edited_skill, node.edited_skill, self.ids[node.source_key or ""])
            else:
                src = await self.store.read(queries.latest_skill, self.ids[node.source_key or ""])
                skill_id = src.id if src else None  # type: ignore[assignment]
            await self.store.write(writes.update_attempt, attempt_id,
                                   attached_skill_id=skill_id,
                                   source_attempt_id=self.ids.get(node.source_key or ""))
        row = await self.store.read(queries.attempt, attempt_id)
        assert row is not None
        try_number = row.tries + 1
        await self.store.write(
            writes.update_attempt, attempt_id, "attempt_started", state="running",
            tries=try_number, started_at=now(), task_hash=task_hash(node, self.config),
            skill_hash=skill_hash(source_skill), error=None,
            unsafe_no_jail=int(self.config.unsafe_no_jail),
        )
        self.bus.emit("attempt_started", experiment_id, attempt_id, key=node.key)
        observer = StoreObserver(self.store, self.bus, experiment_id, attempt_id, try_number)
        backend = RecordingBackend(
            self.backend, self.store, self.bus, experiment_id=experiment_id,
            attempt_id=attempt_id, try_number=try_number, max_tries=self._grading_tries(),
            gate=self.gate,
        )
        job = AttemptJob(
            attempt_id=attempt_id,
            experiment_id=experiment_id,
            node=node,
            model=self.config.model(node.model),
            try_number=try_number,
            budget_s=self.config.budget_s,
            max_submissions=self.config.max_submissions,
            source_skill=source_skill,
            sandbox=self.config.sandbox,
            sandbox_options=self.config.sandbox_options,
            work_dir=self.work_root / f"attempt-{attempt_id}" / f"try-{try_number}",
        )
        try:
            result = await self.runner(job, backend, observer)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                if not self.lock_lost:  # else the engine that took over owns the attempt
                    await asyncio.shield(self.store.write(
                        writes.update_attempt, attempt_id, "attempt_interrupted",
                        state="interrupted", error="cancelled", ended_at=now()))
            raise
        except Exception as exc:  # noqa: BLE001 - a runner bug must not stop the experiment
            result = AttemptResult(state="failed", error=f"{type(exc).__name__}: {exc}")
        await self._record_result(node, attempt_id, result, try_number)
        return result.state

    def _grading_tries(self) -> int:
        """Tries per grading in the recording backend: one when the runner retries itself.

        An attempt runner that retries failed gradings on its own (the Terminus-2 mailbox)
        sets ``retries_grading``; retrying here too would multiply the tries.
        """
        return 1 if getattr(self.runner, "retries_grading", False) else self.config.max_tries

    async def _record_result(
        self, node: PlanNode, attempt_id: int, result: AttemptResult, try_number: int
    ) -> None:
        if self.lock_lost:  # another engine owns the experiment now
            return
        state = result.state if result.state in ("finished", "failed", "interrupted") else "failed"
        if (
            state == "failed"
            and result.retryable
            and self.config.rerun_failed
            and try_number < self.config.max_tries
        ):
            # a transient failure: record it and run the attempt again (an execution retry)
            await self.store.write(
                writes.update_attempt, attempt_id, "attempt_retrying", state="interrupted",
                error=result.error, ended_at=now())
            self.bus.emit("attempt_retrying", self.config.id, attempt_id, error=result.error)
            await self._run_node(node)
            return
        outcome, reason = outcome_of(result.final) if state == "finished" else ("fail",
                                                                               "infrastructure")
        final = result.final

        def record(db: Any) -> None:
            if result.skill and result.skill.strip():
                latest = queries.latest_skill(db, attempt_id)
                if latest is None or latest.text != result.skill:
                    writes.add_skill(db, result.skill, attempt_id=attempt_id)
            writes.update_attempt(
                db, attempt_id, "attempt_finished",
                state=state, outcome=outcome, reason=reason,
                speedup=final.speedup if final else None,
                impl_median_ms=final.impl_median_ms if final else None,
                eager_median_ms=final.eager_median_ms if final else None,
                final_source=result.final_source,
                tokens_in=result.tokens_in, tokens_out=result.tokens_out,
                cost_usd=result.cost_usd, agent_seconds=result.agent_seconds,
                error=result.error, ended_at=now(),
            )

        await self.store.write(record)
        if outcome == "preview" and not self.preview:
            # graded without a GPU: the whole experiment is a PREVIEW, never scored
            self.preview = True
            await self.store.write(writes.mark_experiment_preview, self.config.id)
        self.bus.emit("attempt_finished", self.config.id, attempt_id, state=state,
                      outcome=outcome, speedup=final.speedup if final else None)
        await self._comparisons_for(node)

    async def _comparisons_for(self, node: PlanNode) -> None:
        for spec in self.plan.comparisons_touching(node.key):
            await self._update_comparison(spec)

    async def _update_comparison(self, spec: ComparisonSpec) -> None:
        def compute(db: Any) -> None:
            src = queries.attempt(db, self.ids[spec.source_key])
            base = queries.attempt(db, self.ids[spec.baseline_key])
            treat = queries.attempt(db, self.ids[spec.treatment_key])
            assert src and base and treat
            resolved = all(r.state in TERMINAL for r in (src, base, treat))
            fields: dict[str, Any] = {"resolved": int(resolved),
                                      "skipped": int(treat.state == "skipped")}
            if resolved:
                value = rho(arm_result(base),
                            None if treat.state == "skipped" else arm_result(treat))
                fields.update(rho=value, verdict=verdict(value))
            else:
                fields.update(rho=None, verdict=None)
            writes.upsert_comparison(db, self.config.id, **self._comparison_key(spec), **fields)

        await self.store.write(compute)
        self.bus.emit("comparison_updated", self.config.id, problem_id=spec.problem_id,
                      direction=spec.direction)


RunnerFactory = Callable[[], Awaitable[AttemptRunner]]
