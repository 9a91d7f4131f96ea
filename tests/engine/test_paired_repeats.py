"""Paired finals through the real scheduler and store: each resolved comparison whose arms
passed is graded as one job, k gradings of each arm's final interleaved in pairs (each pair's
order drawn at random from the job's key), all on one grading slot (simulated slots; an http
fleet of real aiohttp services on loopback), each a row that names its slot; a resumed run
grades only what is not stored, on the job's slot; a slot that dies moves the rest of the job
and the rows say so; adaptive jobs stop when the test decides. The simulated grader stands in
for a GPU grader (no GPU here)."""

from __future__ import annotations

import asyncio
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from engine.config import ConfigError, parse_config
from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.slot_pool import SlotPool
from engine.paired_repeats import arm_at, arm_of, pair_diffs
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries
from storage import repeats as repeat_rows
from storage.store import Store

CONFIG = """
[experiment]
name = "pair"
problems = ["p28"]
replicates = 2
agent = "simulated"
grading = "simulated"

[[models]]
name = "sim/a"

[grading]
paired_repeats = {pairs}

[concurrency]
sandboxes = 2
grading_slots = 2
"""
def order(rows: list[repeat_rows.RepeatRow], n: int) -> list[str]:
    """The first ``n`` arms of the job the rows belong to, as :func:`arm_at` orders them."""
    return [arm_at(p, str(rows[0].pair_key)) for p in range(1, n + 1)]


@dataclass
class Logged:
    """A grader logging each request (id, slot asked for) and what answered."""

    inner: Any
    name: str = "simulated"
    log: list[tuple[str, str, str]] = field(default_factory=list)
    dead: str = ""  # a slot whose gradings end in infrastructure errors

    async def grade(self, request: GradeRequest) -> Feedback:
        feedback = await self.inner.grade(request)
        if self.dead and feedback.host == self.dead:
            feedback = Feedback("error", "crash", "slot lost", request.request_id, host=self.dead)
        self.log.append((request.request_id, request.slot, feedback.host))
        return feedback

    async def close(self) -> None:
        await self.inner.close()


def make_engine(store: Store, inner: Any, pairs: int = 3) -> tuple[Engine, Logged]:
    config = parse_config(CONFIG.format(pairs=pairs), check_problems=False)
    backend = Logged(inner)
    runner = SimulatedRunner(submissions=1, blank_skill_rate=0.0, final_runtime_ms=1.0)
    return Engine(store, config, runner, backend), backend


def simulated() -> SimulatedBackend:
    return SimulatedBackend(slots=2, delay_s=0.01, noise_cv={"p28": 0.05})


def pairing(store: Store) -> dict[int, list[repeat_rows.RepeatRow]]:
    return store.read_sync(repeat_rows.paired_rows, "pair")


def check_one_slot_each(store: Store, pairs: int = 3) -> dict[int, str]:
    """Every resolved comparison has its whole job, in order, done, on one slot."""
    jobs = pairing(store)
    comparisons = store.read_sync(queries.comparisons, "pair")
    assert comparisons and sorted(jobs) == sorted(c.id for c in comparisons if c.resolved)
    slots = {}
    for comparison in comparisons:
        rows = jobs[comparison.id]
        assert [r.repeat for r in rows] == list(range(1, 2 * pairs + 1))
        assert [r.arm for r in rows] == order(rows, 2 * pairs)
        assert {r.attempt_id for r in rows if r.arm == "baseline"} == {
            comparison.baseline_attempt_id
        }
        assert all(r.state == "done" and r.passed for r in rows)
        assert len({r.slot for r in rows}) == 1, [r.slot for r in rows]
        slots[comparison.id] = rows[0].slot
    return slots


