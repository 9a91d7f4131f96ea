"""The experiment engine: turns a plan into attempts, runs them with bounded concurrency,
records everything, and computes comparisons as results land.

Runs are convergent (``engine/convergence.py``): rerunning a config reuses finished attempts
and resumes failed or interrupted ones by the retry policy (``engine/retry.py``). An
attempt's outcome is written in one transaction, so ``kill -9`` loses no finished attempt
and duplicates none. Each try is one :class:`~engine.attempts.spec.AttemptSpec` handed to the
runner, which returns one :class:`~engine.attempts.spec.AttemptOutcome`; every event goes
through one :class:`~engine.events.Publisher`. One engine runs an experiment at a time: its
run lock (``storage/run_locks.py``), taken with the run's first transaction, refused to a
second engine and taken over from a killed one. Operators' commands reach the engine holding
the lock (``engine/control.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import comparisons
from engine.attempt_records import attach_skill, failed_outcome, outcome_of, store_outcome
from engine.attempts.spec import AttemptOutcome, AttemptSpec, spec_for_node
from engine.config import ExperimentConfig
from engine.control import Control
from engine.convergence import (
    STOPPED_WHILE_RUNNING,
    RunLockClaim,
    Todo,
    close_over_sources,
    needs_run,
    prepare,
    skill_hash,
    task_hash,
)
from engine.events import (
    AttemptFinished,
    AttemptInterrupted,
    AttemptRetrying,
    AttemptSkipped,
    AttemptStarted,
    EnginePaused,
    EngineResumed,
    EventBus,
    ExperimentFinished,
    ExperimentStarted,
    ExperimentStopped,
    Publisher,
    RunLockLost,
    RunLockTakenOver,
    StaleAttempts,
)
from engine.final_repeats import FinalRepeats
from engine.grading.api import Feedback, GradingBackend
from engine.grading.backends.gate import GradingGate
from engine.paired_repeats import paired_for
from engine.plan import Plan, PlanNode, build_plan
from engine.recording import RecordingBackend, StoreObserver
from engine.regrade import regrade_final
from engine.retry import RetryPolicy
from engine.run_types import AttemptRunner
from engine.slots import Slots
from engine.targets import resolve_experiment_gpu
from storage import queries, run_locks, writes
from storage.db import now
from storage.store import Store

__all__ = ["AttemptRunner", "Engine", "RunSummary", "outcome_of", "skill_hash", "task_hash"]


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
    ungraded: dict[str, int] = field(default_factory=dict)  # the grader's failures, by reason


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
        self.publisher = Publisher(store, self.bus)
        self.retry = RetryPolicy.from_config(config)
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
        self.repeats = FinalRepeats(  # [grading] final_repeats: repeated finals, interleaved
            publisher=self.publisher,
            backend=backend,
            gate=self.gate,
            retry=self.retry,
            experiment_id=config.id,
            repeats=config.final_repeats,
            plan=self.plan,
            ids=lambda: self.ids,
        )  # [grading] paired_repeats: each resolved comparison's finals, paired on one slot
        self.paired = paired_for(config, self.publisher, self.repeats.ticker, self.gate, self.retry)
        # the run lock: this engine's token, what the lock row shows, how it is kept fresh
        self.claim = RunLockClaim(
            uuid.uuid4().hex,
            command if command is not None else run_locks.this_command(),
            run_locks.STALE_AFTER_S,
        )
        self.owner = self.claim.owner
        self.heartbeat_s = run_locks.HEARTBEAT_S
        self.lock_lost = False  # another engine took the lock: write nothing more
        self.control = Control(self)  # operators' commands (engine/control.py)

    @property
    def taken_over(self) -> run_locks.RunLock | None:
        """A dead engine's lock this one took over, if it did."""
        return self.claim.taken_over

    # -- controls ------------------------------------------------------------------------------
    def pause(self) -> None:
        """Start no new attempts until :meth:`resume` (running ones continue)."""
        self._paused.clear()
        self.publisher.notify(EnginePaused(self.config.id))

    def resume(self) -> None:
        self._paused.set()
        self.publisher.notify(EngineResumed(self.config.id))

    def stop(self) -> None:
        """Start nothing new; running attempts are cancelled and recorded as interrupted."""
        self._stopping = True
        self._paused.set()
        self._stop_requested.set()

    # -- running -------------------------------------------------------------------------------
    def _prepare(self, db: Any) -> dict[str, int]:
        return prepare(db, self.config, self.plan, self.claim, preview=self.preview)

    async def run(self) -> RunSummary:
        """Run the experiment to its end, holding its run lock throughout.

        Raises :class:`~storage.run_locks.ExperimentBusyError`, having changed nothing, when
        another live engine runs the same experiment, and
        :class:`~problems.targets.TargetMismatchError`, having written nothing, when the
        grading host contradicts ``[grading] gpu`` (``auto`` becomes the host's GPU here).
        """
        self.config = await resolve_experiment_gpu(self.config, self.backend)
        run_locks.register_owner(self.owner)
        try:
            self.ids = await self.store.write(self._prepare)
        except BaseException:  # busy, or cancelled while starting: never keep the lock
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.store.write(run_locks.release, self.config.id, self.owner)
                )
            run_locks.unregister_owner(self.owner)
            raise
        if (lock := self.taken_over) is not None:  # a killed engine's lock: whose run resumes
            holder: dict[str, Any] = {"pid": lock.pid, "host": lock.host, "since": lock.started_at}
            self.publisher.notify(RunLockTakenOver(self.config.id, **holder))
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"run-lock-{self.config.id}")
        commands = await self.control.start()  # operators' commands: those left, then polled
        try:
            return await self._run()
        finally:
            heartbeat.cancel()
            await asyncio.shield(self.control.end(commands))
            if not self.lock_lost:
                with contextlib.suppress(Exception):
                    await asyncio.shield(
                        self.store.write(run_locks.release, self.config.id, self.owner)
                    )
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
                self.publisher.notify(RunLockLost(self.config.id))
                self.stop()
                return

    async def _todo(self) -> Todo:
        """Which attempts this run starts (and which finished ones are stale)."""
        rows = {
            r.plan_key: r
            for r in await self.store.read(queries.attempts_for_experiment, self.config.id)
        }
        todo = Todo()
        todo.keys = {
            n.key
            for n in self.plan.nodes
            if needs_run(rows[n.key], n, self.config, self.retry, todo, self.rerun_stale)
        }
        for n in self.plan.nodes:  # a treatment whose attached skill changed is stale too
            row = rows[n.key]
            if n.key in todo.keys or not n.is_treatment or row.state != "finished":
                continue
            if row.skill_hash != skill_hash(await self._source_skill(n)):
                todo.stale.append(n.key)
                if self.rerun_stale:
                    todo.keys.add(n.key)
        if todo.stale:
            await self.publisher.publish(
                StaleAttempts(self.config.id, keys=todo.stale, rerun=self.rerun_stale)
            )
        close_over_sources(self.plan, todo.keys)
        return todo

    async def _run(self) -> RunSummary:
        self.publisher.notify(ExperimentStarted(self.config.id, attempts=len(self.plan.nodes)))
        todo = await self._todo()
        reused = len(self.plan.nodes) - len(todo.keys)
        for spec in self.plan.comparisons:
            await comparisons.update(self.publisher, self.config.id, spec, self.ids)
        slots = Slots(self.config)
        counts = {"ran": 0, "skipped": 0}
        interrupted = False
        try:
            schedule = self._schedule(todo.keys, slots, counts)
            finals = self.repeats.run_with(schedule, slots.busy, self._stop_requested)
            await self.paired.run_with(finals, self._stop_requested)
        except asyncio.CancelledError:
            interrupted = True
            raise
        finally:
            interrupted = await self._wind_down(slots, interrupted)
        by_state = await self.store.read(queries.attempt_states, self.config.id)
        resolved = sum(
            c.resolved for c in await self.store.read(queries.comparisons, self.config.id)
        )
        return RunSummary(
            self.config.id,
            len(self.plan.nodes),
            by_state,
            reused,
            counts["ran"],
            counts["skipped"],
            todo.stale,
            resolved,
            interrupted or self._stopping,
            await self.store.read(queries.ungraded_reasons, self.config.id),
        )

    async def _schedule(self, todo: set[str], slots: Slots, counts: dict[str, int]) -> None:
        """Start what may start, wait for one to end, repeat until nothing is left."""
        stop_requested = asyncio.ensure_future(self._stop_requested.wait())
        woken = self.control.waiter(todo)  # an operator's retry queues an attempt in todo
        try:
            while todo or slots.running:
                if self._stopping:
                    break
                await self._paused.wait()
                self._start_ready(todo, slots)
                if not slots.running:
                    if todo:  # nothing can start: a dependency never ran (should not happen)
                        raise RuntimeError(f"unschedulable attempts: {sorted(todo)[:5]}")
                    break
                done, _ = await asyncio.wait(
                    {*slots.running, stop_requested, woken}, return_when=asyncio.FIRST_COMPLETED
                )
                woken = self.control.waiter(todo) if woken in done else woken
                for task in [t for t in slots.running if t in done]:  # not the stop request
                    slots.done(task)
                    counts["skipped" if task.result() == "skipped" else "ran"] += 1
        finally:
            stop_requested.cancel()
            woken.cancel()

    def _start_ready(self, todo: set[str], slots: Slots) -> None:
        candidates = [
            n
            for n in self.plan.nodes
            if n.key in todo and slots.ready(n, todo) and slots.model_free(n)
        ]
        while candidates and len(slots.running) < slots.sandboxes:
            candidates.sort(key=slots.fairness)
            node = candidates.pop(0)
            todo.discard(node.key)
            slots.start(node, asyncio.create_task(self._run_node(node), name=node.key))
            candidates = [n for n in candidates if slots.model_free(n)]

    async def _wind_down(self, slots: Slots, interrupted: bool) -> bool:
        """Cancel what still runs, record it, and set the experiment's final state."""
        if slots.running:
            interrupted = True
            for task in slots.running:
                task.cancel()
            await self._record_interrupted()
            await asyncio.gather(*slots.running, return_exceptions=True)
        stopped = interrupted or self._stopping
        state = "stopped" if stopped else "finished"
        ended = (ExperimentStopped if stopped else ExperimentFinished)(self.config.id)
        if not self.lock_lost:  # else the new holder owns the experiment's state
            with contextlib.suppress(Exception):
                await self.publisher.publish(
                    ended, writes.set_experiment_state, self.config.id, state
                )
                return interrupted
        self.bus.notify(ended)  # not stored: still tell the live readers the run ended
        return interrupted

    async def _record_interrupted(self) -> None:
        """Shutdown: record the attempts in flight as interrupted at once, before their
        runners finish cleaning up (a sandbox can take a while), so the store says what
        happened even when the process exits next; the next run resumes them."""
        if self.lock_lost:  # the engine that took over has done so, and may be running them
            return
        with contextlib.suppress(Exception):
            await asyncio.shield(
                self.store.write(
                    writes.interrupt_active, self.config.id, STOPPED_WHILE_RUNNING, ended_at=now()
                )
            )

    async def _source_skill(self, node: PlanNode) -> str | None:
        if node.edited_skill is not None:
            return node.edited_skill
        assert node.source_key is not None
        skill = await self.store.read(queries.latest_skill, self.ids[node.source_key])
        return skill.text if skill else None

    async def _spec(self, node: PlanNode, attempt_id: int) -> AttemptSpec:
        """The spec of this attempt's next try."""
        source_skill = await self._source_skill(node) if node.is_treatment else None
        row = await self.store.read(queries.attempt, attempt_id)
        assert row is not None
        try_number = row.tries + 1
        return spec_for_node(
            self.config,
            node,
            attempt_id,
            try_number=try_number,
            source_skill=source_skill,
            work_dir=self.work_root / f"attempt-{attempt_id}" / f"try-{try_number}",
        )

    async def _run_node(self, node: PlanNode) -> str:
        attempt_id = self.ids[node.key]
        if (regrade := self.control.regrades.pop(attempt_id, None)) is not None:
            return await regrade_final(self, node, regrade)  # an operator's re-grade
        spec = await self.control.limits(await self._spec(node, attempt_id))
        if (reason := spec.skip_reason()) is not None:
            await self.publisher.publish(
                AttemptSkipped(self.config.id, attempt_id, reason=reason),
                writes.update_attempt,
                attempt_id,
                state="skipped",
                outcome="skipped",
                reason=reason,
                ended_at=now(),
            )
            await self._comparisons_for(node)
            return "skipped"
        if node.is_treatment:
            await attach_skill(self.store, node, attempt_id, self.ids[node.source_key or ""])
        await self.publisher.publish(
            AttemptStarted(self.config.id, attempt_id, key=node.key, try_number=spec.try_number),
            writes.update_attempt,
            attempt_id,
            state="running",
            tries=spec.try_number,
            started_at=now(),
            task_hash=task_hash(node, self.config),
            skill_hash=skill_hash(spec.source_skill),
            error=None,
            unsafe_no_jail=int(self.config.unsafe_no_jail),
        )
        outcome = await self.control.supervise(spec, self._call_runner(spec))
        if outcome is None:  # an operator stopped it (recorded by the control)
            await self._comparisons_for(node)
            return "stopped"
        await self._record_outcome(node, spec, outcome)
        return outcome.state

    async def _call_runner(self, spec: AttemptSpec) -> AttemptOutcome:
        attempt_id = spec.attempt_id
        observer = StoreObserver(self.publisher, self.config.id, attempt_id, spec.try_number)
        backend = RecordingBackend(
            self.repeats.ticker,  # the backend, counting gradings for the repeats' order
            self.publisher,
            experiment_id=self.config.id,
            attempt_id=attempt_id,
            try_number=spec.try_number,
            gate=self.gate,
        )
        try:
            return await self.runner(spec, backend, observer)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                if not self.lock_lost:  # else the engine that took over owns the attempt
                    await asyncio.shield(
                        self.publisher.publish(
                            AttemptInterrupted(self.config.id, attempt_id, error="cancelled"),
                            writes.update_attempt,
                            attempt_id,
                            state="interrupted",
                            error="cancelled",
                            ended_at=now(),
                        )
                    )
            raise
        except Exception as exc:  # noqa: BLE001 - a runner bug must not stop the experiment
            return AttemptOutcome(attempt_id, "failed", error=f"{type(exc).__name__}: {exc}")

    async def _record_outcome(
        self, node: PlanNode, spec: AttemptSpec, outcome: AttemptOutcome
    ) -> None:
        if self.lock_lost:  # another engine owns the experiment now
            return
        attempt_id = spec.attempt_id
        state = outcome.state if outcome.state in ("finished", "interrupted") else "failed"
        if self.retry.rerun_now(state, retryable=outcome.retryable, try_number=spec.try_number):
            # a transient failure: record it and run the attempt again (an execution retry)
            await self.publisher.publish(
                AttemptRetrying(self.config.id, attempt_id, error=outcome.error),
                writes.update_attempt,
                attempt_id,
                state="interrupted",
                error=outcome.error,
                ended_at=now(),
            )
            await self._run_node(node)
            return
        finished = state == "finished"
        verdict, reason = (
            outcome_of(outcome.final_feedback) if finished else failed_outcome(outcome)
        )
        final = outcome.final_feedback
        await self.publisher.publish(
            AttemptFinished(
                self.config.id,
                attempt_id,
                state=state,
                outcome=verdict,
                reason=reason,
                speedup=final.speedup if final else None,
            ),
            store_outcome,
            attempt_id,
            outcome,
            state=state,
            verdict=verdict,
            reason=reason,
        )
        await self.after_final(node, attempt_id, state, final)

    async def after_final(self, node: PlanNode, attempt_id: int, state: str,
                          final: Feedback | None) -> None:
        """An attempt's result is stored (its run, or a re-grade of its final): queue its
        repeated finals, mark a CPU preview, recompute its comparisons."""
        if state == "finished":
            await self.repeats.add(attempt_id)  # repeat 1; queues repeats 2..R
        if final is not None and final.in_preview and not self.preview:
            # graded without a GPU (a preview verdict, or any verdict of a CPU grading, such
            # as a kernel failing there): the whole experiment is a PREVIEW, never scored
            self.preview = True
            await self.store.write(writes.mark_experiment_preview, self.config.id)
        await self._comparisons_for(node)

    async def _comparisons_for(self, node: PlanNode) -> None:
        for spec in self.plan.comparisons_touching(node.key):
            await comparisons.update(self.publisher, self.config.id, spec, self.ids)
        await self.paired.add_resolved()  # a comparison resolved: its paired job, if any
