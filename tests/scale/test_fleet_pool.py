"""The fleet client pool and status poller against real grading services on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from engine.grading.api import GradeRequest
from engine.grading.backends.fleet import (
    FleetBackend,
    FleetMonitor,
    FleetSnapshot,
    free_port,
    summarise,
)
from engine.grading.backends.http_client import HttpBackend
from engine.grading.backends.http_server import start_server
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig

HONEST = (
    Path(__file__).parents[1] / "grading" / "fixtures" / "honest" / "p28_plain.py"
).read_text()
TOKEN = "pool-token"


@pytest.fixture
async def live() -> AsyncIterator[str]:
    backend = LocalBackend(
        gpus=None,
        preview_slots=1,
        preload_dsls=False,
        config=EvalConfig(timeout_s=20.0, memory_limit_mb=3072),
    )
    runner, port = await start_server(backend, "127.0.0.1", 0, TOKEN)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.slow
async def test_a_failed_host_cools_down_while_the_live_one_is_busy(live: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    fleet = FleetBackend([dead, live], TOKEN, tries=1, cooldown_s=30.0)
    plain = HttpBackend([dead, live], TOKEN, tries=1)
    try:
        # both pools learn that `dead` refuses connections
        for pool in (fleet, plain):
            for _ in range(3):  # the rotation reaches `dead` within two requests
                if pool.failures[dead] == 0:
                    await pool.grade(GradeRequest("p28", "cute", HONEST))
            assert pool.failures[dead] == 1
        assert fleet.cooling(dead) and not fleet.cooling(live)
        # while `live` grades, the plain pool ranks the idle dead host first; the fleet does not
        busy = [
            asyncio.create_task(pool.grade(GradeRequest("p28", "cute", HONEST)))
            for pool in (fleet, plain)
        ]
        async with asyncio.timeout(60):
            while fleet.in_flight[live] == 0 or plain.in_flight[live] == 0:
                await asyncio.sleep(0.01)
        assert plain.order()[0] == dead
        assert fleet.order()[0] == live
        assert [fb.verdict for fb in await asyncio.gather(*busy)] == ["preview", "preview"]
        # a second failure doubles the wait; an expired wait puts the host back in rotation
        fleet.cooldown_s = 0.2
        with pytest.raises(aiohttp.ClientError):
            await fleet._post(dead, GradeRequest("p28", "cute", HONEST))
        fleet.failures[dead] += 1  # as grade() counts it
        assert fleet.cooling(dead)
        await asyncio.sleep(0.5)
        assert not fleet.cooling(dead)
    finally:
        await fleet.close()
        await plain.close()


@pytest.mark.slow
async def test_a_request_that_failed_on_a_host_is_retried_elsewhere(live: str) -> None:
    """The engine retries a grading with the same request id; once the dead host's cooldown
    has expired it is the idlest host again, but not for that request (the fleet test lost a
    submission this way: three tries, all refused by the killed grader)."""
    dead = f"http://127.0.0.1:{free_port()}"
    fleet = FleetBackend([dead, live], TOKEN, tries=1, cooldown_s=0.01)
    request = GradeRequest("p28", "cute", HONEST, request_id="a1-s1")
    try:
        fleet.in_flight[live] += 1  # live looks busy: the first try goes to the dead host
        first = await fleet.grade(request)
        assert first.verdict == "error" and dead in first.message
        await asyncio.sleep(0.05)
        assert not fleet.cooling(dead)
        assert fleet.order()[0] == dead  # any other request: the idle host first
        assert fleet.order(request)[0] == live  # this one: the host that has not failed it
        fleet.in_flight[live] -= 1
        second = await fleet.grade(request)
        assert second.verdict == "preview", second.message
        assert request.request_id not in fleet.failed_for  # forgotten once answered
    finally:
        await fleet.close()


@pytest.mark.slow
async def test_monitor_reports_queue_depth_and_utilisation(live: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    pool = FleetBackend([live, dead], TOKEN)
    seen: list[int] = []

    async def record(snapshot: FleetSnapshot) -> None:  # e.g. an events-table write
        seen.append(snapshot.up)

    monitor = FleetMonitor(pool, interval_s=0.02, on_snapshot=record)
    try:
        idle = await monitor.poll()
        assert (idle.hosts, idle.up, idle.slots, idle.busy) == (2, 1, 1, 0)
        assert list(idle.errors) == [dead]
        jobs = [
            asyncio.create_task(pool._post(live, GradeRequest("p28", "cute", HONEST)))
            for _ in range(3)
        ]
        monitor.start()
        async with asyncio.timeout(60):
            while not any(s.busy == 1 and s.queued >= 1 for s in monitor.snapshots):
                await asyncio.sleep(0.02)
        results = await asyncio.gather(*jobs)
        await monitor.stop()
        assert all(fb is not None and fb.verdict == "preview" for fb, _ in results)
        done = await monitor.poll()
        assert done.completed == 3 and done.busy == 0
        assert monitor.max_queue_depth() >= 1
        assert 0.0 < monitor.mean_utilisation() <= 1.0
        assert done.to_dict()["utilisation"] == 0.0
        assert len(seen) == len(monitor.snapshots) and set(seen) == {1}
    finally:
        await monitor.stop()
        await pool.close()


def test_summarise_counts_only_hosts_that_answer() -> None:
    snap = summarise(
        {
            "http://a": {"slots": ["cuda:0", "cuda:1"], "busy": 2, "queued": 5, "completed": 7},
            "http://b": {"slots": ["cuda:0"], "busy": 0, "queued": 0, "completed": 1},
            "http://c": {"error": "ClientConnectorError: refused"},
        },
        at=0.0,
    )
    assert (snap.hosts, snap.up, snap.slots, snap.busy, snap.queued) == (3, 2, 3, 2, 5)
    assert snap.utilisation == pytest.approx(2 / 3)
    assert snap.errors == {"http://c": "ClientConnectorError: refused"}
    assert summarise({}).utilisation == 0.0
