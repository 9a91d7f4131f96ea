"""Narrow terminals (columns give way by priority, keys and buttons in view), the final
speedup beside the best, and the honest Lift view (ρ̄ with its interval and pairs, PREVIEW)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tui_seed as seed
from conftest import plain, wait_until
from rich.text import Text
from textual.widgets import DataTable, Static

from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import AttemptsScreen
from screens.fit import Column, fit, project
from screens.launch import LaunchScreen
from screens.lift import ComparisonListScreen, LiftScreen
from storage import writes
from storage.db import open_db

LONG_MODELS = ("anthropic/claude-sonnet-4-20250514", "openai/gpt-4.1-mini-2025-04-14")


def long_names_db(path: Path) -> Path:
    """Attempts with long model names, an edited-skill variant and an UNSAFE attempt."""
    db = open_db(path)
    with db.atomic():
        writes.create_experiment(
            db,
            seed.EXPERIMENT,
            "long",
            config_toml=seed.CONFIG,
            preview=True,
            grading_backend="simulated",
        )
        for i, model in enumerate(LONG_MODELS * 3):
            aid = writes.ensure_attempt(
                db,
                seed.EXPERIMENT,
                f"{model}|{i}",
                model=model,
                problem_id="p28",
                family="MLP & Norm",
                dsl="tirx",
                arm="cute2tirx_skill",
                replicate=i + 1,
                variant="edited:1a2b3c4d" if i % 2 else "",
                unsafe_no_jail=i == 0,
            )
            writes.update_attempt(
                db,
                aid,
                state="finished",
                outcome="preview",
                speedup=1.25,
                best_speedup=2.5,
                submissions_used=3,
                started_at="2026-01-01T11:00:00+00:00",
                ended_at="2026-01-01T11:30:00+00:00",
            )
    db.conn.close()
    return path


def shown_keys(table: DataTable[Text]) -> list[str]:
    return [str(key.value) for key in table.columns]


async def assert_in_view(app, pilot, width: int, height: int) -> None:  # type: ignore[no-untyped-def]
    """Every footer key and button is whole and inside the terminal."""
    await wait_until(pilot, lambda: app.screen.query("FooterKey"))  # the footer recomposes
    await pilot.pause(0.1)
    widgets = [*app.screen.query("FooterKey"), *app.screen.query("Button")]
    for widget in widgets:
        region = widget.region
        assert region.width and region.right <= width and region.bottom <= height, widget


def assert_no_horizontal_scroll(table: DataTable[Text]) -> None:
    assert table.virtual_size.width <= table.scrollable_content_region.width


def test_fit_abbreviates_then_shrinks_then_drops_by_priority() -> None:
    columns = [
        Column("name", "name", min_width=4),
        Column("note", "a long header", short="n", drop=1),
        Column("x", "x"),
    ]
    rows = [[Text("abcdefghij"), Text("1"), Text("9.99x")]]
    assert fit(columns, rows, 100).shown == (0, 1, 2)  # everything fits
    layout = fit(columns, rows, 16)  # short header, then the name cut with an ellipsis
    assert layout.headers == ("name", "n", "x") and layout.compact
    assert [c.plain for c in project(layout, rows[0])] == ["abc…", "1", "9.99x"]
    assert sum(layout.widths) + 2 * len(layout.widths) <= 16
    layout = fit(columns, rows, 13)  # the droppable column goes before the kept ones
    assert layout.shown == (0, 2) and [c.plain for c in project(layout, rows[0])][1] == "9.99x"


# serial: assert_in_view gives the recomposed footer 0.1 s to lay out; beside busy xdist
# workers it sometimes has not (FooterKey region 0×0)
@pytest.mark.serial
async def test_attempts_at_100x30_keep_the_columns_that_matter(make_app, tmp_path: Path) -> None:
    app = make_app(db_path=long_names_db(tmp_path / "long.sqlite"))
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 6 and screen.table_layout is not None)
        table = screen.query_one(DataTable)
        keys = shown_keys(table)
        for key in ("model", "problem_id", "arm", "state", "speedup", "best_speedup"):
            assert key in keys
        assert "dsl" not in keys and "id" not in keys  # hidden before any name is cut
        assert_no_horizontal_scroll(table)
        row = {k: c.plain for k, c in zip(keys, table.get_row_at(0), strict=True)}
        assert row["speedup"] == "1.25x" and row["best_speedup"] == "2.50x"
        assert row["state"] == "done:preview UNSAFE"  # compact, never cut
        assert row["model"].startswith("claude-sonnet")  # the provider prefix goes first
        assert row["arm"] == "cute→tirx"
        second = [c.plain for c in table.get_row_at(1)]
        assert second[keys.index("arm")] == "cute→tirx ed:1a2b"  # the variant stays visible
        await assert_in_view(app, pilot, 100, 30)


async def test_attempts_at_200x60_show_everything_in_full(make_app, tmp_path: Path) -> None:
    app = make_app(db_path=long_names_db(tmp_path / "long.sqlite"))
    async with app.run_test(size=(200, 60)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 6 and screen.table_layout is not None)
        table = screen.query_one(DataTable)
        assert shown_keys(table) == [
            "id",
            "model",
            "problem_id",
            "dsl",
            "arm",
            "state",
            "elapsed",
            "submissions_used",
            "speedup",
            "best_speedup",
        ]
        assert [str(c.label) for c in table.columns.values()][6] == "elapsed / budget"
        row = [c.plain for c in table.get_row_at(0)]
        assert row[1] == LONG_MODELS[0] and row[5] == "finished:preview UNSAFE"
        assert row[4] == "cute2tirx_skill"
        assert [c.plain for c in table.get_row_at(1)][4] == "cute2tirx_skill edited:1a2b3c4d"


async def test_launch_buttons_and_keys_are_in_view_at_100x30(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await wait_until(
            pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.query("#stop")
        )
        await pilot.pause(0.2)
        await assert_in_view(app, pilot, 100, 30)
        labels = {str(b.label) for b in app.screen.query("Button")}
        assert {"Load", "Dry run", "Start", "Pause", "Stop"} <= labels


async def test_final_speedup_beside_the_best(make_app, seeded_db: Path) -> None:
    db = open_db(seeded_db)
    with db.atomic():  # a final evaluation slower than the best submission
        writes.update_attempt(db, 1, speedup=1.5, best_speedup=3.0)
    db.conn.close()
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: isinstance(screen, AttemptsScreen) and screen.total == 17)
        table = screen.query_one(DataTable)
        assert table.get_cell("1", "speedup").plain == "1.50x"
        assert table.get_cell("1", "best_speedup").plain == "3.00x"
        app.open_attempt(1)
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, AttemptDetailScreen) and app.screen.row is not None,
        )
        title = plain(app.screen.query_one("#detail-title", Static))
        assert "final 1.50x" in title and "best 3.00x" in title


async def test_lift_shows_intervals_pairs_and_preview_marks(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, LiftScreen) and app.screen.report is not None,
            timeout=30,
        )
        screen = app.screen
        table = screen.query_one("#lift-table", DataTable)
        assert_no_horizontal_scroll(table)
        keys = shown_keys(table)
        assert keys[3:6] == ["pairs", "rho", "ci"]  # next to ρ̄: its interval and pairs
        rows = screen.report["lift"]
        for i, r in enumerate(rows):
            cells = dict(zip(keys, table.get_row_at(i), strict=True))
            iv = r["interval"]
            assert cells["pairs"].plain == str(iv["n"]) == str(r["n"])
            assert cells["rho"].plain == f"{iv['gm']:.3f}"
            if iv["n"] >= 2:
                assert cells["ci"].plain == f"{iv['low']:.2f}–{iv['high']:.2f}"
            else:
                assert cells["ci"].plain == "-"  # no interval from one pair
            assert iv["preview"] and cells["grading"].plain == "PREVIEW"
            assert "dim" in str(cells["rho"].style)  # preview figures are dimmed
        note = plain(screen.query_one("#lift-note", Static))
        assert "raw runtime" in note and "need not equal" in note
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ComparisonListScreen) and app.screen.pairs
        )
        listing = app.screen
        summary = plain(listing.query_one("#comparisons-summary", Static))
        assert f"over {rows[0]['n']} pairs" in summary and "PREVIEW" in summary
        pairs_table = listing.query_one(DataTable)
        assert_no_horizontal_scroll(pairs_table)
        for pair in listing.pairs:
            key = str(pair.comparison.id)
            for column, attempt in (("base", pair.baseline), ("treat", pair.treatment)):
                speedup = attempt.speedup if attempt else None
                expected = "-" if speedup is None else f"{speedup:.2f}x"
                assert pairs_table.get_cell(key, column).plain == expected
