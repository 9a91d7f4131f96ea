"""A simulated grading inside a Ray grader actor, for cluster tests and the dispatch benchmark.

``[grading.ray] grader = "simulated"`` (the factory picks it, never the production path):
each grader actor grades with :class:`~engine.standins.simulated.SimulatedBackend` after a
sleep of ``min_s``..``max_s`` seconds drawn from a hash of the source, so a job takes as long
wherever and however often it runs, and a run with faults can be timed against one without.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from engine.grading.api import Feedback, GradeRequest, GradingBackend
from engine.standins.simulated import SimulatedBackend, _unit


@dataclass(frozen=True)
class SimulatedGrader:
    """Builds a :class:`TimedSimulatedGrading` in the actor (picklable)."""

    min_s: float = 0.1
    max_s: float = 0.5

    def __call__(self, gpu: str | None) -> GradingBackend:
        return TimedSimulatedGrading(self.min_s, self.max_s)


class TimedSimulatedGrading:
    """The simulated verdict after a deterministic sleep: ``min_s + (max_s - min_s) · u``."""

    name = "simulated"

    def __init__(self, min_s: float, max_s: float) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self.inner = SimulatedBackend()

    def seconds(self, request: GradeRequest) -> float:
        return self.min_s + (self.max_s - self.min_s) * _unit(request.source, "ray-delay")

    async def grade(self, request: GradeRequest) -> Feedback:
        delay = self.seconds(request)
        if delay > 0:
            await asyncio.sleep(delay)
        return await self.inner.grade(request)

    async def close(self) -> None:
        return None
