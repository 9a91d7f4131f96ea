"""Engine events: small past-tense records published after the data is in SQLite.

Subscribers (the TUI bridge, the headless progress display, the ``--json`` stream) receive
them through :class:`EventBus`; a subscriber that falls behind loses nothing that matters,
because every event's data is already stored and can be re-read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineEvent:
    kind: str
    experiment_id: str = ""
    attempt_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Listener = Callable[[EngineEvent], None]


class EventBus:
    """Fan-out of engine events to synchronous listeners and async queues."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._queues: list[asyncio.Queue[EngineEvent]] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for every event; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def queue(self, maxsize: int = 10_000) -> asyncio.Queue[EngineEvent]:
        q: asyncio.Queue[EngineEvent] = asyncio.Queue(maxsize)
        self._queues.append(q)
        return q

    def publish(self, event: EngineEvent) -> None:
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):  # a broken listener must not stop the engine
                listener(event)
        for q in self._queues:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(event)

    def emit(
        self, kind: str, experiment_id: str = "", attempt_id: int | None = None, **data: Any
    ) -> None:
        self.publish(EngineEvent(kind, experiment_id, attempt_id, data))
