"""The engine through the real scheduler and store, with instant simulated agents/graders."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.attempts.spec import AttemptOutcome, AttemptSpec
from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage.store import Store

CONFIG = """
[experiment]
name = "sched"
problems = ["p28"]
replicates = 3

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"

[concurrency]
sandboxes = 3
attempts_per_model = 2
"""


def outcome_table(store: Store, experiment_id: str) -> list[tuple[object, ...]]:
    rows = store.read_sync(queries.attempts_for_experiment, experiment_id)
    comps = store.read_sync(queries.comparisons, experiment_id)
    return sorted((r.plan_key, r.state, r.outcome, r.impl_median_ms) for r in rows) + sorted(
        (c.model, c.problem_id, c.direction, c.replicate, c.resolved, c.rho, c.verdict)
        for c in comps
    )


async def test_full_run_resolves_every_comparison(db_path: Path) -> None:
    config = parse_config(CONFIG)
    with Store(db_path) as store:
        summary = await Engine(store, config, SimulatedRunner(submissions=3),
                               SimulatedBackend()).run()
        assert summary.attempts == 24
        assert summary.by_state.get("finished", 0) + summary.skipped == 24
        comps = store.read_sync(queries.comparisons, config.id)
        assert len(comps) == 12 and all(c.resolved for c in comps)
        for c in comps:
            base = store.read_sync(queries.attempt, c.baseline_attempt_id)
            treat = store.read_sync(queries.attempt, c.treatment_attempt_id)
            if treat.state == "skipped":
                assert c.rho == 1.0 and c.skipped == 1
            elif base.outcome == "preview" and treat.outcome == "preview":
                assert c.rho == pytest.approx(base.impl_median_ms / treat.impl_median_ms)
            elif treat.outcome == "preview":
                assert c.rho == 4.0
            elif base.outcome == "preview":
                assert c.rho == 0.25
            else:
                assert c.rho == 1.0
            expected = "help" if c.rho > 1 else "harm" if c.rho < 1 else "neutral"
            assert c.verdict == expected
        subs = store.read_sync(lambda db: db.execute(
            "SELECT count(*), sum(state='done') FROM submissions").fetchone())
        assert subs[0] == subs[1] > 0


async def test_rerun_reuses_finished_attempts(db_path: Path) -> None:
    config = parse_config(CONFIG)
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=1), SimulatedBackend()).run()
        before = outcome_table(store, config.id)
        again = await Engine(store, config, SimulatedRunner(submissions=1),
                             SimulatedBackend()).run()
        assert again.ran == 0 and again.reused == 24
        assert outcome_table(store, config.id) == before


@dataclass
class CountingRunner:
    """Tracks concurrency and dependency order while delegating to the simulated agent."""

    inner: SimulatedRunner = field(default_factory=lambda: SimulatedRunner(submissions=1))
    running: int = 0
    peak: int = 0
    per_model_peak: dict[str, int] = field(default_factory=dict)
    per_model: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)

    async def __call__(self, job: AttemptSpec, backend: GradingBackend, observer: object
                       ) -> AttemptOutcome:
        node = job.node
        if node.source_key and node.source_key not in self.finished:
            self.order_violations.append(node.key)
        self.running += 1
        self.per_model[node.model] = self.per_model.get(node.model, 0) + 1
        self.peak = max(self.peak, self.running)
        self.per_model_peak[node.model] = max(self.per_model_peak.get(node.model, 0),
                                              self.per_model[node.model])
        await asyncio.sleep(0.01)
        try:
            return await self.inner(job, backend, observer)
        finally:
            self.running -= 1
            self.per_model[node.model] -= 1
            self.finished.append(node.key)


async def test_concurrency_bounds_and_dependencies(db_path: Path) -> None:
    config = parse_config(CONFIG)
    runner = CountingRunner()
    with Store(db_path) as store:
        await Engine(store, config, runner, SimulatedBackend()).run()
    assert runner.peak <= 3 and max(runner.per_model_peak.values()) <= 2
    assert runner.order_violations == []
    assert {k.split("|")[0] for k in runner.finished[:4]} == {"sim/a", "sim/b"}  # fairness


@dataclass
class DyingBackend:
    """A grader whose worker dies on the first try of every job."""

    inner: SimulatedBackend = field(default_factory=SimulatedBackend)
    name: str = "dying"
    seen: dict[str, int] = field(default_factory=dict)

    async def grade(self, request: GradeRequest) -> Feedback:
        self.seen[request.source] = self.seen.get(request.source, 0) + 1
        if self.seen[request.source] == 1:
            raise ConnectionResetError("worker died mid-job")
        return await self.inner.grade(request)

    async def close(self) -> None:
        return None


async def test_grader_dying_mid_job_is_retried_and_graded_once(db_path: Path) -> None:
    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=2), DyingBackend()).run()
        jobs = store.read_sync(lambda db: db.execute(
            "SELECT submission_id, group_concat(state, ',') FROM grading_jobs "
            "GROUP BY submission_id").fetchall())
        assert jobs and all(states == "error,done" for _, states in jobs)
        graded = store.read_sync(lambda db: db.execute(
            "SELECT count(*) FROM submissions WHERE state='done' AND graded_at IS NOT NULL"
        ).fetchone()[0])
        assert graded == len(jobs)


@dataclass
class FlakyRunner:
    """An agent whose model endpoint fails on the first try of every attempt."""

    inner: SimulatedRunner = field(default_factory=lambda: SimulatedRunner(submissions=1))
    tries: dict[int, int] = field(default_factory=dict)

    async def __call__(self, job: AttemptSpec, backend: GradingBackend, observer: object
                       ) -> AttemptOutcome:
        self.tries[job.attempt_id] = job.try_number
        if job.try_number == 1:
            return AttemptOutcome(job.attempt_id, "failed",
                                  error="litellm.APIConnectionError: refused")
        return await self.inner(job, backend, observer)


async def test_failed_endpoint_is_retried_within_three_tries(db_path: Path) -> None:
    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    runner = FlakyRunner()
    with Store(db_path) as store:
        summary = await Engine(store, config, runner, SimulatedBackend()).run()
        assert summary.by_state.get("failed", 0) == 0
        rows = store.read_sync(queries.attempts_for_experiment, config.id)
        ran = [r for r in rows if r.state == "finished"]
        assert ran and all(r.tries == 2 for r in ran)


async def test_always_failing_attempt_stops_after_max_tries(db_path: Path) -> None:
    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))

    async def broken(job: AttemptSpec, backend: GradingBackend, observer: object
                     ) -> AttemptOutcome:
        return AttemptOutcome(job.attempt_id, "failed", error="sandbox failed to start")

    with Store(db_path) as store:
        await Engine(store, config, broken, SimulatedBackend()).run()
        rows = store.read_sync(queries.attempts_for_experiment, config.id)
        solos = [r for r in rows if r.arm.startswith("solo")]
        # our failure, never the agent's: no result, with its reason
        assert solos and all(
            r.state == "failed" and r.tries == 3 and r.outcome == "ungraded"
            and r.reason == "infra.sandbox" for r in solos
        )
        treatments = [r for r in rows if r.arm.endswith("skill")]
        assert all(r.state == "skipped" for r in treatments)  # no source skill to transfer
        comparisons = store.read_sync(queries.comparisons, config.id)
        assert comparisons and not any(c.resolved or c.rho is not None for c in comparisons)
        assert store.read_sync(queries.ungraded_reasons, config.id) == {
            "infra.sandbox": len(solos)
        }


async def test_blank_source_skill_skips_treatment(db_path: Path) -> None:
    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=1, blank_skill_rate=1.0),
                     SimulatedBackend()).run()
        rows = store.read_sync(queries.attempts_for_experiment, config.id)
        treatments = [r for r in rows if r.arm.endswith("skill")]
        assert treatments and all(r.outcome == "skipped" for r in treatments)
        assert all(c.skipped and c.rho == 1.0
                   for c in store.read_sync(queries.comparisons, config.id))


async def test_stale_attempts_rerun_only_when_asked(db_path: Path) -> None:
    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=1), SimulatedBackend()).run()
        store.write_sync(lambda db: db.execute(
            "UPDATE attempts SET task_hash='old' WHERE arm='solo_cute'"))
        kept = await Engine(store, config, SimulatedRunner(submissions=1),
                            SimulatedBackend()).run()
        assert len(kept.stale) == 2 and kept.ran == 0
        redo = await Engine(store, config, SimulatedRunner(submissions=1), SimulatedBackend(),
                            rerun_stale=True).run()
        # the stale solos and the treatments fed by them run again
        assert redo.ran + redo.skipped == 4


async def test_cancel_marks_running_attempts_interrupted_then_resumes(db_path: Path) -> None:
    config = parse_config(CONFIG)
    slow = SimulatedRunner(submissions=1, delay_s=0.2)
    with Store(db_path) as store:
        task = asyncio.create_task(Engine(store, config, slow, SimulatedBackend()).run())
        for _ in range(200):  # cancel while attempts run (a loaded machine starts them late)
            await asyncio.sleep(0.05)
            if "running" in store.read_sync(queries.attempt_states, config.id):
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        states = store.read_sync(queries.attempt_states, config.id)
        assert "running" not in states and states.get("interrupted", 0) >= 1
        summary = await Engine(store, config, SimulatedRunner(submissions=1),
                               SimulatedBackend()).run()
        assert set(summary.by_state) <= {"finished", "skipped"}


async def test_outer_retry_of_a_failed_grading_reuses_the_submission(db_path: Path) -> None:
    from engine.recording import RecordingBackend
    from engine.retry import RetryPolicy

    @dataclass
    class AlwaysDown:
        name: str = "down"
        calls: int = 0

        async def grade(self, request: GradeRequest) -> Feedback:
            self.calls += 1
            if self.calls <= 4:
                return Feedback(verdict="error", reason="crash", message="worker died")
            return Feedback(verdict="preview", speedup=1.0, impl_median_ms=1.0)

        async def close(self) -> None:
            return None

    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    with Store(db_path) as store:
        engine = Engine(store, config, SimulatedRunner(submissions=1), SimulatedBackend())
        ids = await store.write(engine._prepare)
        attempt_id = next(iter(ids.values()))
        inner = AlwaysDown()
        backend = RecordingBackend(inner, engine.publisher, experiment_id=config.id,
                                   attempt_id=attempt_id, try_number=1)
        policy = RetryPolicy(max_tries=3)
        request = GradeRequest("p28", "cute", "def solve(): pass\n", request_id="s1")
        first = await policy.grade(backend, request)  # three jobs, all errors
        second = await policy.grade(backend, request)  # the caller's own retry: same submission
        assert first.verdict == "error" and second.verdict == "preview"
        rows = store.read_sync(lambda db: db.execute(
            "SELECT s.n, count(g.id), sum(g.state='done') FROM submissions s "
            "JOIN grading_jobs g ON g.submission_id = s.id GROUP BY s.id").fetchall())
        assert rows == [(1, 5, 1)]


async def test_runner_that_retries_gradings_gets_one_try_per_call(db_path: Path) -> None:
    """A runner with its own grading retries (the Terminus-2 mailbox) is not retried twice."""

    @dataclass
    class RetryingRunner:
        calls: int = 0

        async def __call__(self, job: AttemptSpec, backend: GradingBackend, observer: object
                           ) -> AttemptOutcome:
            source = f"final of attempt {job.attempt_id}\n"
            request = GradeRequest(job.node.problem_id, job.node.dsl, source, purpose="final")
            for _ in range(3):  # the runner's own retry loop
                self.calls += 1
                final = await backend.grade(request)
                if final.verdict != "error":
                    break
            return AttemptOutcome(job.attempt_id, "finished", final_feedback=final, skill="s")

    config = parse_config(CONFIG.replace("replicates = 3", "replicates = 1"))
    runner = RetryingRunner()
    with Store(db_path) as store:
        await Engine(store, config, runner, DyingBackend()).run()
        jobs = store.read_sync(lambda db: db.execute(
            "SELECT submission_id, group_concat(state, ',') FROM grading_jobs "
            "GROUP BY submission_id").fetchall())
    # each first try dies; with one try per call the runner's own retry grades it, on the
    # same submission row
    assert len(jobs) == 8 and all(states == "error,done" for _, states in jobs)
    assert runner.calls == 16


@dataclass
class PeakBackend:
    """A slow grader that records how many gradings it holds at once."""

    inner: SimulatedBackend = field(default_factory=lambda: SimulatedBackend(delay_s=0.01))
    name: str = "peak"
    holding: int = 0
    peak: int = 0

    async def grade(self, request: GradeRequest) -> Feedback:
        self.holding += 1
        self.peak = max(self.peak, self.holding)
        try:
            return await self.inner.grade(request)
        finally:
            self.holding -= 1

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("slots", [1, 2])
async def test_grading_slots_bound_gradings_in_flight(db_path: Path, slots: int) -> None:
    config = parse_config(CONFIG + f"grading_slots = {slots}\n")
    backend = PeakBackend()
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=3), backend).run()
    assert backend.peak == slots  # three sandboxes would otherwise grade three at once
