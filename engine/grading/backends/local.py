"""The local backend: grading children on this host, one evaluation per GPU at a time.

Each slot (one per GPU, pinned with ``CUDA_VISIBLE_DEVICES``; or ``preview_slots`` CPU
slots on a host without GPUs) owns a warm parent (:mod:`engine.grading.parent.zygote`) that imported
torch, the catalog and the DSLs once and forks a fresh child per evaluation. With
``warm=False`` every evaluation starts a new ``python -m engine.grading.worker`` instead.
Requests wait in FIFO order for a free slot; one that names its slot (``GradeRequest.slot``,
a paired job's) waits for that one (:mod:`engine.grading.backends.slot_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.card_memory import (
    CardLedger,
    MemoryUnfit,
    card_capacity,
    fits_alone,
    host_anchor_limits,
    host_memory,
    planned,
    unfit_message,
)
from engine.grading.backends.slot_pool import SlotPool, wanted_label
from engine.grading.judge import placement
from engine.grading.machine import machine_name
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import (
    feedback_from,
    gpu_count,
    make_job,
    screen_request,
)
from engine.grading.parent.supervise import REPO_ROOT, ChildOutcome, Limits, child_env, kill_group
from engine.grading.parent.supervise import run_subprocess as _run_subprocess
from engine.grading.verdict import InfrastructureError
from problems.memory_model import MemoryPlan

STREAM_LIMIT = 64 * 1024 * 1024


class WorkerDied(RuntimeError):
    """The warm parent of a slot died or stopped answering."""


class WarmParent:
    """One ``engine.grading.parent.zygote`` process and its JSON-lines control channel."""

    def __init__(
        self,
        env: dict[str, str],
        preload_dsls: bool = True,
        start_timeout_s: float = 600.0,
        spare_device: str = "none",
        unsafe_no_jail: bool = False,
        spares: int = 1,
        template: bool = False,
        prime: bool = True,
    ):
        self.env = env
        self.template = template
        self.prime = prime
        self.preload_dsls = preload_dsls
        self.spare_device = spare_device
        self.spares = spares
        self.unsafe_no_jail = unsafe_no_jail
        self.start_timeout_s = start_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.ready: dict[str, Any] = {}
        self.child_pid: int | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        args = [sys.executable, "-m", "engine.grading.parent.zygote"]
        if not self.preload_dsls:
            args.append("--no-dsls")
        args += ["--spare-device", self.spare_device, "--spares", str(self.spares)]
        if self.unsafe_no_jail:
            args.append("--unsafe-no-jail")
        if self.template:
            args.append("--template")
        if not self.prime:
            args.append("--no-prime")
        self.proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**self.env, "MKB_BACKEND_PID": str(os.getpid())},  # zygote: die_with_parent
            cwd=str(REPO_ROOT),
            limit=STREAM_LIMIT,
            start_new_session=True,
        )
        message = await self._read(self.start_timeout_s)
        if message.get("kind") != "ready":
            raise WorkerDied(f"warm parent sent {message!r} instead of ready")
        self.ready = message

    async def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except (TimeoutError, ValueError) as exc:
            raise WorkerDied(f"warm parent did not answer: {exc!r}") from exc
        if not line:
            raise WorkerDied("warm parent exited")
        return json.loads(line)  # type: ignore[no-any-return]

    async def run(self, job: dict[str, Any], limits: Limits) -> ChildOutcome:
        if not self.alive:
            await self.start()
        assert self.proc is not None and self.proc.stdin is not None
        message = {"kind": "job", "job": job, "limits": asdict(limits)}
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            await self.proc.stdin.drain()
            # with a template the parent may first wait for a (new) template's imports
            started = await self._read(self.start_timeout_s if self.template else 30.0)
            self.child_pid = started.get("pid")
            budget = limits.eager_timeout_s + limits.timeout_s + limits.grace_s + 60.0
            budget += limits.judge_extra_s
            done = await self._read(budget)
        except (ConnectionError, BrokenPipeError) as exc:
            await self.stop()
            raise WorkerDied(f"warm parent connection lost: {exc!r}") from exc
        except WorkerDied:
            await self.stop()
            raise
        finally:
            self.child_pid = None
        return ChildOutcome.from_dict(done.get("outcome", {}))

    async def stop(self) -> None:
        if self.child_pid:
            kill_group(self.child_pid)
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(Exception):
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"kind": "exit"}\n')
                await self.proc.stdin.drain()
            try:
                await asyncio.wait_for(self.proc.wait(), 5.0)
            except TimeoutError:
                kill_group(self.proc.pid)
                await self.proc.wait()
        self.proc = None


# CPU preview starts a judge and a runner ahead of the next job only with this many CPUs: on
# fewer, the start-ahead competes for the cores with the job it is meant to speed up
PREVIEW_AHEAD_MIN_CPUS = 4


class Slot:
    """One place an evaluation can run: a GPU (pinned) or a CPU preview slot."""

    def __init__(
        self,
        label: str,
        device: str,
        env: dict[str, str],
        warm: bool,
        preload_dsls: bool,
        unsafe_no_jail: bool = False,
        spares: int = 1,
        ahead: bool = True,
        template: bool = False,
    ) -> None:
        self.label = label
        self.device = device
        self.env = env
        # a jailed runner template replaces the runners started ahead: one start per slot,
        # then a fork per job (ahead=False then only stops judges forked ahead)
        template = template and not unsafe_no_jail
        self.parent = (
            WarmParent(
                env,
                preload_dsls,
                # ahead=False: no runner and no judge started ahead (each job starts its own)
                spare_device=device if ahead or template else "none",
                unsafe_no_jail=unsafe_no_jail,
                spares=spares,
                template=template,
                prime=ahead,
            )
            if warm
            else None
        )
        self.evaluations = 0
        self.fell_back = False
        self.ledger: CardLedger | None = None  # admission by planned memory (card_memory.py)

    async def run(self, job: dict[str, Any], limits: Limits, workdir: str) -> ChildOutcome:
        self.evaluations += 1
        if self.parent is None:
            return await asyncio.to_thread(_run_subprocess, job, limits, workdir, self.env_extra)
        return await self.parent.run(job, limits)

    async def go_cold(self) -> None:
        """Stop the warm parent; later evaluations start a fresh worker each."""
        if self.parent is not None:
            await self.parent.stop()
            self.parent = None
            self.fell_back = True

    @property
    def env_extra(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if k == "CUDA_VISIBLE_DEVICES"}


class LocalBackend:
    """Grades on this host's GPUs (or CPU preview slots) behind a FIFO queue."""

    name = "local"

    def __init__(
        self,
        gpus: list[int] | str | None = "auto",
        preview_slots: int = 1,
        config: EvalConfig | None = None,
        warm: bool = True,
        preload_dsls: bool = True,
        cpu_placement: str = "auto",
        preview_ahead: bool | None = None,
    ) -> None:
        self.config = config or EvalConfig()
        if gpus == "auto":
            gpu_ids = list(range(gpu_count()))
        elif gpus is None or gpus in ("none", "cpu"):
            gpu_ids = []
        elif isinstance(gpus, str):
            raise ValueError(f'gpus must be "auto", "none" or a list of GPU indices, not {gpus!r}')
        else:
            gpu_ids = [int(g) for g in gpus]
        self.device = "cuda" if gpu_ids else "cpu"
        self.slots: list[Slot] = []
        # each GPU slot's CPUs (judge/placement.py): cut for all the host's GPUs
        host_gpus = placement.host_gpus() or max(gpu_ids, default=-1) + 1
        for gpu in gpu_ids:
            env = child_env(
                {
                    **self.config.env,
                    **placement.slot_env(gpu, host_gpus, cpu_placement),
                    "CUDA_VISIBLE_DEVICES": str(gpu),
                }
            )
            self.slots.append(
                Slot(
                    f"gpu{gpu}",
                    "cuda",
                    env,
                    warm,
                    preload_dsls,
                    self.config.unsafe_no_jail,
                    self.config.spare_runners,
                    template=self.config.runner_template,
                )
            )
        if not gpu_ids:
            # CPU preview runs no DSL kernel unless asked to check DSL launches: importing
            # both DSLs in every warm parent and spare runner would only slow start-up
            preload_dsls = preload_dsls and bool(self.config.dsl_checks)
            # a judge and a runner started ahead (a runner's start is ~4 s of CPU: torch's
            # import) only pay where cores are free to start them beside the running job
            ahead = preview_ahead
            if ahead is None:
                ahead = len(os.sched_getaffinity(0)) >= PREVIEW_AHEAD_MIN_CPUS
            for i in range(max(1, preview_slots)):
                env = child_env(
                    {**self.config.env, **placement.NO_PLACEMENT, "CUDA_VISIBLE_DEVICES": ""}
                )
                self.slots.append(
                    Slot(
                        f"cpu{i}",
                        "cpu",
                        env,
                        warm,
                        preload_dsls,
                        self.config.unsafe_no_jail,
                        # CPU preview runners start in seconds: one is enough
                        min(1, self.config.spare_runners),
                        ahead=ahead,
                        template=self.config.runner_template,
                    )
                )
        for slot in self.slots:
            card = int(slot.label[3:]) if slot.device == "cuda" else None
            capacity = card_capacity(card)
            if capacity is not None:
                slot.ledger = CardLedger(slot.label if card is not None else "cpu", capacity)
        self._free: SlotPool[Slot] | None = None
        self.completed = 0
        self.started_at = time.time()

    def _queue(self) -> SlotPool[Slot]:
        if self._free is None:
            self._free = SlotPool(self.slots, lambda slot: slot.label)
        return self._free

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return self._free.waiting if self._free is not None else 0

    async def start(self) -> None:
        """Start every slot's warm parent now (otherwise they start on first use)."""
        await asyncio.gather(*(s.parent.start() for s in self.slots if s.parent is not None))

    def status(self) -> dict[str, Any]:
        free = self._queue().free
        return {
            "backend": self.name,
            "device": self.device,
            "slots": [s.label for s in self.slots],
            "busy": len(self.slots) - free,
            "queued": self.waiting,
            "completed": self.completed,
            "warm": [bool(s.parent and s.parent.alive) for s in self.slots],
            "fell_back_to_cold": [s.label for s in self.slots if s.fell_back],
            "uptime_s": round(time.time() - self.started_at, 1),
            "gpu_names": self.gpu_names(),
        }

    def gpu_names(self) -> list[str]:
        """The names of this grader's GPUs, in slot order (``[grading] gpu = "auto"`` reads
        them through ``/status``)."""
        from engine.targets import local_gpu_names

        return local_gpu_names([int(s.label[3:]) for s in self.slots if s.label.startswith("gpu")])

    async def grade(self, request: GradeRequest) -> Feedback:
        opening = screen_request(request, self.config)
        if opening is not None:
            return opening
        if request.device == "cuda" and self.device != "cuda":
            return Feedback.decided(request, InfrastructureError("this grader has no GPU"))
        ledgers = [s.ledger for s in self.slots if s.ledger is not None]
        plans: dict[float, tuple[MemoryPlan, float]] = {}
        for g in ledgers:
            plan = await self._plan(request, g.capacity)
            if plan is not None and plan.total_bytes is not None:
                plans[g.capacity] = (plan, plan.total_bytes)
        if plans and not any(
            fits_alone(plans[g.capacity][1], g.capacity, g.headroom)
            for g in ledgers
            if g.capacity in plans
        ):
            smallest = min(total for _, total in plans.values())
            why = unfit_message(smallest, max(g.capacity for g in ledgers), ledgers[0].headroom)
            return Feedback.decided(request, MemoryUnfit(why))
        queue = self._queue()
        slot = await queue.acquire(wanted_label(request.slot))
        try:
            device = "cpu" if request.device == "cpu" else slot.device
            placed = plans.get(slot.ledger.capacity) if slot.ledger is not None else None
            admitted = (
                slot.ledger.admit(placed[1])
                if slot.ledger is not None and placed is not None and device == slot.device
                else contextlib.nullcontext()
            )
            plan = placed[0] if placed is not None else None
            async with admitted, host_memory(plan if device == "cuda" else None):
                return await self._run_on(slot, request, device, plan)
        except MemoryUnfit as exc:  # this slot's card is smaller than another's
            return Feedback.decided(request, exc)
        finally:
            self.completed += 1
            queue.release(slot)

    async def _plan(self, request: GradeRequest, capacity: float) -> MemoryPlan | None:
        """The grading's plan on a card of ``capacity`` bytes at its scale (None: no
        admission for this request, or the plan is unknown)."""
        if request.device == "cpu" and self.device == "cuda":
            return None  # a preview on a GPU host uses no card memory
        scale = self.config.scale or ("full" if self.device == "cuda" else "smoke")
        try:
            return await asyncio.to_thread(planned, request.problem_id, scale, capacity)
        except Exception:  # noqa: BLE001 - an unknown problem is reported by the grading
            return None

    async def _run_on(
        self, slot: Slot, request: GradeRequest, device: str, plan: MemoryPlan | None = None
    ) -> Feedback:
        limits = self.config.limits(device)
        for attempt in (1, 2):
            workdir = tempfile.mkdtemp(prefix="mkb-grade-")
            try:
                job = make_job(request, device, self.config, workdir)
                if plan is not None and plan.anchor == "host" and device == "cuda":
                    job["anchor"] = "host"  # the plan fits this card only so (card_memory)
                    limits = host_anchor_limits(limits, plan, job)
                elif plan is not None and plan.draw == "device" and device == "cuda":
                    job["draw"] = "device"  # checked draws stay on the card (memory_model)
                outcome = await slot.run(job, limits, workdir)
                feedback = feedback_from(request, outcome, device)
                feedback.host = f"{machine_name()}:{slot.label}"
                if attempt == 1 and slot.parent is not None and _failed_before_import(outcome):
                    # The forked child could not even start (e.g. a library initialised CUDA
                    # in the warm parent): grade cold on this slot from now on.
                    await slot.go_cold()
                    continue
                return feedback
            except WorkerDied as exc:
                if attempt == 2:
                    return Feedback.decided(
                        request, InfrastructureError(f"grading worker died: {exc}")
                    )
            finally:
                await asyncio.to_thread(shutil.rmtree, workdir, True)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await asyncio.gather(*(s.parent.stop() for s in self.slots if s.parent is not None))


def _failed_before_import(outcome: ChildOutcome) -> bool:
    """The child produced an infrastructure error before any submission code ran."""
    result = outcome.result or {}
    if outcome.timed_out or outcome.memory_killed or outcome.last_phase not in (None, "eager"):
        return False
    return outcome.result is None or result.get("verdict") == "error"
