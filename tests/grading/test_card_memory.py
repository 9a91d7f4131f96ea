"""Admission by planned GPU memory (engine/grading/backends/card_memory.py): the host-wide
ledger of a card, the local backend's slots sharing one card (a fake card size through
MKB_GPU_MEMORY_GB, so CPU preview slots stand in for a GPU), a plan that cannot fit refused
before any grading, and the same refusal through the http service."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.grading.api import GradeRequest
from engine.grading.backends.card_memory import (
    CARD_GB_ENV,
    LEDGER_DIR_ENV,
    MEMORY_UNFIT,
    CardLedger,
    admits,
    fits_alone,
    planned_bytes,
)
from engine.grading.backends.http_client import HttpBackend
from engine.grading.backends.http_server import start_server
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig

FIXTURES = Path(__file__).parent / "fixtures"
HONEST = (FIXTURES / "honest" / "p28_plain.py").read_text()
LOOP = (FIXTURES / "cheats" / "infinite_loop.py").read_text()
GB = 1e9


def test_the_admission_function_counts_the_plans_running_and_the_headroom() -> None:
    assert admits([30 * GB, 20 * GB], 28 * GB, 80 * GB, 2 * GB)
    assert not admits([30 * GB, 20 * GB], 28.1 * GB, 80 * GB, 2 * GB)
    assert fits_alone(78 * GB, 80 * GB, 2 * GB) and not fits_alone(79 * GB, 80 * GB, 2 * GB)


def test_the_ledger_is_shared_through_its_file_and_forgets_dead_holders(tmp_path: Path) -> None:
    one = CardLedger("gpu0", 10 * GB, tmp_path, headroom=2 * GB)
    other = CardLedger("gpu0", 10 * GB, tmp_path, headroom=2 * GB)  # another process's view
    assert one.try_reserve("a", 5 * GB)
    assert not other.try_reserve("b", 4 * GB)  # 5 + 4 + 2 > 10
    assert other.try_reserve("b", 3 * GB) and one.reserved() == 8 * GB
    one.release("a")
    assert other.reserved() == 3 * GB
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    entries = json.loads(one.path.read_text())
    entries.append({"pid": int(dead.stdout), "key": "gone", "bytes": 7 * GB})
    one.path.write_text(json.dumps(entries))
    assert one.try_reserve("c", 4 * GB)  # the dead grading's 7 GB no longer count
    assert CardLedger("gpu1", 10 * GB, tmp_path).reserved() == 0  # one file per card


def _card(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gb: float) -> None:
    monkeypatch.setenv(CARD_GB_ENV, str(gb))
    monkeypatch.setenv(LEDGER_DIR_ENV, str(tmp_path))


async def test_a_plan_that_cannot_fit_the_card_is_refused_before_any_grading(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _card(monkeypatch, tmp_path, 1.0)  # smaller than any grading's two CUDA contexts
    backend = LocalBackend(gpus=None, preview_slots=1, preload_dsls=False)
    try:
        feedback = await backend.grade(GradeRequest("p28", "cute", HONEST))
        assert (feedback.verdict, feedback.reason) == ("error", MEMORY_UNFIT)
        assert "1.0 GB" in feedback.message and "mkb problems memory" in feedback.message
        assert [s.evaluations for s in backend.slots] == [0]  # no judge ever started
    finally:
        await backend.close()


async def test_the_http_service_refuses_an_unfit_plan_with_the_same_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _card(monkeypatch, tmp_path, 1.0)
    backend = LocalBackend(gpus=None, preview_slots=1, preload_dsls=False)
    runner, port = await start_server(backend, "127.0.0.1", 0, "token-1")
    client = HttpBackend([f"http://127.0.0.1:{port}"], token="token-1")
    try:
        feedback = await client.grade(GradeRequest("p28", "cute", HONEST))
        assert (feedback.verdict, feedback.reason) == ("error", MEMORY_UNFIT)
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.slow
async def test_two_slots_on_one_card_run_one_at_a_time_when_two_plans_do_not_fit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plan = planned_bytes("p28", "smoke")
    assert plan is not None
    _card(monkeypatch, tmp_path, (1.5 * plan + 2 * GB) / GB)  # one plan fits, two do not
    backend = LocalBackend(
        gpus=None,
        preview_slots=2,
        preload_dsls=False,
        config=EvalConfig(timeout_s=2.0, memory_limit_mb=3072),
    )
    try:
        results = await asyncio.gather(
            *(backend.grade(GradeRequest("p28", "cute", LOOP)) for _ in range(2))
        )
        assert [r.reason for r in results] == ["timeout"] * 2
        spans = sorted(span for s in backend.slots if s.ledger for span in s.ledger.admitted)
        assert len(spans) == 2 and spans[1][0] >= spans[0][1]  # never both on the card
    finally:
        await backend.close()
