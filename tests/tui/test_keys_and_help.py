"""Keys: the help screen (? / F1) generated from BINDINGS, PageUp / PageDown without Tab,
one key per tab, type-ahead after a mode key, the pause message, the label dialog's names."""

from __future__ import annotations

from pathlib import Path

import pytest
import tui_seed as seed
from conftest import plain, wait_until
from textual import events
from textual.binding import Binding
from textual.widgets import DataTable, Input, Label, Static, TabbedContent

from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import PAGE_SIZE, AttemptsScreen
from screens.dialogs import LabelDialog
from screens.help import HelpScreen, declared_bindings
from screens.launch import PAUSED_NOTE, LaunchScreen
from screens.lift import ComparisonListScreen, LiftScreen
from screens.rubric import RubricScreen
from screens.transfer import TransferScreen


def help_text(app) -> str:  # type: ignore[no-untyped-def]
    return plain(app.screen.query_one("#help-text", Static))


def descriptions(cls: type) -> list[str]:
    return [b.description for b in declared_bindings(cls) if b.description]


async def open_help(app, pilot, key: str) -> str:  # type: ignore[no-untyped-def]
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
    return help_text(app)


async def test_help_lists_each_screens_own_keys(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)
        text = await open_help(app, pilot, "question_mark")
        assert "Keys: Attempts" in plain(app.screen.query_one("#help-title", Static))
        for description in descriptions(AttemptsScreen):  # from BINDINGS, so no drift
            assert description in text
        assert "Page down the table" in text and "Quit" in text and "^p" in text
        assert "final is the final evaluation's speedup" in text  # the screen's note
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen))
        await pilot.press("2")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, LiftScreen) and app.screen.report is not None,
            timeout=30,
        )
        text = await open_help(app, pilot, "f1")
        assert "Keys: Lift" in plain(app.screen.query_one("#help-title", Static))
        for description in descriptions(LiftScreen):
            assert description in text
        assert "Reverse" not in text  # an Attempts key, not this screen's
        assert "geometric mean" in text and "ratio of the speedups" in text
        await pilot.press("f1")  # the same key closes it
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen))


async def test_help_follows_a_keymap_and_every_screen_has_one(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)
        app.set_keymap({"attempts.sort": "o"})
        text = await open_help(app, pilot, "f1")
        assert any(line.split() == ["o", "Sort"] for line in text.splitlines())
        await pilot.press("escape")
        for open_screen, cls in (
            (lambda: app.open_attempt(1), AttemptDetailScreen),
            (lambda: app.open_comparison(1), TransferScreen),
        ):
            open_screen()
            await wait_until(pilot, lambda cls=cls: isinstance(app.screen, cls))
            text = await open_help(app, pilot, "f1")
            for description in descriptions(cls):
                assert description in text
            await pilot.press("escape", "escape")
            await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen))


async def test_page_keys_page_the_table_from_the_filter_and_turn_pages(
    make_app, tmp_path: Path
) -> None:
    path = seed.build(tmp_path / "big.sqlite", extra_attempts=250)
    app = make_app(db_path=path)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 267)
        table = screen.query_one(DataTable)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)  # typing a filter, no Tab pressed
        await pilot.press("pagedown")
        assert table.cursor_row > 10  # a page down, from the filter field
        table.move_cursor(row=PAGE_SIZE - 1)
        await pilot.press("pagedown")  # past the last row: the next SQL page
        await wait_until(
            pilot,
            lambda: (
                screen.page_offset == PAGE_SIZE
                and screen.rows[0].id == PAGE_SIZE + 1
                and table.cursor_row == 0
            ),
        )
        await pilot.press("pageup")  # before the first row: back, at its last row
        await wait_until(
            pilot,
            lambda: (
                screen.page_offset == 0
                and screen.rows[0].id == 1
                and table.cursor_row == PAGE_SIZE - 1
            ),
        )


