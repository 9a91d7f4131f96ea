"""Live tokens in the TUI: the App joins streamed reply events per attempt (cleaned), and the
attempt detail shows the growing reply as a tail that its stored step replaces."""

from __future__ import annotations

from pathlib import Path

import tui_seed as seed
from conftest import plain, wait_until
from textual.widgets import RichLog, Static

from engine.attempts.observer import ReplyDelta
from engine.events import (
    AttemptNote,
    EventBus,
    ModelReplyStreamed,
    Publisher,
    StepRecorded,
)
from engine.recording import StoreObserver
from screens.attempt_detail import AttemptDetailScreen
from screens.live_reply import LiveReplies, ReplyTail


def _part(offset: int, text: str, *, reply: int = 1, done: bool = False) -> ModelReplyStreamed:
    return ModelReplyStreamed(
        "exp", 7, try_number=1, reply=reply, offset=offset, text=text, done=done
    )


def test_replies_join_per_attempt_and_end_with_their_step() -> None:
    live = LiveReplies()
    assert live.absorb(_part(0, "Analysis: the ")) is True
    assert live.absorb(_part(14, "kernel is ")) is True
    assert live.absorb(_part(14, "kernel is ")) is True  # seen twice: not doubled
    reply = live.get(7)
    assert reply is not None and reply.text == "Analysis: the kernel is " and not reply.done
    assert live.take_updated() == {7} and live.take_updated() == frozenset()
    assert live.absorb(AttemptNote("exp", 7, name="try_started")) is False
    assert live.get(7) is not None  # only its step (or the attempt's end) replaces it
    live.absorb(_part(0, "second reply", reply=2))
    assert live.get(7).text == "second reply"  # type: ignore[union-attr]
    assert live.absorb(StepRecorded("exp", 7, step_index=3)) is False
    assert live.get(7) is None and live.take_updated() == {7}
    assert live.get(8) is None


def test_reply_text_is_cleaned_even_when_a_sequence_spans_two_reports() -> None:
    live = LiveReplies()
    live.absorb(_part(0, "plan: x\x1b[3"))
    live.absorb(_part(len("plan: x\x1b[3"), "1mred\x1b]0;pwned\x07 done\r\n"))
    reply = live.get(7)
    assert reply is not None and reply.text == "plan: xred done\n"


def tail_text(screen: AttemptDetailScreen) -> str:
    return plain(screen.query_one("#reply-tail-text", Static))


def log_text(log: RichLog) -> str:
    return "\n".join(strip.text for strip in log.lines)


async def test_detail_shows_the_streaming_reply_then_its_stored_step(
    make_app, seeded_db: Path
) -> None:
    attempt = seed.attempt_id(seeded_db, "model-a", "p28", "solo_cute")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        bus = EventBus()
        bus.subscribe(app._on_engine_event)  # as the App does for the engine it owns
        observer = StoreObserver(Publisher(app.store, bus), seed.EXPERIMENT, attempt, 1)
        app.open_attempt(attempt)
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, AttemptDetailScreen) and app.screen.step_count == 2,
        )
        screen = app.screen
        tail = screen.query_one(ReplyTail)
        assert not tail.display  # nothing streaming

        await observer.reply_streamed(attempt, ReplyDelta(1, 0, '{"analysis": "tile the'))
        await wait_until(pilot, lambda: tail.display and "tile the" in tail_text(screen))
        assert "model is replying…" in tail_text(screen)
        first = '{"analysis": "tile the'
        await observer.reply_streamed(attempt, ReplyDelta(1, len(first), " rows [/] \x1b[2J"))
        await wait_until(pilot, lambda: "tile the rows [/]" in tail_text(screen))
        text = first + " rows [/] \x1b[2J"
        await observer.reply_streamed(attempt, ReplyDelta(1, len(text), ' by 4"}', done=True))
        await wait_until(pilot, lambda: "model replied" in tail_text(screen))
        shown = tail_text(screen)
        assert 'tile the rows [/]  by 4"}' in shown and "\x1b" not in shown
        assert screen.step_count == 2  # the reply is not a step yet

        step = {
            "step_id": 9,
            "source": "agent",
            "message": "Analysis: tile the rows by 4\nPlan: write it",
        }
        await observer.step_recorded(attempt, step)
        log = screen.query_one(RichLog)
        await wait_until(pilot, lambda: screen.step_count == 3 and not tail.display)
        assert "tile the rows by 4" in log_text(log)
        assert app.live_reply(attempt) is None
