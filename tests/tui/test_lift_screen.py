"""Lift tables: PREVIEW label, lift/solo/tier rows from the analysis, drill-down."""

from __future__ import annotations

from conftest import plain, wait_until
from textual.widgets import DataTable, Static

from screens.lift import ComparisonListScreen, LiftScreen
from screens.transfer import TransferScreen


async def test_lift_tables_and_drill_down(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and app.screen.report is not None, timeout=30)
        screen = app.screen
        assert "PREVIEW" in plain(screen.query_one("#lift-banner", Static))
        lift = screen.query_one("#lift-table", DataTable)
        report = screen.report
        assert lift.row_count == len(report["lift"]) > 0
        first = report["lift"][0]
        cells = [c.plain for c in lift.get_row_at(0)]
        assert cells[:4] == [first["model"], first["direction"], first["family"],
                             str(first["n"])]
        assert screen.query_one("#solo-table", DataTable).row_count == len(report["solo"]) == 4
        grid = screen.query_one("#tier-grid-table", DataTable)
        assert grid.row_count == len(report["tiers"]["by_solo_and_source_tier"]) == 9
        assert lift.has_focus  # keyboard first: enter drills down without a tab press
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparisonListScreen)
                         and app.screen.query_one(DataTable).row_count == first["n"])
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen))
        await pilot.press("escape", "escape")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen))