def test_each_pair_holds_both_arms_in_an_order_drawn_per_pair() -> None:
    keys = [f"pair:e:{i}" for i in range(2000)]
    for key in keys[:50]:
        arms = [arm_at(p, key) for p in range(1, 11)]
        assert all({arms[i], arms[i + 1]} == {"baseline", "treatment"} for i in range(0, 10, 2))
        assert arms == [arm_at(p, key) for p in range(1, 11)]  # the same on every resume
    # each pair's first arm a fair coin, whatever the pair's place (A B B A … always opened
    # pair 1 with the baseline and pair 2 with the treatment)
    for pair in (1, 2, 3, 4):
        share = sum(arm_at(2 * pair - 1, k) == "baseline" for k in keys) / len(keys)
        assert 0.46 < share < 0.54, (pair, share)


def test_a_periodic_grader_effect_is_not_called_help() -> None:
    """The 2026-12-07 H100 run: in one A/A job the baseline's gradings ran 4 % slower in every
    pair of A B B A …, beside a 4-grading cycle in the grader's own wall times. An effect with
    the order's period is confounded with the arm by a fixed order; drawn per pair it is noise."""
    rng = random.Random(7)

    def called(arm_of_position: Any) -> float:
        calls = 0
        for job in range(400):
            logs: dict[str, list[float]] = {"baseline": [], "treatment": []}
            for position in range(1, 11):
                cycle = 0.04 if (position - 1) % 4 in (0, 3) else 0.0
                logs[arm_of_position(position, f"pair:e:{job}")].append(
                    cycle + rng.gauss(0.0, 0.01))
            diffs = [b - t for b, t in zip(logs["baseline"], logs["treatment"], strict=True)]
            calls += stats.ttest_1samp(diffs, 0.0).pvalue < 0.05
        return calls / 400

    def fixed(position: int, key: str) -> str:
        return "baseline" if (position - 1) % 4 in (0, 3) else "treatment"

    assert called(fixed) > 0.9  # what the fixed order did
    assert called(arm_at) < 0.08


def test_a_job_begun_in_another_order_stays_in_pairs() -> None:
    key = "pair:e:1"
    stored = {9: "baseline"}  # an A B B A … job stopped after position 9
    other = "treatment"
    assert arm_of(10, key, stored) == other
    assert arm_of(10, key, {}) == arm_at(10, key)
    assert arm_of(11, key, {**stored, 10: other}) == arm_at(11, key)


def test_pairs_match_by_rank() -> None:
    arms = ["baseline", "treatment", "treatment", "baseline", "baseline", "treatment"]

    def row(repeat: int, value: float | None, verdict: str = "pass") -> Any:
        return repeat_rows.RepeatRow(
            repeat, "s", repeat, "final", "e", 1, "p28", "cute", "h", "h", "done", verdict,
            None, value, 1.0, 1.0, "", None, "k", arms[repeat - 1],
        )  # fmt: skip

    rows = [row(1, 2.0), row(2, 1.0), row(3, 4.0), row(4, 2.0), row(5, 1.0, "fail"), row(6, 1.0)]
    diffs = pair_diffs(rows)  # pair 1: 2/1; pair 2: 2/4; pair 3: a failed baseline, left out
    assert diffs == pytest.approx([math.log(2.0), math.log(0.5)])
    assert pair_diffs([row(1, 1.0), row(2, float("inf"))]) == []


async def test_a_named_slot_is_waited_for_while_others_take_any() -> None:
    pool = SlotPool(["a", "b"], str)
    first = await pool.acquire()
    second = await pool.acquire()
    wants_first = asyncio.ensure_future(pool.acquire(first))
    anyone = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)
    pool.release(second)  # not the one the first waiter named: the second waiter's
    await asyncio.sleep(0)
    assert anyone.done() and anyone.result() == second and not wants_first.done()
    pool.release(first)
    assert await wants_first == first
    pool.release(first)
    assert await asyncio.wait_for(pool.acquire("gpu9"), 0.1) == first  # not held here: any


