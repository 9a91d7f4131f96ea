"""Admission of gradings by planned GPU memory, so that a card is never oversubscribed.

Each grading's plan (:func:`planned`: judge, runner and contexts at the
grading's scale) is reserved on its card before the grading starts and released when it
ends; a grading waits while its plan does not fit beside the plans reserved there. The
reservations of one card live in one file (``card-<name>.json`` under
:data:`LEDGER_DIR_ENV`, else the system's temporary directory), under an exclusive lock, so
every grading process of the host shares them: the local backend's slots, ``mkb grader
serve`` services (the http and fleet backends) and Ray actors on one node. A reservation
whose process died is dropped. A plan that cannot fit the card even alone is refused before
any GPU time with the reason :data:`MEMORY_UNFIT`.

The card's size comes from :data:`CARD_GB_ENV` when set (a fake size makes CPU preview
slots admit the same way, which is how the tests run it), else from ``nvidia-smi``. Plans are
read from the stored plans (:mod:`problems.memory_store`: no trace, no torch); a problem
whose entry is stale or missing is traced in the backend's process, once per problem, scale
and card size. Where the grading does not fit the card with its float64 anchor on the device,
the plan puts the anchor on the host: the job says so (``anchor``) and its limits get
:func:`host_anchor_allowance` for the judge's own time.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.grading.admission import INFRA_MEMORY_UNFIT
from engine.grading.parent.supervise import Limits
from engine.grading.verdict import InfrastructureError
from problems.memory_model import MemoryPlan

MEMORY_UNFIT = INFRA_MEMORY_UNFIT  # never retried: the plan is the same next time
CARD_GB_ENV = "MKB_GPU_MEMORY_GB"
LEDGER_DIR_ENV = "MKB_CARD_LEDGER_DIR"
POLL_S = 0.2


class MemoryUnfit(InfrastructureError):
    """A problem whose plan cannot fit the card at all: refused before any GPU time."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message, reason=MEMORY_UNFIT)


def admits(reserved: Sequence[float], plan: float, capacity: float, headroom: float) -> bool:
    """Whether a grading planning ``plan`` bytes may start on a card of ``capacity`` bytes
    beside the ``reserved`` plans, keeping ``headroom`` free."""
    return sum(reserved) + plan + headroom <= capacity


def fits_alone(plan: float, capacity: float, headroom: float) -> bool:
    """Whether the plan fits the card with nothing else on it."""
    return admits((), plan, capacity, headroom)


def card_capacity(gpu: int | None) -> float | None:
    """The card's size in bytes: :data:`CARD_GB_ENV` when set, else ``nvidia-smi``'s for GPU
    ``gpu``; None (no admission) when neither is known."""
    configured = os.environ.get(CARD_GB_ENV, "").strip()
    if configured:
        try:
            value = float(configured)
        except ValueError:
            raise ValueError(f"{CARD_GB_ENV}={configured!r} is not a number of GB") from None
        if value <= 0:
            raise ValueError(f"{CARD_GB_ENV} must be positive, not {configured!r}")
        return value * 1e9
    if gpu is None:
        return None
    return _nvidia_smi_total(gpu)


@functools.lru_cache(maxsize=16)
def _nvidia_smi_total(gpu: int) -> float | None:
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(
            [*query, "-i", str(gpu)], capture_output=True, text=True, timeout=20, check=True
        ).stdout
        return float(out.strip().splitlines()[0]) * 2**20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=512)
def planned(problem_id: str, scale: str, capacity: float | None = None) -> MemoryPlan:
    """The grading's plan on a card of ``capacity`` bytes (where its anchor runs, its peak):
    from the stored plans (:mod:`problems.memory_store`, no torch imported), else traced
    here (imports torch; a stale or missing entry)."""
    from problems.memory_store import stored_plan

    plan = stored_plan(problem_id, scale, capacity)
    if plan is not None:
        return plan
    from problems.memory import memory_plan
    from problems.registry import get

    return memory_plan(get(problem_id), scale, capacity)


HOST_HEADROOM_BYTES = 8e9  # kept free on the host beside the host anchors' plans


