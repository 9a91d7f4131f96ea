"""Lift tables: PREVIEW label, lift/solo/tier rows from the analysis, drill-down."""

from __future__ import annotations

import pytest
from conftest import plain, wait_until
from textual.widgets import DataTable, Static

from screens.lift import ComparisonListScreen, LiftScreen
from screens.transfer import TransferScreen


@pytest.mark.slow
async def test_lift_tables_and_drill_down(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and app.screen.report is not None, timeout=30)
        screen = app.screen
        banner = plain(screen.query_one("#lift-banner", Static))
        assert "PREVIEW" in banner and "graded on NVIDIA H200 (Hopper, sm_90a)" in banner
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


NEW_EXPERIMENT = """\
[experiment]
name = "fresh"
id = "fresh"
problems = ["p28"]
agent = "simulated"
grading = "simulated"
max_submissions = 1

[[models]]
name = "gamma"
"""


@pytest.mark.slow
async def test_a_new_experiment_replaces_drilled_in_screens(make_app) -> None:
    from engine.config import parse_config
    from screens.attempt_detail import AttemptDetailScreen
    from screens.attempts import AttemptsScreen
    from screens.launch import LaunchScreen

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.screen.total == 17)
        app.open_attempt(1)  # drilled in on the Attempts mode ...
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen))
        await pilot.press("2")  # ... and on the Lift mode
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and app.screen.report is not None, timeout=30)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparisonListScreen))
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        app.start_experiment(parse_config(NEW_EXPERIMENT, "<test>"))
        await wait_until(pilot, lambda: app.engine_state == "idle", timeout=30)
        app.set_focus(None)
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and "experiment fresh" in plain(
                             app.screen.query_one("#lift-banner", Static)), timeout=30)
        await pilot.press("1")
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen)
                         and app.screen.total == 4)
        assert {r.experiment_id for r in app.screen.rows} == {"fresh"}
