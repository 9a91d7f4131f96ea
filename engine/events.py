"""The event catalogue: every kind of engine event is one small typed record.

An event is published after its data is in SQLite. :class:`Publisher` is the one way the engine
publishes: it runs the data write and the ``events`` row in one store transaction, then
notifies the live readers on the :class:`EventBus` (the TUI bridge, the progress display, the
``--json`` stream), so no caller can write a row without telling the live readers or tell
them about data not yet committed. A reader that falls behind loses nothing that matters:
every event's data is stored and can be re-read.

Each record says where its row comes from (:class:`Row`) and which view it changes
(:class:`Area`); readers match on the kind (``isinstance`` or :func:`area_of`), never on a
prefix of the kind string. Kinds written only by storage (labels, plans, the run lock) are
listed in :data:`STORED_KINDS` so a reader of the ``events`` table can classify them too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from storage import writes
from storage.store import Store

T = TypeVar("T")


class Area(StrEnum):
    """What a viewer re-reads when an event of a kind arrives."""

    ATTEMPTS = "attempts"
    COMPARISONS = "comparisons"
    LABELS = "labels"
    EXPERIMENTS = "experiments"
    ENGINE = "engine"  # status (pause, grading queue, fleet, run lock): no view re-reads


class Row(StrEnum):
    """Where an event's ``events`` row comes from."""

    PUBLISH = "publish"  # Publisher.publish appends it, in the write's transaction
    WRITE = "write"  # the storage write published with it appends it (shared with other writers)
    LIVE = "live"  # no row: a transient status for live readers only


@dataclass(frozen=True)
class Event:
    """Base of every record: the experiment and attempt it concerns."""

    KIND: ClassVar[str] = ""
    AREA: ClassVar[Area] = Area.ENGINE
    ROW: ClassVar[Row] = Row.LIVE

    experiment_id: str = ""
    attempt_id: int | None = None

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def data(self) -> dict[str, Any]:
        """The record's own fields (the stored payload)."""
        skip = ("experiment_id", "attempt_id")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "experiment_id": self.experiment_id,
            "attempt_id": self.attempt_id,
            "data": self.data,
        }


KINDS: dict[str, type[Event]] = {}
E = TypeVar("E", bound=type[Event])


def kind(name: str, area: Area, row: Row) -> Callable[[E], E]:
    """Register a record class under ``name`` in the catalogue."""

    def register(cls: E) -> E:
        if name in KINDS:
            raise ValueError(f"event kind {name!r} registered twice")
        cls.KIND, cls.AREA, cls.ROW = name, area, row
        KINDS[name] = cls
        return cls

    return register


# -- the experiment and the engine -------------------------------------------------------------
@kind("experiment_started", Area.EXPERIMENTS, Row.LIVE)
@dataclass(frozen=True)
class ExperimentStarted(Event):
    attempts: int = 0


@kind("experiment_finished", Area.EXPERIMENTS, Row.WRITE)  # row: experiment_state
@dataclass(frozen=True)
class ExperimentFinished(Event):
    pass


@kind("experiment_stopped", Area.EXPERIMENTS, Row.WRITE)  # row: experiment_state
@dataclass(frozen=True)
class ExperimentStopped(Event):
    pass


@kind("stale_attempts", Area.ENGINE, Row.PUBLISH)
@dataclass(frozen=True)
class StaleAttempts(Event):
    keys: list[str] = field(default_factory=list)
    rerun: bool = False


@kind("engine_paused", Area.ENGINE, Row.LIVE)
@dataclass(frozen=True)
class EnginePaused(Event):
    pass


@kind("engine_resumed", Area.ENGINE, Row.LIVE)
@dataclass(frozen=True)
class EngineResumed(Event):
    pass


@kind("run_lock_taken_over", Area.ENGINE, Row.LIVE)  # row: run_lock_acquired
@dataclass(frozen=True)
class RunLockTakenOver(Event):
    pid: int = 0
    host: str = ""
    since: str = ""


@kind("run_lock_lost", Area.ENGINE, Row.LIVE)
@dataclass(frozen=True)
class RunLockLost(Event):
    pass


