"""Agent-written text with terminal escapes and markup, through the real widgets: nothing
reaches the terminal but printable text, and markup-like text shows literally."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import tui_seed as seed
from conftest import wait_until
from textual.command import CommandPalette
from textual.widgets import Input

from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import AttemptsScreen
from screens.transfer import TransferScreen
from storage import queries, writes
from storage.db import open_db

# clear the screen, retitle the window, write the clipboard, 8-bit CSI, a reset; markup
HOSTILE = (
    "\x1b[2J\x1b]0;PWNED\x07\x1b]52;c;aGVsbG8=\x1b\\\x9b31m\x1bc "
    "[bold red]loud[/] [link=http://evil.example]click[/link]"
)
LITERAL = "[bold red]loud[/] [link=http://evil.example]click[/link]"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def poison(path: Path) -> tuple[int, int]:
    """Hostile text in every agent-written field of one attempt and its comparison."""
    first = seed.attempt_id(path, "model-a", "p28", "solo_cute")
    db = open_db(path)
    try:
        with db.atomic():
            writes.add_step(
                db,
                first,
                5,
                analysis=f"analysis {HOSTILE}",
                plan=f"plan {HOSTILE}",
                keystrokes=f"echo {HOSTILE}\n",
                terminal_output=f"output {HOSTILE}",
                message=f"note {HOSTILE}",
            )
            sub = writes.add_submission(db, first, 3, f"# impl {HOSTILE}\n")
            job = writes.start_grading_job(db, sub, "simulated")
            writes.finish_grading_job(
                db,
                job,
                {
                    "verdict": "fail",
                    "reason": f"import.error {HOSTILE}",
                    "message": f"message {HOSTILE}",
                    "import_ok": False,
                    "import_error": f"Traceback {HOSTILE}",
                    "findings": [{"code": "rule", "message": f"finding {HOSTILE}", "line": 1}],
                },
            )
            writes.update_attempt(db, first, reason=f"reason {HOSTILE}", error=f"error {HOSTILE}")
            writes.add_skill(db, f"# skill\n{HOSTILE}\n", attempt_id=first)
            comparison = next(
                c for c in queries.comparisons(db, seed.EXPERIMENT) if c.source_attempt_id == first
            )
            writes.add_label(
                db,
                task="cause",
                subject_type="comparison",
                subject_id=comparison.id,
                category="cause",
                value="other",
                evidence=f"evidence {HOSTILE}",
                annotator=f"llm {HOSTILE}",
                annotator_kind="llm",
            )
            db.execute(
                "UPDATE attempts SET model=? WHERE plan_key=?",
                [f"evil {HOSTILE}", "model-b|p28|r2|solo_cute"],
            )
    finally:
        db.conn.close()
    return first, comparison.id


def screen_text(app: object) -> str:
    """What the terminal shows (the screenshot's text), checked free of control characters."""
    svg = app.export_screenshot()  # type: ignore[attr-defined]
    leaks = CONTROL.findall(svg)
    assert not leaks, f"control characters reached the terminal: {leaks!r}"
    return html.unescape(svg).replace("\xa0", " ")


async def shows(pilot: object, app: object, *texts: str) -> None:
    """Wait until every text is on screen; a control character in any frame fails at once."""
    await wait_until(pilot, lambda: all(text in screen_text(app) for text in texts))


@pytest.mark.slow
async def test_hostile_agent_text_is_shown_as_plain_text(make_app, seeded_db: Path) -> None:
    first, comparison_id = poison(seeded_db)
    app = make_app()
    async with app.run_test(size=(200, 60), notifications=True) as pilot:
        assert isinstance(app.screen, AttemptsScreen)
        await shows(pilot, app, "evil  [bold red]loud")  # the Attempts table

        app.open_attempt(first)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen))
        await shows(pilot, app, f"analysis  {LITERAL}")  # the trajectory tab
        for key, expected in (
            ("f", f"message  {LITERAL}"),
            ("k", LITERAL),
            ("o", f"error: error  {LITERAL}"),
        ):
            await pilot.press(key)
            await shows(pilot, app, expected)

        app.open_comparison(comparison_id)
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen))
        await shows(pilot, app, "evidence  [bold red]loud", LITERAL)

        app.notify("failed: \x1b]0;PWNED\x07[b]not bold[/b]", timeout=30)  # quotes errors
        await shows(pilot, app, "failed: [b]not bold[/b]")


async def test_palette_shows_names_literally(make_app, seeded_db: Path) -> None:
    poison(seeded_db)
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: app.experiment_id == "tui-test")
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        app.screen.query_one(Input).value = "evil"
        await shows(pilot, app, "evil  [bold red]loud")
