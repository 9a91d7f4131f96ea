"""The engine's grading slots: a bound on gradings in flight, feedback before finals."""

from __future__ import annotations

import asyncio

import pytest

from engine.grading.backends.gate import GradingGate


async def _hold(gate: GradingGate, purpose: str, name: str, log: list[str],
                release: asyncio.Event) -> None:
    async with gate.slot(purpose):
        log.append(name)
        await release.wait()


async def test_feedback_waiting_behind_finals_goes_first() -> None:
    gate = GradingGate(1)
    log: list[str] = []
    release = asyncio.Event()
    first = asyncio.create_task(_hold(gate, "final", "busy", log, release))
    await asyncio.sleep(0)
    order = [("final", "final-1"), ("final", "final-2"), ("submission", "feedback-1"),
             ("final", "final-3"), ("submission", "feedback-2")]
    tasks = []
    for purpose, name in order:
        tasks.append(asyncio.create_task(_hold(gate, purpose, name, log, release)))
        await asyncio.sleep(0)
    assert gate.in_flight == 1 and gate.waiting == 5
    release.set()
    await asyncio.gather(first, *tasks)
    assert log == ["busy", "feedback-1", "feedback-2", "final-1", "final-2", "final-3"]
    assert gate.in_flight == 0 and gate.waiting == 0


async def test_never_more_than_the_slots_in_flight() -> None:
    gate = GradingGate(3)
    peak = 0

    async def grade() -> None:
        nonlocal peak
        async with gate.slot("submission"):
            peak = max(peak, gate.in_flight)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(grade() for _ in range(20)))
    assert peak == 3 and gate.in_flight == 0


async def test_a_cancelled_waiter_gives_up_its_place_and_loses_no_slot() -> None:
    gate = GradingGate(1)
    log: list[str] = []
    release = asyncio.Event()
    busy = asyncio.create_task(_hold(gate, "submission", "busy", log, release))
    await asyncio.sleep(0)
    doomed = asyncio.create_task(_hold(gate, "submission", "doomed", log, release))
    later = asyncio.create_task(_hold(gate, "final", "later", log, release))
    await asyncio.sleep(0)
    doomed.cancel()
    await asyncio.sleep(0)
    assert gate.waiting == 1
    release.set()
    await asyncio.gather(busy, later)
    assert log == ["busy", "later"] and gate.in_flight == 0


async def test_a_failing_grading_frees_its_slot() -> None:
    gate = GradingGate(1)
    with pytest.raises(RuntimeError):
        async with gate.slot("submission"):
            raise RuntimeError("grader crashed")
    assert gate.in_flight == 0
    async with gate.slot("final"):
        assert gate.in_flight == 1


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError):
        GradingGate(0)