@kind("fleet_status", Area.ENGINE, Row.LIVE)
@dataclass(frozen=True)
class FleetStatus(Event):
    hosts: int = 0
    up: int = 0
    slots: int = 0
    busy: int = 0
    queued: int = 0
    completed: int = 0
    utilisation: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)


@kind("ray_status", Area.ENGINE, Row.LIVE)
@dataclass(frozen=True)
class RayStatus(Event):
    """The Ray cluster that grades (``grading = "ray"``): nodes, GPUs, graders, queue."""

    nodes: int = 0
    gpus: float = 0.0
    graders: int = 0
    up: int = 0
    busy: int = 0
    queued: int = 0
    completed: int = 0
    restarts: int = 0
    requeued: int = 0
    duplicates: int = 0

    @classmethod
    def from_status(cls, experiment_id: str, status: dict[str, Any]) -> RayStatus:
        """From the backend's ``status()`` (unknown keys ignored)."""
        known = {f.name for f in fields(cls)} - {"experiment_id", "attempt_id"}
        return cls(experiment_id, **{k: v for k, v in status.items() if k in known})

    @property
    def summary(self) -> str:
        """One line for the progress display and the TUI."""
        return (
            f"{self.busy}/{self.graders} graders busy ({self.up} up), {self.queued} queued, "
            f"{self.nodes} nodes, {self.gpus:g} GPUs, {self.restarts} restarts, "
            f"{self.requeued} requeued, {self.duplicates} duplicates dropped"
        )


@kind("grading_duplicate", Area.ENGINE, Row.PUBLISH)
@dataclass(frozen=True)
class GradingDuplicate(Event):
    """A second result for a grading job that has one (a restarted grader's retry): dropped."""

    job_id: str = ""
    dispatch: int = 0
    kept_dispatch: int = 0
    worker: str = ""
    verdict: str = ""


