"""Headless progress for `mkb run` / `mkb demo`: a live rich summary or a JSON event stream."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any, TextIO

from engine.events import (
    AttemptFinished,
    AttemptRetrying,
    AttemptSkipped,
    AttemptStarted,
    Event,
    EventBus,
    FleetStatus,
    GradingStarted,
    RayStatus,
    SubmissionGraded,
)


class JsonEventStream:
    """Writes every engine event as one JSON object per line."""

    def __init__(self, bus: EventBus, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        bus.subscribe(self._write)

    def _write(self, event: Event) -> None:
        self.out.write(
            json.dumps({"t": round(time.time(), 3), **event.as_dict()}, default=str) + "\n"
        )
        self.out.flush()


class ProgressDisplay:
    """Counts attempts by state, submissions graded and the grading queue; renders with rich."""

    def __init__(self, bus: EventBus, total: int, title: str) -> None:
        self.total = total
        self.title = title
        self.states: Counter[str] = Counter()
        self.graded = 0
        self.queue = 0
        self.waiting = 0  # gradings waiting for one of the engine's grading slots
        self.last_line = ""
        self.fleet = ""
        self.cluster = ""  # the Ray cluster (grading = "ray")
        self._live: Any = None
        bus.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        match event:
            case AttemptStarted():
                self.states["running"] += 1
            case AttemptFinished(state=state, outcome=outcome):
                self.states["running"] -= 1
                self._ended(event.attempt_id, state, outcome)
            case AttemptSkipped():
                self._ended(event.attempt_id, "skipped", None)
            case AttemptRetrying():
                self.states["running"] -= 1
            case GradingStarted(waiting=waiting):
                self.queue += 1
                self.waiting = int(waiting)
            case FleetStatus():
                self.fleet = (
                    f"{event.busy}/{event.slots} busy, {event.queued} queued on "
                    f"{event.up}/{event.hosts} hosts up"
                )
            case RayStatus():
                self.cluster = event.summary
            case SubmissionGraded():
                self.queue = max(0, self.queue - 1)
                self.graded += 1
        if self._live is not None:
            self._live.update(self.render())

    def _ended(self, attempt_id: int | None, state: str, outcome: str | None) -> None:
        self.states[state] += 1
        self.last_line = f"{attempt_id}: {state} {outcome or ''}".strip()

    def render(self) -> Any:
        from rich.table import Table

        done = sum(v for k, v in self.states.items() if k != "running")
        table = Table.grid(padding=(0, 2))
        table.add_row(f"[bold]{self.title}[/]", f"{done}/{self.total} attempts done")
        states = "  ".join(f"{k}: {v}" for k, v in sorted(self.states.items()) if v)
        table.add_row("attempts", states or "-")
        table.add_row("submissions graded", str(self.graded))
        table.add_row("grading in flight", f"{self.queue} ({self.waiting} waiting for a slot)")
        if self.fleet:
            table.add_row("grading fleet", self.fleet)
        if self.cluster:
            table.add_row("ray cluster", self.cluster)
        if self.last_line:
            table.add_row("last", self.last_line)
        return table

    def __enter__(self) -> ProgressDisplay:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        if console.is_terminal:
            self._live = Live(self.render(), console=console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
