"""The Lift and Noise views of a store whose timings a faulty grader broke (0, negative, NaN,
inf and NULL runtimes in finals and in repeated finals): no traceback, the rows left out
counted by reason in the banner above both tabs."""

from __future__ import annotations

from pathlib import Path

import tui_seed as seed
from conftest import plain, wait_until
from textual.widgets import DataTable, Static, TabbedContent

from screens.lift import LiftScreen


async def test_lift_and_noise_views_count_what_they_leave_out(
    make_app, seeded_db: Path
) -> None:
    left_out = seed.add_bad_timings(seeded_db)
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, LiftScreen) and app.screen.report is not None,
            timeout=30,
        )
        screen = app.screen
        banner = plain(screen.query_one("#lift-banner", Static).render())
        assert f"ungraded (grader's fault, not failures): {left_out['attempts']}" in banner
        assert f"timing.invalid {left_out['attempts']}" in banner
        assert f"repeats without a valid runtime: {left_out['repeats']}" in banner
        assert screen.query_one("#lift-table", DataTable).row_count > 0
        await pilot.press("n")
        assert screen.query_one(TabbedContent).active == "noise-tab"
        await wait_until(pilot, lambda: screen.query_one("#band-table", DataTable).row_count > 0)
        no_result = screen.report["no_result"]
        assert no_result["ungraded_by_reason"] == {"timing.invalid": left_out["attempts"]}
        assert no_result["repeats_by_reason"] == {"timing.invalid": left_out["repeats"]}
