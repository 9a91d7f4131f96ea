"""Live tokens: the model's reply as it streams, gathered per attempt and shown as a tail.

The engine publishes a streaming reply as :class:`~engine.events.ModelReplyStreamed` events
(live only, throttled to ~10 a second per attempt, each with the text added since the last).
:class:`LiveReplies` is the App's side: it joins them into the reply so far per attempt and
forgets it when the reply's step is stored (``step_recorded``) or the attempt stops, so the
stored step replaces it. :class:`ReplyTail` shows it under the trajectory; the text is
cleaned of terminal control sequences (the whole reply each time, so a sequence split across
two events goes too) and rendered as plain text.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from engine.events import (
    AttemptFinished,
    AttemptInterrupted,
    AttemptRetrying,
    AttemptStarted,
    Event,
    ModelReplyStreamed,
    StepRecorded,
)
from storage.sanitize import clean_text

# the events after which a streamed reply is no longer pending: its step is stored, or the
# attempt (or its try) ended
ENDS_REPLY = (StepRecorded, AttemptFinished, AttemptInterrupted, AttemptRetrying, AttemptStarted)


@dataclass(frozen=True)
class LiveReply:
    """The reply an attempt's model is streaming (or has streamed: ``done``), not yet a step."""

    attempt_id: int
    try_number: int
    reply: int
    text: str
    done: bool = False


class LiveReplies:
    """The pending streamed reply of each attempt, from the engine's events."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[ModelReplyStreamed, str]] = {}
        self._updated: set[int] = set()

    def absorb(self, event: Event) -> bool:
        """Take in one engine event; True when it was a streamed reply (nothing to re-read)."""
        if event.attempt_id is None:
            return False
        aid = int(event.attempt_id)
        if isinstance(event, ModelReplyStreamed):
            known = self._pending.get(aid)
            same = known is not None and (known[0].try_number, known[0].reply) == (
                event.try_number,
                event.reply,
            )
            text = known[1] if known is not None and same else ""
            # text[:offset]: a report seen twice is not doubled (the engine's own bus, a
            # synchronous listener, never misses one)
            self._pending[aid] = (event, text[: event.offset] + event.text)
            self._updated.add(aid)
            return True
        if isinstance(event, ENDS_REPLY) and self._pending.pop(aid, None) is not None:
            self._updated.add(aid)
        return False

    def get(self, attempt_id: int) -> LiveReply | None:
        """The attempt's pending reply, cleaned for display; None when there is none."""
        known = self._pending.get(attempt_id)
        if known is None:
            return None
        event, text = known
        return LiveReply(attempt_id, event.try_number, event.reply, clean_text(text), event.done)

    def take_updated(self) -> frozenset[int]:
        """The attempts whose pending reply changed (or ended) since the last call."""
        updated = frozenset(self._updated)
        self._updated.clear()
        return updated


class ReplyTail(VerticalScroll):
    """The pending reply under the trajectory: hidden when there is none, else its title
    and text, scrolled to the newest line."""

    def compose(self) -> ComposeResult:
        yield Static(id="reply-tail-text", markup=False)

    def show(self, reply: LiveReply | None) -> None:
        self.display = reply is not None
        if reply is None:
            return
        state = "model replied · running its commands…" if reply.done else "model is replying…"
        title = Text(
            f"── {state} (try {reply.try_number}, reply {reply.reply}, "
            f"{len(reply.text):,} chars) ──",
            style="bold italic",
        )
        body = Text(reply.text, style="italic")
        self.query_one("#reply-tail-text", Static).update(Text("\n").join([title, body]))
        self.scroll_end(animate=False)
