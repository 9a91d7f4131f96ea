"""Repeated finals through the real scheduler and store: each passing final graded R times,
each repeat its own row, interleaved with other work, the runtime their median, and a resumed
run grading only what is not stored."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import parse_config
from engine.grading.api import Feedback, GradeRequest
from engine.grading.machine import machine_name
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage import repeats as repeat_rows
from storage.store import Store

CONFIG = """
[experiment]
name = "rep"
problems = ["p28"]
replicates = {replicates}
agent = "simulated"
grading = "simulated"

[[models]]
name = "sim/a"

[grading]
final_repeats = {repeats}
noise_cv = {{ p28 = 0.05 }}

[concurrency]
sandboxes = 2
grading_slots = 1
"""


@dataclass
class Logged:
    """The simulated grader, logging each grading's request id and source in order."""

    inner: SimulatedBackend
    name: str = "simulated"
    log: list[tuple[str, str]] = field(default_factory=list)

    async def grade(self, request: GradeRequest) -> Feedback:
        self.log.append((request.request_id, request.source))
        return await self.inner.grade(request)

    async def close(self) -> None:
        return None


def engine(store: Store, repeats: int, replicates: int = 2) -> tuple[Engine, Logged]:
    config = parse_config(
        CONFIG.format(repeats=repeats, replicates=replicates), check_problems=False
    )
    backend = Logged(SimulatedBackend(noise_cv={"p28": 0.05}))
    runner = SimulatedRunner(submissions=1, blank_skill_rate=0.0, final_runtime_ms=1.0)
    return Engine(store, config, runner, backend), backend


def finished(store: Store) -> list[queries.AttemptRow]:
    rows = store.read_sync(queries.attempts_for_experiment, "rep")
    assert rows and all(r.state == "finished" and r.outcome == "preview" for r in rows)
    return rows


async def test_each_final_graded_three_times_median_scores(db_path: Path) -> None:
    with Store(db_path) as store:
        eng, backend = engine(store, repeats=3)
        await eng.run()
        for attempt in finished(store):
            series = store.read_sync(
                repeat_rows.series_rows, repeat_rows.final_series(attempt.id, 1)
            )
            assert [r.repeat for r in series] == [1, 2, 3]
            assert all(r.state == "done" and r.host.endswith("simulated (preview)") for r in series)
            final = [
                s for s in store.read_sync(queries.submissions, attempt.id) if s.purpose == "final"
            ]
            assert series[0].impl_median_ms == final[0].impl_median_ms  # repeat 1 = the final
            values = [r.impl_median_ms for r in series]
            assert len(set(values)) == 3  # each repeat drew its own noise
            assert attempt.impl_median_ms == statistics.median(values)  # type: ignore[type-var]
        for c in store.read_sync(queries.comparisons, "rep"):
            base = store.read_sync(queries.attempt, c.baseline_attempt_id)
            treat = store.read_sync(queries.attempt, c.treatment_attempt_id)
            assert c.rho == base.impl_median_ms / treat.impl_median_ms  # type: ignore[operator]
    order = [rid for rid, _ in backend.log]
    repeats = [int(rid.rsplit("-r", 1)[1]) for rid in order if "-final-r" in rid]
    assert len(repeats) == 2 * 8
    for i in range(len(repeats)):  # repeat k+1 of any attempt never overtakes repeat k
        assert repeats[: i + 1].count(3) <= repeats[: i + 1].count(2)
    sources = [src for _, src in backend.log]
    for i in range(len(sources) - 1):  # never the same file twice in a row while others exist
        if sources[i] == sources[i + 1]:
            assert set(sources[i:]) == {sources[i]}, f"back to back at {order[i]}"


async def test_one_repeat_records_the_host_and_grades_nothing_more(db_path: Path) -> None:
    with Store(db_path) as store:
        eng, backend = engine(store, repeats=1)
        await eng.run()
        rows = finished(store)
        assert len(backend.log) == 2 * len(rows)  # one submission and one final each
        for attempt in rows:
            (only,) = store.read_sync(
                repeat_rows.series_rows, repeat_rows.final_series(attempt.id, 1)
            )
            assert only.repeat == 1 and only.host


async def test_a_resumed_run_grades_only_the_missing_repeats(db_path: Path) -> None:
    with Store(db_path) as store:
        eng, _ = engine(store, repeats=3)
        await eng.run()
        rows = finished(store)
        before = {
            (r.series, r.repeat): r.impl_median_ms
            for a in rows
            for r in store.read_sync(repeat_rows.series_rows, repeat_rows.final_series(a.id, 1))
        }
        lost, killed = rows[0], rows[1]

        def damage(db: Any) -> None:  # as a kill -9 would leave it: one lost, one running
            db.execute(
                "DELETE FROM timing_repeats WHERE series=? AND repeat=3",
                [repeat_rows.final_series(lost.id, 1)],
            )
            db.execute(
                "UPDATE timing_repeats SET state='running' WHERE series=? AND repeat=2",
                [repeat_rows.final_series(killed.id, 1)],
            )

        store.write_sync(damage)
        eng, backend = engine(store, repeats=3)
        await eng.run()
        assert sorted(rid for rid, _ in backend.log) == sorted(
            [f"{lost.id}-final-r3", f"{killed.id}-final-r2"]
        )
        after = {
            (r.series, r.repeat): r.impl_median_ms
            for a in rows
            for r in store.read_sync(repeat_rows.series_rows, repeat_rows.final_series(a.id, 1))
        }
        assert after == before  # the same draws (noise keyed by request), nothing lost


def test_the_grading_host_is_the_one_the_grader_named_else_this_machine_or_the_pool() -> None:
    from engine.final_repeats import grading_host

    assert grading_host("fleet", "NVIDIA H200", "node7:gpu3") == "node7 · NVIDIA H200"
    assert grading_host("fleet", "NVIDIA H200") == "fleet · NVIDIA H200"  # a pool, unnamed
    assert grading_host("local", "", "") == machine_name()
    reply = Feedback.from_dict({**Feedback("pass", host="node7:gpu3").to_dict()})
    assert reply.host == "node7:gpu3"  # what a service sends comes back whole
    assert Feedback.from_dict({"verdict": "pass"}).host == ""  # an older grader's reply