# -- an attempt's lifecycle --------------------------------------------------------------------
@kind("attempt_started", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptStarted(Event):
    key: str = ""
    try_number: int = 1


@kind("attempt_skipped", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptSkipped(Event):
    reason: str = ""


@kind("attempt_retrying", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptRetrying(Event):
    error: str | None = None


@kind("attempt_interrupted", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptInterrupted(Event):
    error: str | None = None


@kind("attempt_finished", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptFinished(Event):
    state: str = ""
    outcome: str | None = None
    reason: str | None = None
    speedup: float | None = None


@kind("attempt_note", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class AttemptNote(Event):
    """A runner's lifecycle or fault report (try started, grading retry, ...), stored as
    ``attempt.<name>`` with the report as its payload."""

    name: str = "attempt_event"
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return f"attempt.{self.name}"

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.report)


@kind("step_recorded", Area.ATTEMPTS, Row.WRITE)
@dataclass(frozen=True)
class StepRecorded(Event):
    step_index: int = 0


@kind("model_reply_streamed", Area.ATTEMPTS, Row.LIVE)
@dataclass(frozen=True)
class ModelReplyStreamed(Event):
    """Text a model reply gained while it streams (throttled by the runner; no row: the
    finished reply is stored as a step). ``offset`` is the reply's length before ``text``."""

    try_number: int = 1
    reply: int = 0
    offset: int = 0
    text: str = ""
    done: bool = False


@kind("skill_updated", Area.ATTEMPTS, Row.WRITE)
@dataclass(frozen=True)
class SkillUpdated(Event):
    chars: int = 0


@kind("submission_received", Area.ATTEMPTS, Row.LIVE)  # row: when graded (add_submission)
@dataclass(frozen=True)
class SubmissionReceived(Event):
    n: int = 0


@kind("submission_rejected", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class SubmissionRejected(Event):
    reason: str = ""
    detail: str = ""


@kind("feedback_returned", Area.ATTEMPTS, Row.LIVE)
@dataclass(frozen=True)
class FeedbackReturned(Event):
    n: int = 0
    verdict: str = ""
    speedup: float | None = None


@kind("grading_started", Area.ATTEMPTS, Row.LIVE)
@dataclass(frozen=True)
class GradingStarted(Event):
    n: int = 0
    purpose: str = "submission"
    waiting: int = 0


@kind("submission_graded", Area.ATTEMPTS, Row.WRITE)
@dataclass(frozen=True)
class SubmissionGraded(Event):
    n: int = 0
    purpose: str = "submission"
    verdict: str = ""
    speedup: float | None = None


@kind("final_repeat_graded", Area.ATTEMPTS, Row.PUBLISH)
@dataclass(frozen=True)
class FinalRepeatGraded(Event):
    """A repeated final evaluation (``engine/final_repeats.py``): repeat ≥ 2 of one attempt."""

    repeat: int = 0
    verdict: str = ""
    runtime_ms: float | None = None


@kind("paired_final_graded", Area.COMPARISONS, Row.PUBLISH)
@dataclass(frozen=True)
class PairedFinalGraded(Event):
    """One grading of a comparison's paired job (``engine/paired_repeats.py``): its position
    in the job's order (pairs, each in a random order), the arm's attempt (``attempt_id``),
    and the slot it ran on."""

    comparison_id: int = 0
    arm: str = ""
    position: int = 0
    slot: str = ""
    verdict: str = ""
    runtime_ms: float | None = None


@kind("comparison_updated", Area.COMPARISONS, Row.WRITE)
@dataclass(frozen=True)
class ComparisonUpdated(Event):
    problem_id: str = ""
    direction: str = ""


# Kinds only storage writes (other writers share those functions); no live record.
STORED_KINDS: dict[str, Area] = {
    "experiment_created": Area.EXPERIMENTS,
    "experiment_state": Area.EXPERIMENTS,
    "experiment_preview": Area.EXPERIMENTS,
    "attempt_planned": Area.ATTEMPTS,
    "submission_received": Area.ATTEMPTS,
    "run_lock_acquired": Area.ENGINE,
    "label_added": Area.LABELS,
    "annotation_failed": Area.ENGINE,
}


def area_of(kind_name: str) -> Area | None:
    """The view an event kind (live or stored) changes; None for a kind not in the catalogue."""
    record = KINDS.get(kind_name)
    if record is not None:
        return record.AREA
    if kind_name in STORED_KINDS:
        return STORED_KINDS[kind_name]
    head, dot, _ = kind_name.partition(".")
    if dot and head == "attempt":  # AttemptNote's stored kinds: attempt.<name>
        return AttemptNote.AREA
    return None


Listener = Callable[[Event], None]


class EventBus:
    """Fan-out of published events to synchronous listeners and async queues."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._queues: list[asyncio.Queue[Event]] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every event; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def queue(self, maxsize: int = 10_000) -> asyncio.Queue[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self._queues.append(q)
        return q

    def notify(self, event: Event) -> None:
        """Hand ``event`` to the live readers (a row-less event, or one already committed)."""
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):  # a broken listener must not stop the engine
                listener(event)
        for q in self._queues:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(event)


class Publisher:
    """Writes an event's data and row in one transaction, then notifies the live readers."""

    def __init__(self, store: Store, bus: EventBus) -> None:
        self.store = store
        self.bus = bus

    async def publish(
        self, event: Event, write: Callable[..., T] | None = None, *args: Any, **kwargs: Any
    ) -> T | None:
        """Run ``write(db, *args, **kwargs)`` and store ``event``'s row (per its :class:`Row`)
        in one transaction, then notify; returns what ``write`` returned."""
        if event.ROW is Row.WRITE and write is None:
            raise TypeError(f"{event.kind}: its row comes from a storage write; pass one")
        if event.ROW is Row.LIVE and write is None:
            self.bus.notify(event)
            return None

        def transaction(db: Any) -> T | None:
            result = write(db, *args, **kwargs) if write is not None else None
            if event.ROW is Row.PUBLISH:
                writes.append_event(
                    db,
                    event.kind,
                    event.data,
                    experiment_id=event.experiment_id or None,
                    attempt_id=event.attempt_id,
                )
            return result

        result = await self.store.write(transaction)
        self.bus.notify(event)
        return result

    def notify(self, event: Event) -> None:
        """Publish a live-only event (engine status: nothing to store)."""
        if event.ROW is not Row.LIVE:
            raise TypeError(f"{event.kind} is stored: use publish")
        self.bus.notify(event)
