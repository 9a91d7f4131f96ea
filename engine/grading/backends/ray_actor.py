"""The grader actor: one per GPU of a Ray cluster, holding what a local warm slot holds.

:class:`GraderActor` is a plain class; :mod:`engine.grading.backends.ray` wraps it with
``ray.remote`` when it connects, so importing this module never imports Ray. The actor
grades through a grader built in its own process by a picklable builder:

- :class:`LocalGrader` (production): the local backend with one slot on the GPU Ray gave
  this actor (its warm parent, the judge started ahead and the spare runners), or one CPU
  preview slot on a node whose GPU is declared but absent (tests). The submission runs in
  that slot's jailed runner, never in the Ray worker process.
- a stand-in from :mod:`engine.standins` that the factory picked (tests, benchmarks).

A lock in the actor (and the local backend's single slot) keeps the exclusive-timing rule:
one evaluation timed at a time on this GPU, whatever number of calls Ray delivers at once.
An orphan guard (:mod:`engine.grading.backends.orphan_guard`) kills the warm parent, its
judges and runners if the actor dies (SIGKILL, a lost node): they lead sessions of their own.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.grading.machine import machine_name
from engine.grading.options import EvalConfig

GraderBuilder = Callable[[str | None], GradingBackend]  # the actor's GPU id (None: no GPU)


def assigned_gpu() -> str | None:
    """The one GPU Ray assigned to this actor (its ``CUDA_VISIBLE_DEVICES``), if any."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not visible or visible == "-1":
        return None
    return visible.split(",")[0].strip()


def gpu_name(gpu: str | None) -> str | None:
    """The model name of the actor's GPU (None without one, e.g. a declared but absent GPU)."""
    if gpu is None:
        return None
    from engine.targets import local_gpu_names

    names = local_gpu_names("auto")  # through this actor's CUDA_VISIBLE_DEVICES
    return names[0] if names else None


@dataclass(frozen=True)
class LocalGrader:
    """Builds the local backend's warm slot for the actor's GPU (picklable)."""

    config: EvalConfig = field(default_factory=EvalConfig)
    preload_dsls: bool = True

    def __call__(self, gpu: str | None) -> GradingBackend:
        from engine.grading.backends.local import LocalBackend
        from engine.grading.parent.evaluate import gpu_count

        if gpu is not None and gpu.isdigit() and gpu_count() > 0:
            return LocalBackend(gpus=[int(gpu)], config=self.config, preload_dsls=self.preload_dsls)
        # a node that declares a GPU it lacks (CI, fake GPUs): one CPU preview slot
        return LocalBackend(
            gpus=None, preview_slots=1, config=self.config, preload_dsls=self.preload_dsls
        )


class GraderActor:
    """One grader: ``grade`` returns the job key and dispatch number with the feedback, so the
    engine's ledger can tell a first result from a duplicate."""

    def __init__(self, builder: GraderBuilder) -> None:
        from engine.grading.backends.orphan_guard import OrphanGuard

        self.gpu = assigned_gpu()
        self.gpu_name = gpu_name(self.gpu)
        self.backend = builder(self.gpu)
        self.incarnation = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.started_at = time.time()
        self.graded = 0
        self.one_at_a_time = asyncio.Lock()  # one evaluation on this GPU at a time
        # a grader with child processes (the local backend's slots) gets a guard
        self.guard = OrphanGuard() if hasattr(self.backend, "slots") else None
        if self.guard is not None:
            self.guard.start()

    async def ping(self) -> dict[str, Any]:
        return self.info()

    def info(self) -> dict[str, Any]:
        """Who answers: a new incarnation means Ray restarted this actor."""
        return {
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "gpu": self.gpu,
            "gpu_name": self.gpu_name,
            "graded": self.graded,
        }

    async def warm(self) -> dict[str, Any]:
        """Start the warm parent now (else it starts with the first job)."""
        slots = getattr(self.backend, "slots", [])
        for slot in slots:
            parent = getattr(slot, "parent", None)
            if parent is not None and not parent.alive:
                await parent.start()
        return self.info()

    async def grade(self, key: str, dispatch: int, request: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self.one_at_a_time:
                feedback = await self.backend.grade(GradeRequest.from_dict(request))
        except Exception as exc:  # noqa: BLE001 - the grader's failure is an infrastructure error
            feedback = Feedback("error", "crash", f"grader actor: {type(exc).__name__}: {exc}")
        self.graded += 1
        if not feedback.host or self.gpu_name is None:
            # no slot of a GPU named by the grader (a stand-in, or a CPU slot that every
            # actor of a machine calls cpu0): this actor is the slot
            feedback.host = f"{machine_name()}:ray-actor-{os.getpid()}"
        return {
            "key": key,
            "dispatch": dispatch,
            "worker": self.incarnation,
            "feedback": feedback.to_dict(),
        }

    async def close(self) -> None:
        await self.backend.close()
        if self.guard is not None:
            self.guard.stop()
