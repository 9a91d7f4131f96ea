"""SVG snapshots of the plot and diff views at 100×30 and 200×60, as in ``test_snapshots.py``
(fixed database, plus attempt 1's history from ``plots_seed``; pinned clock and theme).

Regenerate deliberately with
``pytest tests/tui/test_snapshots_plots_diffs.py --snapshot-update`` and read the SVGs.
"""

from __future__ import annotations

import plots_seed
import pytest
from conftest import wait_until
from test_snapshots import settled

from screens.attempt_detail import AttemptDetailScreen
from screens.diffs import DiffPanel
from screens.lift import LiftScreen
from screens.plots import PlotPanel
from screens.transfer import TransferScreen


@pytest.fixture
def app(make_app, seeded_db):  # type: ignore[no-untyped-def]
    plots_seed.enrich(seeded_db)
    return make_app(db_path=seeded_db)


async def open_detail(app, pilot, key: str) -> AttemptDetailScreen:  # type: ignore[no-untyped-def]
    app.open_attempt(1)
    await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                     and app.screen.subs is not None and app.screen.step_count == 2)
    await pilot.press(key)
    screen: AttemptDetailScreen = app.screen
    return screen


async def show_detail_plots(app, pilot) -> None:  # type: ignore[no-untyped-def]
    screen = await open_detail(app, pilot, "p")
    await wait_until(pilot, lambda: all(p.plot.points for p in screen.query(PlotPanel)))


async def show_detail_diff(app, pilot) -> None:  # type: ignore[no-untyped-def]
    screen = await open_detail(app, pilot, "d")
    await wait_until(pilot, lambda: screen.query_one(DiffPanel).diff is not None)


async def show_transfer_diff(app, pilot) -> None:  # type: ignore[no-untyped-def]
    app.open_comparison(1)
    await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                     and app.screen.view is not None
                     and app.screen.query_one("#labels-table").row_count == 1)
    await pilot.press("v")
    await wait_until(pilot, lambda: app.screen.query_one(DiffPanel).diff is not None)


async def show_lift_plot(app, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("2")
    await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                     and app.screen.report is not None
                     and app.screen.query_one("#lift-table").row_count, timeout=30)
    await pilot.press("p")
    await wait_until(pilot, lambda: app.screen.query_one(PlotPanel).plot.points)


VIEWS = {"detail-plots": show_detail_plots, "detail-diff": show_detail_diff,
         "transfer-diff": show_transfer_diff, "lift-plot": show_lift_plot}


@pytest.mark.slow
@pytest.mark.parametrize("size", [(100, 30), (200, 60)], ids=["100x30", "200x60"])
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_sizes(snap_compare, app, name: str,  # type: ignore[no-untyped-def]
                    size: tuple[int, int]) -> None:
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await VIEWS[name](app, pilot)

    assert snap_compare(app, run_before=settled(run_before), terminal_size=size)
