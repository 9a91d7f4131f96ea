"""Exactly-once delivery of grading results over an at-least-once transport.

A backend that may run one grading job more than once (a cluster engine retries a call on a
restarted worker, the backend hands a job whose worker went quiet to another one) keys every
result by the job and lets this ledger decide: the first result of a job is delivered, every
later one is a duplicate, counted and handed to a sink (the engine records it in the store)
and dropped.

The job key is the store's grading job id when the engine grades through
:class:`engine.recording.RecordingBackend`, which sets :data:`JOB_KEY` around each call, so
the ledger and the store's ``grading_jobs`` rows name the same job; a caller without a store
(``mkb grade``, benchmarks) gets a fresh key per call.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.grading.api import Feedback

# the store's grading job id of the call in progress (set by the recording backend)
JOB_KEY: ContextVar[str | None] = ContextVar("mkb_grading_job_key", default=None)
_LOCAL = itertools.count(1)


def job_key() -> str:
    """The current call's job key: the store's grading job id, else a fresh one."""
    return JOB_KEY.get() or f"local-{uuid.uuid4().hex[:8]}-{next(_LOCAL)}"


@dataclass(frozen=True)
class Duplicate:
    """A second (third, ...) result for a job that already has one: recorded, then dropped."""

    key: str
    dispatch: int  # which hand-out of the job produced it (1 = the first)
    worker: str  # the grader that sent it
    verdict: str
    delivered_dispatch: int  # the hand-out whose result was kept
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DuplicateSink = Callable[[Duplicate], Any]  # plain or async


@dataclass
class _Entry:
    dispatches: int = 0
    delivered: int | None = None  # the dispatch whose result was kept


class JobLedger:
    """Which dispatch of each job delivered its result; duplicates are counted and dropped."""

    def __init__(self, sink: DuplicateSink | None = None, remember: int = 100_000) -> None:
        self.sink = sink
        self.remember = remember
        self.entries: dict[str, _Entry] = {}
        self.duplicates: list[Duplicate] = []
        self.delivered = 0

    def dispatch(self, key: str) -> int:
        """Record one more hand-out of ``key``; returns its number (1, 2, ...)."""
        entry = self.entries.setdefault(key, _Entry())
        entry.dispatches += 1
        if len(self.entries) > self.remember:  # forget the oldest finished jobs
            for old in [k for k, e in self.entries.items() if e.delivered is not None][:1000]:
                del self.entries[old]
        return entry.dispatches

    def dispatches(self, key: str) -> int:
        entry = self.entries.get(key)
        return entry.dispatches if entry else 0

    def is_delivered(self, key: str) -> bool:
        entry = self.entries.get(key)
        return entry is not None and entry.delivered is not None

    async def deliver(self, key: str, dispatch: int, worker: str, feedback: Feedback) -> bool:
        """True when this is the job's first result (keep it); False for a duplicate."""
        entry = self.entries.setdefault(key, _Entry(dispatches=dispatch))
        if entry.delivered is None:
            entry.delivered = dispatch
            self.delivered += 1
            return True
        duplicate = Duplicate(key, dispatch, worker, feedback.verdict, entry.delivered)
        self.duplicates.append(duplicate)
        if self.sink is not None:
            with contextlib.suppress(Exception):  # recording it must not stop the grading
                result = self.sink(duplicate)
                if inspect.isawaitable(result):
                    await result
        return False
