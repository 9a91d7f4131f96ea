"""SVG snapshots (pytest-textual-snapshot): fixed database, pinned clock and theme, 120×40,
and every screen again at 100×30 (nothing may be cut off) and 200×60.

Regenerate deliberately with ``pytest tests/tui/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import wait_until
from rich.text import Text
from textual.widgets import DataTable, Input

from screens.attempt_detail import AttemptDetailScreen
from screens.help import HelpScreen
from screens.launch import LaunchScreen
from screens.lift import LiftScreen
from screens.rubric import RubricScreen
from screens.transfer import TransferScreen

SIZE = (120, 40)
FIXTURES = Path(__file__).parent / "fixtures"


def no_blink(pilot) -> None:  # type: ignore[no-untyped-def]
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False


def _widest(table: DataTable, key: object) -> int:
    """The widest cell (or the label) of one column, in terminal cells."""
    cells = [table.get_cell(row, key) for row in table.rows]
    texts = [table.columns[key].label, *cells]  # type: ignore[index]
    return max(Text(t).cell_len if isinstance(t, str) else t.cell_len for t in texts)


def settled(run_before):  # type: ignore[no-untyped-def]
    """Run the test's setup, then let pending refreshes land before the screenshot."""

    async def run(pilot) -> None:  # type: ignore[no-untyped-def]
        await run_before(pilot)
        await pilot.pause(0.3)
        await pilot.wait_for_scheduled_animations()
        no_blink(pilot)

    return run


@pytest.fixture
def app(make_app, seeded_db):  # type: ignore[no-untyped-def]
    return make_app(db_path=seeded_db)


def test_attempts(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)
        no_blink(pilot)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


def test_attempts_filtered(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)
        app.screen.set_filter("problem:p01 dsl:tirx")
        await wait_until(pilot, lambda: app.screen.total == 4)
        app.screen.action_focus_table()
        no_blink(pilot)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


def test_attempt_trajectory(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        app.open_attempt(1)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                         and app.screen.step_count == 2)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


@pytest.mark.slow
def test_attempt_feedback(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        app.open_attempt(3)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                         and app.screen.row is not None)
        await pilot.press("f")

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


def test_transfer_inspector(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        app.open_comparison(1)
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                         and app.screen.view is not None)
        table = app.screen.query_one("#labels-table", DataTable)

        def measured() -> bool:  # every column is as wide as its widest cell
            return table.row_count == len(app.screen.view.labels) > 0 and all(
                column.get_render_width(table) - 2 * table.cell_padding >= _widest(table, key)
                for key, column in table.columns.items())

        await wait_until(pilot, measured)
        await pilot.pause(0.3)  # let any late refresh land, then measure again
        await wait_until(pilot, measured)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


def test_lift(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and app.screen.report is not None, timeout=30)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


@pytest.mark.slow
def test_launch_preview(snap_compare, app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(FIXTURES)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        screen = app.screen
        screen.query_one("#config-path", Input).value = "launch.toml"
        screen.load_config("launch.toml")
        await wait_until(pilot, lambda: screen.config is not None)
        screen.preview()
        await wait_until(pilot, lambda: "attempts," in str(
            screen.query_one("#plan-preview").content), timeout=20)
        screen.query_one("#launch-models").focus()
        no_blink(pilot)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


@pytest.mark.slow
def test_rubric(snap_compare, app) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("4")
        await wait_until(pilot, lambda: isinstance(app.screen, RubricScreen)
                         and app.screen.query_one("#rubric-prevalence-table").row_count == 1)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=SIZE)


# -- every screen at 100×30 and 200×60 ---------------------------------------------------------
async def show_attempts(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await wait_until(pilot, lambda: getattr(app.screen, "total", 0) == 17)


async def show_detail(app, pilot) -> None:  # type: ignore[no-untyped-def]
    app.open_attempt(1)
    await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                     and app.screen.step_count == 2)


async def show_transfer(app, pilot) -> None:  # type: ignore[no-untyped-def]
    app.open_comparison(1)
    await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                     and app.screen.view is not None
                     and app.screen.query_one("#labels-table", DataTable).row_count == 1)


async def show_lift(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("2")
    await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                     and app.screen.report is not None
                     and app.screen.query_one("#lift-table", DataTable).row_count, timeout=30)


async def show_rubric(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("4")
    await wait_until(pilot, lambda: isinstance(app.screen, RubricScreen)
                     and app.screen.query_one("#rubric-prevalence-table").row_count == 1)


async def show_launch(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("3")
    await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen)
                     and app.screen.query("#config-path"))
    screen = app.screen
    screen.query_one("#config-path", Input).value = "launch.toml"
    screen.load_config("launch.toml")
    await wait_until(pilot, lambda: screen.config is not None)
    screen.preview()
    await wait_until(pilot, lambda: "attempts," in str(
        screen.query_one("#plan-preview").content), timeout=20)


async def show_help(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await show_attempts(app, pilot)
    await pilot.press("f1")
    await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))


SCREENS = {"attempts": show_attempts, "detail": show_detail, "transfer": show_transfer,
           "lift": show_lift, "rubric": show_rubric, "launch": show_launch, "help": show_help}


@pytest.mark.slow
@pytest.mark.parametrize("size", [(100, 30), (200, 60)], ids=["100x30", "200x60"])
@pytest.mark.parametrize("name", list(SCREENS))
def test_screen_sizes(snap_compare, app, monkeypatch, name: str,  # type: ignore[no-untyped-def]
                      size: tuple[int, int]) -> None:
    monkeypatch.chdir(FIXTURES)  # the launch screen's config path is relative

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await SCREENS[name](app, pilot)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=size)