def host_ledger(directory: Path | None = None) -> CardLedger | None:
    """The reservations of this host's memory for float64 anchors run on it (one file, like a
    card's), sized from ``/proc/meminfo``; None where that cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            total = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return CardLedger("host", float(total), directory, headroom=HOST_HEADROOM_BYTES)


@contextlib.asynccontextmanager
async def host_memory(plan: MemoryPlan | None) -> AsyncIterator[None]:
    """Hold a host anchor's memory on this host for the block (:func:`host_ledger`); nothing
    for a plan with its anchor on the device. Refused (:class:`MemoryUnfit`) when the host
    cannot hold it even alone."""
    ledger = None if plan is None or plan.anchor != "host" else host_ledger()
    if ledger is None or plan is None or plan.host_bytes is None:
        yield
        return
    if not fits_alone(plan.host_bytes, ledger.capacity, ledger.headroom):
        raise MemoryUnfit(
            f"{MEMORY_UNFIT}: the float64 anchor on the host plans {plan.host_bytes / 1e9:.1f} "
            f"GB of host memory; the host has {ledger.capacity / 1e9:.1f} GB with "
            f"{ledger.headroom / 1e9:g} GB kept free (mkb problems memory)"
        )
    async with ledger.admit(plan.host_bytes):
        yield


def planned_bytes(problem_id: str, scale: str, capacity: float | None = None) -> float | None:
    """The grading's planned peak on one card (None: the plan is unknown)."""
    return planned(problem_id, scale, capacity).total_bytes


def host_anchor_allowance(plan: MemoryPlan, job: dict[str, Any]) -> float:
    """The seconds a grading's host anchors may add to its limits: each anchor check of the
    job (correctness draws, rechecks, the bypass call) at four times the plan's estimate,
    at least a minute each (the estimate assumes an idle 16-core host)."""
    if plan.anchor != "host":
        return 0.0
    checks = len(job["seeds"]["correctness"]) + len(job.get("recheck", [])) + 1
    return checks * max(60.0, 4 * (plan.anchor_s or 0.0))


def host_anchor_limits(limits: Limits, plan: MemoryPlan, job: dict[str, Any]) -> Limits:
    """The limits of a job whose anchor runs on the host: the judge's own time
    (:func:`host_anchor_allowance`) and its resident memory raised by the host anchor's plan
    (the watchdog reads the judge's; the runner's own limit, in the job, is unchanged)."""
    memory = limits.memory_limit_mb
    if memory is not None and plan.host_bytes is not None:
        memory += math.ceil(plan.host_bytes / 2**20)
    return replace(
        limits, judge_extra_s=host_anchor_allowance(plan, job), memory_limit_mb=memory
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CardLedger:
    """The reservations of one card, shared by every process of the host."""

    def __init__(
        self,
        card: str,
        capacity: float,
        directory: Path | None = None,
        headroom: float | None = None,
    ) -> None:
        """``headroom``: kept free beyond the plans (:data:`problems.memory.HEADROOM_BYTES`
        unless given; imported here, so that a backend without a card size loads no torch)."""
        if headroom is None:
            from problems.memory import HEADROOM_BYTES

            headroom = HEADROOM_BYTES
        root = directory or Path(os.environ.get(LEDGER_DIR_ENV) or tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / f"mkb-card-{card}.json"
        self.capacity = capacity
        self.headroom = headroom
        self.admitted: list[tuple[float, float]] = []  # this process's (start, end) pairs

    @contextlib.contextmanager
    def _entries(self) -> Iterator[list[dict[str, Any]]]:
        """The live reservations, locked; written back when the block ends."""
        with open(self.path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            try:
                entries = [e for e in json.loads(fh.read() or "[]") if _alive(int(e["pid"]))]
            except (ValueError, KeyError, TypeError):
                entries = []  # a damaged ledger: start again (its holders re-reserve nothing)
            yield entries
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps(entries))

    def reserved(self) -> float:
        with self._entries() as entries:
            return float(sum(e["bytes"] for e in entries))

    def try_reserve(self, key: str, plan: float) -> bool:
        with self._entries() as entries:
            if not admits([e["bytes"] for e in entries], plan, self.capacity, self.headroom):
                return False
            entries.append({"pid": os.getpid(), "key": key, "bytes": plan})
            return True

    def release(self, key: str) -> None:
        with self._entries() as entries:
            entries[:] = [e for e in entries if e["key"] != key]

    @contextlib.asynccontextmanager
    async def admit(self, plan: float) -> AsyncIterator[None]:
        """Hold ``plan`` bytes on the card for the block; waits until they fit (raises
        :class:`MemoryUnfit` when they never can)."""
        if not fits_alone(plan, self.capacity, self.headroom):
            raise MemoryUnfit(unfit_message(plan, self.capacity, self.headroom))
        key = f"{os.getpid()}-{os.urandom(6).hex()}"
        while not await asyncio.to_thread(self.try_reserve, key, plan):
            await asyncio.sleep(POLL_S)
        start = time.monotonic()
        try:
            yield
        finally:
            await asyncio.to_thread(self.release, key)
            self.admitted.append((start, time.monotonic()))


def unfit_message(plan: float, capacity: float, headroom: float) -> str:
    return (
        f"{MEMORY_UNFIT}: the grading plans {plan / 1e9:.1f} GB of GPU memory; the card has "
        f"{capacity / 1e9:.1f} GB with {headroom / 1e9:g} GB kept free (mkb problems memory)"
    )
