"""The local backend: slots and the queue, warm parents that die, the cold (no fork) path."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine.grading.api import GradeRequest
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig

FIXTURES = Path(__file__).parent / "fixtures"
HONEST = (FIXTURES / "honest" / "p28_plain.py").read_text()
LOOP = (FIXTURES / "cheats" / "infinite_loop.py").read_text()
# fails its import in a runner that served an earlier evaluation: a runner started ahead must
# be a fresh process, given one submission only
FIRST_IN_ITS_RUNNER = (
    HONEST
    + """
_USED = torch.sys.modules.setdefault("mkb_runner_used", [])
if _USED:
    raise RuntimeError("this runner served an earlier evaluation")
_USED.append(1)
"""
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); look at its state
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def two_slots() -> AsyncIterator[LocalBackend]:
    """One started two-slot backend shared by this module's slot tests (its two warm parents
    and runner templates started once: they are not what those tests are about)."""
    backend = LocalBackend(
        gpus=None,
        preview_slots=2,
        preload_dsls=False,
        config=EvalConfig(timeout_s=2.0, memory_limit_mb=3072),
    )
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _shares_two_slots[F: Callable[..., Any]](test: F) -> F:
    """The tests of the shared backend: slow, in the module's event loop (its fixture's), and
    on one xdist worker (else each worker that draws one starts a backend of its own)."""
    for mark in (
        pytest.mark.slow,
        pytest.mark.asyncio(loop_scope="module"),
        pytest.mark.xdist_group("local-two-slots"),
    ):
        test = mark(test)
    return test


@_shares_two_slots
async def test_two_slots_run_concurrently_and_the_third_waits(two_slots: LocalBackend) -> None:
    backend = two_slots
    completed = backend.status()["completed"]
    tasks = [
        asyncio.create_task(backend.grade(GradeRequest("p28", "cute", LOOP))) for _ in range(3)
    ]
    for _ in range(100):
        await asyncio.sleep(0.1)
        if backend.status()["busy"] == 2 and backend.status()["queued"] == 1:
            break
    status = backend.status()
    assert (status["busy"], status["queued"]) == (2, 1)
    results = await asyncio.gather(*tasks)
    assert [r.reason for r in results] == ["timeout"] * 3
    assert backend.status()["completed"] == completed + 3 and backend.status()["busy"] == 0


@pytest.mark.slow
async def test_dead_warm_parent_is_replaced_and_its_child_killed() -> None:
    backend = LocalBackend(
        gpus=None,
        preview_slots=1,
        preload_dsls=False,
        config=EvalConfig(timeout_s=2.5, memory_limit_mb=3072),
    )
    await backend.start()
    slot = backend.slots[0]
    try:
        first_parent = slot.parent.proc.pid
        task = asyncio.create_task(backend.grade(GradeRequest("p28", "cute", LOOP)))
        for _ in range(600):  # the first job waits for the slot's runner template's imports
            await asyncio.sleep(0.1)
            if slot.parent.child_pid:
                break
        orphan = slot.parent.child_pid
        assert orphan and _alive(orphan)
        os.kill(first_parent, signal.SIGKILL)  # the warm parent dies mid-evaluation
        feedback = await task
        assert feedback.reason == "timeout"  # retried once on a fresh warm parent
        assert slot.parent.proc.pid != first_parent
        await asyncio.sleep(0.2)
        assert not _alive(orphan)
        honest = await backend.grade(GradeRequest("p28", "cute", HONEST))
        assert honest.verdict == "preview"
    finally:
        await backend.close()


async def test_cuda_request_on_cpu_host_is_an_error() -> None:
    backend = LocalBackend(gpus=None, preload_dsls=False)
    try:
        feedback = await backend.grade(GradeRequest("p28", "cute", HONEST, device="cuda"))
        assert feedback.verdict == "error"
    finally:
        await backend.close()


@pytest.mark.slow
async def test_cold_path_spawns_a_fresh_worker() -> None:
    backend = LocalBackend(gpus=None, warm=False, config=EvalConfig(memory_limit_mb=3072))
    try:
        feedback = await backend.grade(GradeRequest("p28", "tirx", HONEST, request_id="r1"))
        assert feedback.verdict == "preview", (feedback.reason, feedback.message)
        assert feedback.request_id == "r1"
    finally:
        await backend.close()


@pytest.mark.slow
async def test_child_that_cannot_start_falls_back_to_a_cold_worker(tmp_path: Path) -> None:
    broken = tmp_path / "kv_cache" / "p73_broken_fixture.py"
    broken.parent.mkdir()
    broken.write_text("raise RuntimeError('this problem cannot load')\n")
    config = EvalConfig(problem_paths={"p73": str(broken)}, memory_limit_mb=3072)
    backend = LocalBackend(gpus=None, preload_dsls=False, config=config)
    try:
        feedback = await backend.grade(GradeRequest("p73", "cute", HONEST))
        assert feedback.verdict == "error" and feedback.reason == "crash"
        assert "cannot load" in (feedback.import_error or "") + feedback.message
        assert backend.status()["fell_back_to_cold"] == ["cpu0"]
        assert backend.slots[0].parent is None
    finally:
        await backend.close()


@pytest.mark.slow
async def test_judges_are_started_ahead_and_one_that_does_not_suit_is_replaced(
    tmp_path: Path,
) -> None:
    """The warm parent forks the next judge before its job (CUDA and the reference runner
    ready), each with a runner started ahead that serves that one job; a job the prepared
    judge does not suit (here: unjailed, sent to the same warm parent, which has prepared a
    jailed judge after the second job) gets a fresh fork."""
    from engine.grading.parent.evaluate import feedback_from, make_job
    from engine.grading.parent.supervise import Limits

    backend = LocalBackend(gpus=None, preload_dsls=False, config=EvalConfig(), preview_ahead=True)
    await backend.start()
    request = GradeRequest("p28", "cute", HONEST)
    try:
        first = await backend.grade(GradeRequest("p28", "cute", FIRST_IN_ITS_RUNNER))
        second = await backend.grade(GradeRequest("p28", "cute", FIRST_IN_ITS_RUNNER))
        parent = backend.slots[0].parent
        assert parent is not None and parent.spare_device == "cpu"
        job = make_job(request, "cpu", EvalConfig(unsafe_no_jail=True), str(tmp_path))
        outcome = await parent.run(job, Limits(timeout_s=120, eager_timeout_s=120))
    finally:
        await backend.close()
    assert (first.verdict, second.verdict) == ("preview", "preview"), second.import_error
    assert first.clock["judge_started_ahead"] is True
    assert second.clock["judge_started_ahead"] is True
    feedback = feedback_from(request, outcome, "cpu")
    assert feedback.verdict == "preview" and feedback.jailed is False
    assert feedback.clock["judge_started_ahead"] is False


async def test_a_preview_on_few_cores_starts_nothing_ahead() -> None:
    """Under PREVIEW_AHEAD_MIN_CPUS CPUs a preview slot's warm parent starts no runner and
    no judge ahead (each job starts its own); preview_ahead decides it where given."""
    from engine.grading.backends.local import PREVIEW_AHEAD_MIN_CPUS

    def ahead(backend: LocalBackend) -> bool:
        parent = backend.slots[0].parent
        assert parent is not None
        return parent.prime and parent.spare_device != "none"

    few = len(os.sched_getaffinity(0)) < PREVIEW_AHEAD_MIN_CPUS
    assert ahead(LocalBackend(gpus=None)) is not few
    assert ahead(LocalBackend(gpus=None, preview_ahead=True)) is True
    assert ahead(LocalBackend(gpus=None, preview_ahead=False)) is False
    # without a runner template nothing at all is started ahead
    bare = LocalBackend(gpus=None, preview_ahead=False, config=EvalConfig(runner_template=False))
    assert bare.slots[0].parent is not None and bare.slots[0].parent.spare_device == "none"


@_shares_two_slots
async def test_a_request_naming_its_slot_waits_for_it_while_others_take_any(
    two_slots: LocalBackend,
) -> None:
    from engine.grading.machine import machine_name

    backend = two_slots
    held = await backend._queue().acquire("cpu0")  # cpu0 busy (as with another grading)
    host = machine_name()
    pinned = asyncio.create_task(
        backend.grade(GradeRequest("p28", "cute", HONEST, slot=f"{host}:cpu0"))
    )
    anyone = await backend.grade(GradeRequest("p28", "cute", HONEST))
    assert anyone.host == f"{host}:cpu1" and not pinned.done()  # it waited for cpu0
    backend._queue().release(held)
    assert (await pinned).host == f"{host}:cpu0"
