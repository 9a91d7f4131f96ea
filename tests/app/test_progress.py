"""Headless progress: counts by state, gradings in flight and waiting, the fleet line."""

from __future__ import annotations

import io
import json

from rich.console import Console

from app.progress import JsonEventStream, ProgressDisplay
from engine.events import (
    AttemptFinished,
    AttemptStarted,
    EventBus,
    FleetStatus,
    GradingStarted,
    SubmissionGraded,
)


def _text(display: ProgressDisplay) -> str:
    console = Console(width=120, record=True, color_system=None, file=io.StringIO())
    console.print(display.render())
    return console.export_text()


def test_progress_counts_states_gradings_and_the_slot_queue() -> None:
    bus = EventBus()
    display = ProgressDisplay(bus, total=4, title="exp")
    for attempt in (1, 2):
        bus.notify(AttemptStarted("exp", attempt))
    bus.notify(GradingStarted("exp", 1, n=1, purpose="submission", waiting=0))
    bus.notify(GradingStarted("exp", 2, n=1, purpose="final", waiting=1))
    bus.notify(SubmissionGraded("exp", 1, n=1, purpose="submission", verdict="preview"))
    bus.notify(AttemptFinished("exp", 1, state="finished", outcome="preview"))
    bus.notify(FleetStatus("exp", busy=2, slots=4, queued=3, up=2, hosts=2))
    text = _text(display)
    assert "1/4 attempts done" in text and "finished: 1" in text and "running: 1" in text
    assert "submissions graded  1" in text
    assert "1 (1 waiting for a slot)" in text
    assert "2/4 busy, 3 queued on 2/2 hosts up" in text


def test_json_stream_writes_one_object_per_event() -> None:
    bus = EventBus()
    out = io.StringIO()
    JsonEventStream(bus, out)
    bus.notify(GradingStarted("exp", 3, waiting=2))
    (line,) = out.getvalue().splitlines()
    event = json.loads(line)
    assert event["kind"] == "grading_started" and event["data"]["waiting"] == 2