def analyze_json(db: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from app.cli import main

    capsys.readouterr()
    assert (
        main(["analyze", "--db", str(db), "--experiment", "pair", "--draws", "10", "--json"]) == 0
    )
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


async def test_each_comparison_is_paired_on_one_slot_through_the_scheduler(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store(db_path) as store:
        eng, backend = make_engine(store, simulated())
        await eng.run()
        slots = check_one_slot_each(store)
        assert len(set(slots.values())) == 2  # the two slots both took jobs
        for attempt in store.read_sync(queries.attempts_for_experiment, "pair"):
            final = [
                s for s in store.read_sync(queries.submissions, attempt.id) if s.purpose == "final"
            ]
            assert attempt.impl_median_ms == final[0].impl_median_ms  # solo keeps its own final
        finals = store.read_sync(repeat_rows.experiment_finals, "pair")
        assert all(r.pair_key is None for rows in finals.values() for r in rows)
    pairing = analyze_json(db_path, capsys)["paired"]["comparisons"]  # mkb analyze --json
    assert {p["comparison_id"]: p["slots"] for p in pairing} == {
        cid: [slot] for cid, slot in slots.items()
    }
    assert {(p["status"], p["pairs"]) for p in pairing} == {("paired", 3)}
    paired = [(rid, asked, got) for rid, asked, got in backend.log if "-pair" in rid]
    assert len(paired) == 4 * 6
    for rid, asked, got in paired:  # after its first grading, each names the job's slot
        assert asked in ("", got), rid
        assert asked or rid.endswith("-p1"), rid


async def test_a_resumed_run_grades_only_the_missing_positions_on_the_jobs_slot(
    db_path: Path,
) -> None:
    with Store(db_path) as store:
        eng, _ = make_engine(store, simulated())
        await eng.run()
        slots = check_one_slot_each(store)
        before = {
            (r.series, r.repeat): r.impl_median_ms for rs in pairing(store).values() for r in rs
        }
        lost, killed = sorted(slots)[:2]

        def damage(db: Any) -> None:  # as a kill -9 would leave it: one lost, one running
            key = repeat_rows.pair_key
            db.execute(
                "DELETE FROM timing_repeats WHERE pair_key=? AND repeat>=5", [key("pair", lost)]
            )
            db.execute(
                "UPDATE timing_repeats SET state='running' WHERE pair_key=? AND repeat=3",
                [key("pair", killed)],
            )

        store.write_sync(damage)
        eng, backend = make_engine(store, simulated())
        await eng.run()
        graded = sorted(rid.split("-pair")[1] for rid, _, _ in backend.log)
        assert graded == sorted([f"{lost}-p5", f"{lost}-p6", f"{killed}-p3"])
        for rid, asked, _ in backend.log:  # a resumed job goes on on its own slot
            assert asked == slots[int(rid.split("-pair")[1].split("-")[0])], rid
        after = {
            (r.series, r.repeat): r.impl_median_ms for rs in pairing(store).values() for r in rs
        }
        assert after == before  # the same draws (noise keyed by request), nothing lost
        assert check_one_slot_each(store) == slots


@dataclass
class LosesASlot:
    """Two simulated slots; the first slot a job's third grading names dies then: gradings
    named to it end in infrastructure errors, the others go to the slot left (as a pool
    steers around a dead host)."""

    inner: SimulatedBackend = field(default_factory=simulated)
    name: str = "simulated"
    dead: str = ""

    async def grade(self, request: GradeRequest) -> Feedback:
        if not self.dead and request.request_id.endswith("-p3"):
            self.dead = request.slot
        if self.dead and request.slot == self.dead:
            return Feedback("error", "crash", "slot lost", request.request_id)
        if self.dead:
            alive = "sim1" if self.dead.endswith("sim0") else "sim0"
            request = GradeRequest(**{**request.to_dict(), "slot": f"{self.dead[:-4]}{alive}"})
        return await self.inner.grade(request)

    async def close(self) -> None:
        return None


async def test_a_slot_that_dies_moves_the_rest_of_the_job_and_the_rows_say_so(
    db_path: Path,
) -> None:
    with Store(db_path) as store:
        eng, _ = make_engine(store, LosesASlot())
        await eng.run()
        jobs = pairing(store)
        for rows in jobs.values():  # no position lost, none graded twice
            assert [(r.repeat, r.state) for r in rows] == [(p, "done") for p in range(1, 7)]
        moved = [
            [r.slot for r in rows] for rows in jobs.values() if len({r.slot for r in rows}) > 1
        ]
        assert moved, "no job lost its slot"
        for slots in moved:  # positions 1-2 on the lost slot, the rest on the one left
            assert slots[0] == slots[1] != slots[2] and len(set(slots[2:])) == 1, slots


async def test_an_adaptive_job_stops_when_the_test_decides(db_path: Path) -> None:
    with Store(db_path) as store:
        eng, backend = make_engine(store, simulated(), pairs=5)
        seen: list[int] = []

        def decide(diffs: list[float], sigma: Any, dof: Any, most: int, **_: Any) -> str:
            seen.append(len(diffs))
            return "continue" if len(diffs) < 2 else "within"

        eng.paired.adaptive, eng.paired.decide = True, decide
        await eng.run()
        for rows in pairing(store).values():
            assert [r.arm for r in rows] == order(rows, 4)  # two pairs, then the test decided
        assert max(seen) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('paired_repeats = "adaptiv"', "[grading].paired_repeats: must be a whole number"),
        ("paired_repeats = -1", "[grading].paired_repeats: must be a whole number"),
        ("paired_repeats = 2\npaired_max = 4", "[grading].paired_max: applies only with"),
        ('paired_repeats = "adaptive"\npaired_max = 1', "[grading].paired_max: must be"),
    ],
)
def test_a_bad_paired_setting_is_refused_naming_the_field(line: str, message: str) -> None:
    toml = CONFIG.format(pairs=0).replace("paired_repeats = 0", line)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(toml, check_problems=False)
    ok = parse_config(CONFIG.format(pairs='"adaptive"'), check_problems=False)
    assert (ok.paired_repeats, ok.paired_adaptive) == (10, True)


