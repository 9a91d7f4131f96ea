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


def test_an_ungraded_attempt_has_its_own_colour_in_the_attempts_list(seeded_db: Path) -> None:
    """``finished:ungraded`` in orange, apart from a failure's red and a pass's green."""
    from screens.render import STATE_STYLES, UNGRADED_STYLE, attempt_cells, outcome_text
    from storage import queries
    from storage.db import open_db

    db = open_db(seeded_db)
    try:
        db.execute(
            "UPDATE attempts SET outcome='ungraded', reason='infra.oom' WHERE id=("
            "SELECT min(id) FROM attempts WHERE state='finished')"
        )
        row = next(r for r in queries.attempts_for_experiment(db, seed.EXPERIMENT)
                   if r.outcome == "ungraded")
    finally:
        db.conn.close()
    state = attempt_cells(row, seed.CLOCK)[5]
    assert state.plain == "finished:ungraded" and state.style == UNGRADED_STYLE
    assert UNGRADED_STYLE not in (STATE_STYLES["finished"], STATE_STYLES["failed"])
    detail = outcome_text(row)
    assert any(span.style == UNGRADED_STYLE for span in detail.spans)
    assert "reason: infra.oom" in detail.plain
