"""Attempt detail: trajectory as plain text (live), feedback timeline, skill, outcome."""

from __future__ import annotations

from pathlib import Path

import pytest
import tui_seed as seed
from conftest import plain, wait_until
from textual.widgets import RichLog, Static, TabbedContent

from screens.attempt_detail import AttemptDetailScreen
from screens.transfer import TransferScreen
from storage import writes
from storage.store import Store


def log_text(log: RichLog) -> str:
    return "\n".join(strip.text for strip in log.lines)


@pytest.mark.slow
async def test_detail_renders_and_tails_steps(make_app, seeded_db: Path) -> None:
    first = seed.attempt_id(seeded_db, "model-a", "p28", "solo_cute")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_attempt(first)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                         and app.screen.row is not None)
        screen = app.screen
        log = screen.query_one(RichLog)
        await wait_until(pilot, lambda: screen.step_count == 2 and log.lines)
        text = log_text(log)
        assert "closing tag [/]" in text and "[bold]memory bound[/bold]" in text
        assert "[red]not a style[/red]" in text
        await pilot.press("f")
        assert screen.query_one(TabbedContent).active == "feedback"
        feedback = plain(screen.query_one("#submissions", Static))
        assert "error 0.0004 ≤ allowance 0.0012" in feedback
        await pilot.press("k")
        assert "keep [/] literal" in plain(screen.query_one("#skill-text", Static))
        store = Store(seeded_db)
        try:
            store.write_sync(writes.add_step, first, 2, analysis="third turn [/]",
                             terminal_output="late output")
        finally:
            store.close()
        await wait_until(pilot, lambda: screen.step_count == 3)
        assert "third turn [/]" in log_text(log)
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen))