async def test_an_http_fleet_pairs_each_comparison_on_one_service_slot(db_path: Path) -> None:
    from engine.grading.backends.fleet import FleetBackend
    from engine.grading.backends.http_server import start_server

    class Served(SimulatedBackend):
        def status(self) -> dict[str, Any]:
            return {"slots": ["sim0", "sim1"], "queued": 0}

    servers = [
        await start_server(Served(slots=2, delay_s=0.01), "127.0.0.1", 0, None) for _ in range(2)
    ]
    fleet = FleetBackend([f"http://127.0.0.1:{port}" for _, port in servers])
    try:
        with Store(db_path) as store:
            eng, backend = make_engine(store, fleet)
            await eng.run()
            slots = check_one_slot_each(store)
    finally:
        await fleet.close()
        for runner, _ in servers:
            await runner.cleanup()
    ports = {slot.rsplit("@", 1)[1] for slot in slots.values()}
    assert ports <= {str(port) for _, port in servers} and all("@" in s for s in slots.values())
    assert len({got for _, _, got in backend.log}) >= 2  # the fleet spread its other work


async def test_adaptive_pairs_stop_at_two_on_a_clear_help_with_the_band_and_the_rule(
    db_path: Path,
) -> None:
    # the repeated finals give the band of (p28, DSL, host): two pairs then carry its dof
    toml = CONFIG.format(pairs='"adaptive"\npaired_max = 6\nfinal_repeats = 3')
    config = parse_config(toml, check_problems=False)
    runner = SimulatedRunner(
        submissions=1, blank_skill_rate=0.0, final_runtime_ms=1.0, skill_runtime_factor=0.5
    )
    backend = SimulatedBackend(slots=2, noise_cv={"p28": 0.01})
    with Store(db_path) as store:
        await Engine(store, config, runner, backend).run()
        jobs = pairing(store)
        comparisons = {c.id: c for c in store.read_sync(queries.comparisons, "pair")}
    assert jobs
    for cid, rows in jobs.items():  # a 2x help at CV 1 %: decided after two pairs
        assert [r.arm for r in rows] == order(rows, 4), (comparisons[cid].direction, len(rows))
        assert pair_diffs(rows) == pytest.approx([math.log(2.0)] * 2, rel=0.05)
