"""The grading service and the client pool, on loopback with real servers and workers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from engine.grading.api import GradeRequest
from engine.grading.backends.http_client import HttpBackend
from engine.grading.backends.http_server import start_server
from engine.grading.backends.local import LocalBackend
from engine.grading.machine import machine_name
from engine.grading.options import EvalConfig

FIXTURES = Path(__file__).parent / "fixtures"
HONEST = (FIXTURES / "honest" / "p28_plain.py").read_text()
NAN = (FIXTURES / "cheats" / "nan_output.py").read_text()
TOKEN = "test-token-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def server() -> AsyncIterator[str]:
    backend = LocalBackend(
        gpus=None,
        preview_slots=1,
        preload_dsls=False,
        config=EvalConfig(timeout_s=10.0, memory_limit_mb=3072),
    )
    runner, port = await start_server(backend, "127.0.0.1", 0, TOKEN)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_health_is_open_status_and_grade_need_the_token(server: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server}/health") as resp:
            assert resp.status == 200 and (await resp.json())["ok"] is True
        async with session.get(f"{server}/status") as resp:
            assert resp.status == 401
        bad = {"Authorization": "Bearer wrong"}
        async with session.post(f"{server}/grade", json={}, headers=bad) as resp:
            assert resp.status == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        async with session.get(f"{server}/status", headers=good) as resp:
            status = await resp.json()
            assert status["device"] == "cpu" and status["slots"] == ["cpu0"]
        async with session.post(f"{server}/grade", data=b"not json", headers=good) as resp:
            assert resp.status == 400


@pytest.mark.slow
async def test_client_grades_through_the_service(server: str) -> None:
    client = HttpBackend([server], token=TOKEN)
    try:
        honest = await client.grade(GradeRequest("p28", "cute", HONEST, request_id="a1"))
        assert honest.verdict == "preview" and honest.request_id == "a1"
        port = server.rsplit(":", 1)[1]  # the grader names itself: slot and service
        assert honest.host == f"{machine_name()}:cpu0@{port}"
        assert honest.draws and honest.impl_median_ms is not None
        cheat = await client.grade(GradeRequest("p28", "cute", NAN))
        assert (cheat.verdict, cheat.reason) == ("fail", "correctness.nan")
        statuses = await client.status()
        assert statuses[server]["completed"] == 2
    finally:
        await client.close()


@pytest.mark.slow
async def test_pool_skips_dead_and_full_hosts(server: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    full_backend = LocalBackend(gpus=None, preload_dsls=False)
    full_runner, full_port = await start_server(full_backend, "127.0.0.1", 0, TOKEN, max_queue=0)
    full = f"http://127.0.0.1:{full_port}"
    client = HttpBackend([dead, full, server], token=TOKEN, backoff_s=0.01)
    try:
        for _ in range(2):  # whatever the rotation, the one good host answers
            feedback = await client.grade(GradeRequest("p28", "cute", HONEST))
            assert feedback.verdict == "preview", feedback.message
        assert client.failures[dead] >= 1 or client.failures[full] >= 1
    finally:
        await client.close()
        await full_runner.cleanup()


async def test_pool_gives_up_after_three_tries() -> None:
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    client = HttpBackend(urls, token=TOKEN, tries=3, backoff_s=0.01)
    try:
        feedback = await client.grade(GradeRequest("p28", "cute", HONEST))
        assert feedback.verdict == "error"
        assert "after 3 tries" in feedback.message
        assert feedback.message.count("; http://") == 2  # three attempts listed
    finally:
        await client.close()


async def test_server_requires_token_off_loopback() -> None:
    backend = LocalBackend(gpus=None, preload_dsls=False)
    with pytest.raises(ValueError, match="token"):
        await start_server(backend, "0.0.0.0", 0, None)
    await asyncio.sleep(0)


@pytest.mark.slow
async def test_mkb_grader_serve_command() -> None:
    import subprocess
    import sys

    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "grader",
        "serve",
        "--port",
        str(port),
        "--gpus",
        "none",
        "--token",
        TOKEN,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        assert b"mkb grader: cpu slots cpu0" in line, line
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/health") as resp:
                assert resp.status == 200
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with session.get(f"http://127.0.0.1:{port}/status", headers=headers) as resp:
                assert (await resp.json())["warm"] == [True]
    finally:
        proc.terminate()
        await proc.wait()
