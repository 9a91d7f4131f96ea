"""What the engine calls for each try of an attempt (the scheduler takes one runner)."""

from __future__ import annotations

from typing import Protocol

from engine.attempts.spec import AttemptOutcome, AttemptSpec
from engine.grading.api import GradingBackend
from engine.recording import StoreObserver


class AttemptRunner(Protocol):
    """Runs one try of one attempt (the Terminus-2 runner, the simulated one, a test's)."""

    async def __call__(
        self, spec: AttemptSpec, backend: GradingBackend, observer: StoreObserver
    ) -> AttemptOutcome: ...
