"""Headless progress for `mkb run` / `mkb demo`: a live rich summary or a JSON event stream."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any, TextIO

from engine.events import EngineEvent, EventBus


class JsonEventStream:
    """Writes every engine event as one JSON object per line."""

    def __init__(self, bus: EventBus, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        bus.subscribe(self._write)

    def _write(self, event: EngineEvent) -> None:
        self.out.write(json.dumps({"t": round(time.time(), 3), **event.as_dict()},
                                  default=str) + "\n")
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
        self._live: Any = None
        bus.subscribe(self._on_event)

    def _on_event(self, event: EngineEvent) -> None:
        kind = event.kind
        if kind == "attempt_started":
            self.states["running"] += 1
        elif kind in ("attempt_finished", "attempt_skipped"):
            if kind == "attempt_finished":
                self.states["running"] -= 1
            state = event.data.get("state", "skipped")
            self.states[state] += 1
            outcome = event.data.get("outcome")
            self.last_line = f"{event.attempt_id}: {state} {outcome or ''}".strip()
        elif kind == "attempt_retrying":
            self.states["running"] -= 1
        elif kind == "grading_started":
            self.queue += 1
            self.waiting = int(event.data.get("waiting", 0))
        elif kind == "fleet_status":
            self.fleet = (f"{event.data.get('busy', 0)}/{event.data.get('slots', 0)} busy, "
                          f"{event.data.get('queued', 0)} queued on "
                          f"{event.data.get('up', 0)}/{event.data.get('hosts', 0)} hosts up")
        elif kind == "submission_graded":
            self.queue = max(0, self.queue - 1)
            self.graded += 1
        if self._live is not None:
            self._live.update(self.render())

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
