"""An operator's retry of an attempt its grader failed re-grades its stored final, never runs
the agent again; an attempt whose sandbox failed (no final) still runs again. Through the real
engine, store and control loop, with the simulated agent and grader (no GPU here: the judge's
out of memory is raised as torch names it)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from engine.config import parse_config
from engine.control import SCHEDULING_ENDED
from engine.grading.api import Feedback, GradeRequest
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import controls, queries
from storage.db import open_db
from storage.store import Store

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = """
[experiment]
name = "regrade"
problems = ["p28", "p36"]
max_submissions = 0

[[models]]
name = "sim/a"

[concurrency]
sandboxes = 4
attempts_per_model = 4

[grading]
final_repeats = 2

[retry]
max_tries = 1
"""


class OutOfMemoryError(RuntimeError):
    """What torch raises when the judge's own allocation fails (torch.OutOfMemoryError)."""


class OomOnce:
    """The simulated grader whose judge runs out of memory on the first p28 final only."""

    name = "oom-once"

    def __init__(self) -> None:
        self.inner = SimulatedBackend()
        self.oom_attempt: int | None = None
        self.finals: Counter[int] = Counter()  # final gradings by attempt id

    async def grade(self, request: GradeRequest) -> Feedback:
        if request.purpose == "final":
            self.finals[int(request.request_id.split("-")[0])] += 1
        if request.problem_id == "p28" and request.request_id.endswith("-final") and (
            self.oom_attempt is None
        ):
            self.oom_attempt = int(request.request_id.split("-")[0])
            return Feedback.decided(request, OutOfMemoryError("CUDA out of memory (15.8 GiB)"))
        return await self.inner.grade(request)

    async def close(self) -> None:
        return None


class HeldRunner:
    """The simulated agent; p36's attempts wait for ``release``, the first one to start dies
    with its sandbox (no final)."""

    def __init__(self, *, lose_sandbox: bool = True) -> None:
        self.inner = SimulatedRunner(0, 0.0, final_runtime_ms=1.0)
        self.release = asyncio.Event()
        self.calls: Counter[int] = Counter()
        self.sandbox_lost: int | None = None if lose_sandbox else 0

    async def __call__(self, spec: Any, backend: Any, observer: Any) -> Any:
        self.calls[spec.attempt_id] += 1
        if spec.problem_id == "p36":
            if self.sandbox_lost is None:
                self.sandbox_lost = spec.attempt_id
                raise RuntimeError("sandbox died: container exited 137")
            await self.release.wait()
        return await self.inner(spec, backend, observer)