async def test_tabs_switch_with_one_key_and_focus_their_table(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, LiftScreen) and app.screen.report is not None,
            timeout=30,
        )
        tabs = app.screen.query_one(TabbedContent)
        for key, tab, table in (
            ("s", "solo-tab", "solo-table"),
            ("t", "tiers-tab", "tiers-table"),
            ("l", "lift-tab", "lift-table"),
        ):
            await pilot.press(key)
            assert tabs.active == tab and app.focused is not None
            assert app.focused.id == table
        await pilot.press("4")
        await wait_until(
            pilot, lambda: isinstance(app.screen, RubricScreen) and app.screen.report is not None
        )
        assert app.focused is not None and app.focused.id == "rubric-prevalence-table"
        await pilot.press("u")
        assert app.screen.query_one(TabbedContent).active == "rubric-uptake"
        assert app.focused is not None and app.focused.id == "rubric-uptake-table"
        await pilot.press("a")
        assert app.screen.query_one(TabbedContent).active == "rubric-agreement"


async def test_keys_typed_right_after_the_launch_key_reach_the_config_field(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)
        for key in "3p28":  # as fast as a terminal delivers them; "2" is text here
            app.post_message(events.Key(key, key))
        await wait_until(
            pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.query("#config-path")
        )
        field = app.screen.query_one("#config-path", Input)
        await wait_until(pilot, lambda: field.value == "p28")
        assert app.focused is field
        await pilot.press("escape", "1")  # the mode keys still work out of a field
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen))


SLOW = """\
[experiment]
name = "slow"
id = "slow"
problems = ["p28"]
agent = "simulated"
grading = "simulated"
max_submissions = 5

[[models]]
name = "alpha"
"""


async def test_the_pause_message_clears_on_resume(
    make_app, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import factory
    from engine.config import parse_config
    from engine.standins.simulated import SimulatedRunner

    monkeypatch.setattr(
        factory, "make_runner", lambda config: SimulatedRunner(submissions=5, delay_s=0.5)
    )
    app = make_app(db_path=tmp_path / "pause.sqlite")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        launch = app.screen
        app.start_experiment(parse_config(SLOW, "<test>"))
        await wait_until(pilot, lambda: app.engine is not None, timeout=20)
        state = launch.query_one("#engine-state", Static)
        app.set_focus(None)
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: PAUSED_NOTE in plain(state))
        await pilot.press("1")
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen))
        status = app.screen.query_one("#attempt-status", Static)
        await wait_until(pilot, lambda: "PAUSED" in plain(status))
        app.resume_engine()
        await wait_until(pilot, lambda: "PAUSED" not in plain(status))
        assert PAUSED_NOTE not in plain(state) and "engine: running" in plain(state)
        app.stop_engine()
        await wait_until(pilot, lambda: app.engine_state == "idle", timeout=30)


async def test_the_label_dialog_names_its_fields(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        app.open_comparison(1)
        await wait_until(
            pilot, lambda: isinstance(app.screen, TransferScreen) and app.screen.view is not None
        )
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, LabelDialog))
        names = [str(label.content) for label in app.screen.query(".field-label").results(Label)]
        assert names == ["Task", "Category", "Value", "Evidence"]
        for field_id in ("task", "category", "value", "evidence"):  # each above its field
            name = app.screen.query_one(f"#label-{field_id}-name", Label)
            field = app.screen.query_one(f"#label-{field_id}")
            assert name.region.bottom <= field.region.y and name.region.height == 1
        for button in ("#label-save", "#label-cancel"):  # whole, inside 100×30
            region = app.screen.query_one(button).region
            assert region.height and region.bottom <= 30 and region.right <= 100


def test_help_bindings_include_inherited_page_keys() -> None:
    keys = {b.key for b in declared_bindings(ComparisonListScreen)}
    assert {"escape", "pageup", "pagedown"} <= keys
    assert all(isinstance(b, Binding) for b in declared_bindings(LiftScreen))