async def _until(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := await check():
            return found
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


def _jobs(db: Any, attempt_id: int) -> list[str]:
    """The states of the grading jobs of an attempt's final submissions, oldest first."""
    return [r[0] for r in db.execute(
        "SELECT g.state FROM grading_jobs g JOIN submissions s ON s.id = g.submission_id "
        "WHERE s.attempt_id = ? AND s.purpose = 'final' ORDER BY g.id", [attempt_id])]


async def _refusals(store: Store, config: Any, attempt_id: int) -> list[tuple[str, str]]:
    """Two retries of an attempt ungraded again, applied by an engine whose re-grade of it
    is under way, then by one whose scheduler has started everything (no grading either)."""
    await store.write(lambda db: db.execute(
        "UPDATE attempts SET outcome = 'ungraded', reason = 'infra.oom' WHERE id = ?",
        [attempt_id]))
    engine = Engine(store, config, HeldRunner(), OomOnce())
    engine.ids = {r.plan_key: r.id for r in await store.read(
        queries.attempts_for_experiment, config.id)}
    done = asyncio.get_running_loop().create_future()
    done.cancel()
    answers = []
    for under_way in (True, False):
        engine.control.regrading = {attempt_id} if under_way else set()
        engine.control.woken = None if under_way else done
        command_id = await store.write(lambda db: db.execute(
            "INSERT INTO control_commands (experiment_id, attempt_id, action, actor, state, "
            "created_at) VALUES (?, ?, 'retry', 't', 'pending', 'x')",
            [config.id, attempt_id]).lastrowid)
        assert await engine.control.apply_pending() == 1
        command = await store.read(controls.command, command_id)
        answers.append((command.state, command.outcome))
    assert not engine.control.regrades and engine.control.todo == set()
    return answers


async def test_retry_regrades_an_ungraded_final_and_reruns_a_lost_sandbox(db_path: Path) -> None:
    config = parse_config(CONFIG)
    runner, grader = HeldRunner(), OomOnce()
    with Store(db_path) as store:
        run = asyncio.create_task(Engine(store, config, runner, grader).run())

        async def ready() -> list[queries.AttemptRow] | None:
            rows = await store.read(queries.attempts_for_experiment, config.id)
            p28 = [r for r in rows if r.problem_id == "p28"]
            lost = [r for r in rows if r.id == runner.sandbox_lost and r.state == "failed"]
            done = all(r.state == "finished" for r in p28)
            return [r for r in p28 if r.outcome == "ungraded"] + lost if done and lost else None

        oom, lost = await _until(ready)
        assert (oom.id, oom.reason, lost.reason) == (grader.oom_attempt, "infra.oom",
                                                     "infra.sandbox")
        comps = await store.read(queries.comparisons, config.id)
        assert not all(c.resolved for c in comps if c.problem_id == "p28")
        regrade, rerun = [
            await store.write(controls.submit, config.id, "retry", actor="t", attempt_id=a.id)
            for a in (oom, lost)]

        async def settled() -> list[controls.Command] | None:
            got = [await store.read(controls.command, c.id) for c in (regrade, rerun)]
            return got if all(c.state not in ("pending", "applying") for c in got) else None

        regrade, rerun = await _until(settled)
        runner.release.set()
        await run
        after = await store.read(queries.attempt, oom.id)
        again = await store.read(queries.attempt, lost.id)
        assert after is not None and again is not None
        comps = await store.read(queries.comparisons, config.id)
        intervened = await store.read(controls.intervened_attempts, config.id)
        jobs = await store.read(_jobs, oom.id)
        series = await store.read(lambda db: db.execute(
            "SELECT count(*) FROM timing_repeats WHERE attempt_id = ? AND state = 'done'",
            [oom.id]).fetchone()[0])
        refusals = await _refusals(store, config, oom.id)
    # the final re-graded: ungraded -> a result, the agent not run again, the old job kept
    assert regrade.state == "applied", regrade.outcome
    assert (after.state, after.outcome, after.reason, after.tries) == ("finished", "preview",
                                                                       None, 1)
    assert after.impl_median_ms is not None and runner.calls[oom.id] == 1
    assert grader.finals[oom.id] == 3  # the OOM, the re-grade, its repeated final
    assert jobs == ["error", "done"] and series == 2
    now, earlier = regrade.outcome.split("; earlier: ")
    assert '"outcome": "preview"' in now
    assert json.loads(earlier)["reason"] == "infra.oom"
    assert json.loads(earlier)["final"]["message"].startswith("judge error: OutOfMemoryError")
    assert all(c.resolved and c.rho is not None for c in comps if c.problem_id == "p28")
    assert intervened[oom.id] == ["retry"]
    # a re-grade is refused while one runs, and once the run starts nothing more
    assert refusals == [("refused", f"attempt {oom.id}'s final is being re-graded"),
                        ("refused", SCHEDULING_ENDED)]
    # no final (its sandbox died): the attempt runs again, its first try kept
    assert rerun.state == "applied" and "try 2 queued; try 1 kept" in rerun.outcome
    assert (again.tries, again.outcome, runner.calls[lost.id]) == (2, "preview", 2)


CHILD = """
import asyncio, os, signal, sys
sys.path.insert(0, sys.argv[3])
import engine.regrade
from engine.config import parse_config
from engine.control import SCHEDULING_ENDED
from engine.scheduler import Engine
from storage.store import Store
from test_attempt_regrade import CONFIG, HeldRunner, OomOnce

def die(*args, **kwargs):  # the re-grade's verdict is stored: die before its applied mark
    os.kill(os.getpid(), signal.SIGKILL)

engine.regrade.record_regrade = die
engine = Engine(Store(sys.argv[2]), parse_config(CONFIG), HeldRunner(lose_sandbox=False),
                OomOnce())
asyncio.run(engine.run())
"""


def _ungraded(db_path: Path) -> queries.AttemptRow | None:
    if not db_path.exists():
        return None
    db = open_db(db_path)
    try:
        p28 = [r for r in queries.attempts_for_experiment(db, "regrade") if r.problem_id == "p28"]
    finally:
        db.conn.close()
    done = p28 and all(r.state == "finished" for r in p28)
    return next((r for r in p28 if r.outcome == "ungraded"), None) if done else None


def test_a_killed_engine_mid_regrade_never_grades_twice_and_loses_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "regrade.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), "", str(db_path), str(HERE)],
        cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        oom = None
        while oom is None and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
            oom = _ungraded(db_path)
        assert oom is not None, child.stderr.read().decode() if child.stderr else ""
        db = open_db(db_path)
        with db.conn:
            cmd = controls.submit(db, "regrade", "retry", actor="t", attempt_id=oom.id)
        db.conn.close()
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    db = open_db(db_path)
    left, jobs = controls.command(db, cmd.id), _jobs(db, oom.id)
    db.conn.close()
    assert left.state == "applying" and jobs == ["error", "done"]  # its verdict was stored

    grader = OomOnce()
    grader.oom_attempt = 0  # a sound judge from now on

    async def resume() -> None:
        with Store(db_path) as store:
            for _ in range(2):  # a second run must not apply it again
                await Engine(store, parse_config(CONFIG),
                             SimulatedRunner(0, 0.0, final_runtime_ms=1.0), grader).run()

    asyncio.run(resume())
    db = open_db(db_path)
    done, jobs, row = controls.command(db, cmd.id), _jobs(db, oom.id), queries.attempt(db, oom.id)
    events = db.execute(
        "SELECT count(*) FROM events WHERE kind = ? AND payload_json LIKE ? AND "
        "payload_json LIKE '%\"applied\"%'", [controls.EVENT_KIND, f'%"command": {cmd.id},%']
    ).fetchone()[0]
    db.conn.close()
    assert done.state == "applied" and events == 1 and "infra.oom" in done.outcome
    assert jobs == ["error", "done"]  # the stored verdict applied, not graded again
    assert grader.finals[oom.id] == 1  # only its repeated final, after the re-grade
    assert row is not None
    assert (row.outcome, row.tries) == ("preview", 1)


async def test_a_retry_filed_after_the_run_is_applied_by_its_next_run(db_path: Path) -> None:
    """The run has ended with p28's final ungraded (the judge out of memory): a retry filed
    then waits for the experiment's next run, which re-grades that final first."""
    config = parse_config(CONFIG)
    grader = OomOnce()
    with Store(db_path) as store:
        first = HeldRunner(lose_sandbox=False)
        first.release.set()  # p36's attempts run at once
        await Engine(store, config, first, grader).run()
        rows = await store.read(queries.attempts_for_experiment, config.id)
        ungraded = next(r for r in rows if r.outcome == "ungraded")
        assert (ungraded.reason, ungraded.id) == ("infra.oom", grader.oom_attempt)
        command = await store.write(controls.submit, config.id, "retry", actor="t",
                                    attempt_id=ungraded.id)
        assert (command.state, command.outcome) == ("pending", controls.NEXT_RUN)
        runner = HeldRunner(lose_sandbox=False)
        runner.release.set()
        await Engine(store, config, runner, grader).run()
        after = await store.read(queries.attempt, ungraded.id)
        applied = await store.read(controls.command, command.id)
    assert applied.state == "applied" and "re-graded" in applied.outcome
    assert after is not None and after.outcome in ("pass", "preview")
    assert runner.calls[ungraded.id] == 0  # the agent did not run again
    assert grader.finals[ungraded.id] >= 2  # the failed final, then its re-grade
