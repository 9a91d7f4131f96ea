"""Attempts screen: paged in SQL, filter and sort, live cell updates, drill-down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import tui_seed as seed
from conftest import wait_until
from textual.widgets import DataTable

from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import PAGE_SIZE, AttemptsScreen, load_page
from storage import writes
from storage.store import Store


@pytest.mark.slow
async def test_pages_filters_sorts_and_opens(make_app, tmp_path: Path) -> None:
    path = seed.build(tmp_path / "big.sqlite", extra_attempts=250)
    app = make_app(db_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, AttemptsScreen)
        await wait_until(pilot, lambda: screen.total == 267)
        table = screen.query_one(DataTable)
        assert table.row_count == PAGE_SIZE  # one page, never every row
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: screen.page_offset == PAGE_SIZE and table.row_count
                         and screen.rows[0].id == PAGE_SIZE + 1)  # the next page is shown
        await pilot.press("slash")
        await pilot.press(*"state:running")
        await wait_until(pilot, lambda: screen.total == 1)
        assert screen.page_offset == 0 and table.row_count == 1
        assert screen.rows[0].plan_key == "model-b|p28|r2|solo_cute"
        assert table.get_row_at(0)[6].plain == "10:00 / 40:00"  # pinned clock
        await pilot.press("escape")
        screen.set_filter("")
        await wait_until(pilot, lambda: screen.total == 267)
        await pilot.press("s", "s", "s", "s")  # id → model → problem → state → best
        await wait_until(pilot, lambda: screen.rows and screen.rows[0].best_speedup is not None
                         and screen.sort == "best_speedup")
        best = [r.best_speedup for r in screen.rows if r.best_speedup is not None]
        assert best == sorted(best, reverse=True)
        first = screen.rows[0].id
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen))
        assert app.screen.attempt_id == first


async def test_live_update_patches_the_visible_row(make_app, seeded_db: Path) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        running = next(r for r in screen.rows if r.state == "running")
        loads = screen.loads
        other = Store(seeded_db)  # another writer, as the engine would be
        try:
            other.write_sync(writes.update_attempt, running.id, "attempt_finished",
                             state="finished", outcome="preview", submissions_used=4,
                             ended_at="2026-01-01T11:55:00+00:00")
        finally:
            other.close()
        await wait_until(pilot, lambda: screen.loads > loads and any(
            r.id == running.id and r.state == "finished" for r in screen.rows))
        table = screen.query_one(DataTable)
        row = table.get_row(str(running.id))
        assert row[5].plain == "finished:preview"
        assert row[7].plain == "4"
        assert row[6].plain == "5:00 / 40:00"


async def test_a_hidden_screen_reloads_once_when_shown_again(make_app, seeded_db: Path) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        await pilot.press("2")  # the lift tables cover the attempts screen
        await wait_until(pilot, lambda: app.screen is not screen)
        loads = screen.loads
        other = Store(seeded_db)
        try:
            for i in range(3):
                other.write_sync(writes.ensure_attempt, "tui-test", f"hidden|{i}", model="m",
                                 problem_id="p28", dsl="cute", arm="solo_cute", replicate=i + 1)
        finally:
            other.close()
        await wait_until(pilot, lambda: screen._dirty)
        await pilot.pause(0.3)
        assert screen.loads == loads  # no queries while hidden
        await pilot.press("1")
        await wait_until(pilot, lambda: screen.total == 20)
        assert screen.loads == loads + 1 and not screen._dirty


async def test_a_column_grows_when_a_patched_cell_is_wider(make_app, tmp_path: Path) -> None:
    from storage.db import open_db

    path = tmp_path / "narrow.sqlite"
    db = open_db(path)
    with db.atomic():
        writes.create_experiment(db, seed.EXPERIMENT, "narrow", config_toml=seed.CONFIG,
                                 preview=True, grading_backend="simulated")
        aid = writes.ensure_attempt(db, seed.EXPERIMENT, "m|p28|r1|solo_cute", model="m",
                                    problem_id="p28", dsl="cute", arm="solo_cute", replicate=1)
        writes.update_attempt(db, aid, "attempt_started", state="running",
                              started_at="2026-01-01T11:50:00+00:00")
    db.close()
    app = make_app(db_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 1)
        table = screen.query_one(DataTable)

        def state_width() -> int:  # the table is rebuilt when its layout changes
            column = table.columns[next(k for k in table.columns if k.value == "state")]
            return column.get_render_width(table) - 2 * table.cell_padding

        assert state_width() < len("finished:preview")  # sized for "running"
        other = Store(path)
        try:
            other.write_sync(writes.update_attempt, aid, "attempt_finished", state="finished",
                             outcome="preview", ended_at="2026-01-01T11:55:00+00:00")
        finally:
            other.close()
        await wait_until(pilot, lambda: screen.rows and screen.rows[0].state == "finished")
        # widths are re-measured when the table next goes idle
        await wait_until(pilot, lambda: state_width() >= len("finished:preview"))


async def test_status_line_shows_the_engine_grading_slots(make_app) -> None:
    from types import SimpleNamespace

    from engine.grading.backends.gate import GradingGate

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        status = screen.query_one("#attempt-status")
        assert "grading" not in str(status.content)  # no engine owned by this App
        gate = GradingGate(2)
        gate.in_flight = 2
        app.engine = SimpleNamespace(gate=gate)
        app.engine_state = "running"
        screen.tick_elapsed()
        assert "grading 2/2 busy, 0 waiting" in str(status.content)
        app.engine_state = "idle"


async def test_filters_take_quoted_values_problem_forms_and_model_parts(
    make_app, seeded_db: Path
) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        for text, total in (
            ('family:"MLP & Norm"', 9),  # a quoted value with spaces
            ("family:'mlp & norm' state:finished", 8),
            ("family:attention", 8),
            ("problem:28", 9),  # a number
            ("problem:p28", 9),
            ("problem:fused_add_rmsnorm_h4096_llama31_8b_bf16", 9),  # the slug
            ("problem:gqa_paged", 8),  # part of a slug
            ("model:model-", 17),  # a prefix
            ("model:B", 9),  # a part, any case
            ('model:b arm:solo_cute problem:"p28"', 2),
            ("problem:nonesuch", 0),
        ):
            loads = screen.loads
            screen.set_filter(text)
            await wait_until(pilot, lambda text=text, loads=loads: screen.filter_text == text
                             and screen.loads > loads)
            await wait_until(pilot, lambda total=total: screen.total == total, timeout=5)


async def test_reads_are_not_cancelled_and_no_page_that_is_no_longer_asked_for_shows(
    make_app, seeded_db: Path
) -> None:
    """A request for another page while one is read (a filter) reads it at once; one for
    the page being read (a change set) reads it once more after that read; no read is
    cancelled, and a result for an old filter is never shown."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        gates: list[asyncio.Event] = []
        calls, returned, shown = [], [], []
        real_read, real_show = app.read, screen.show

        async def gated_read(fn, *args, **kwargs):  # a page read waits for the next gate
            if fn is not load_page:
                return await real_read(fn, *args, **kwargs)
            calls.append(args)
            if gates:
                await gates.pop(0).wait()
            result = await real_read(fn, *args, **kwargs)
            returned.append(args)
            return result

        def recording_show(rows, total):
            shown.append((screen.filter_text, total))
            real_show(rows, total)

        app.read, screen.show = gated_read, recording_show
        first = asyncio.Event()
        gates.append(first)
        screen.load()
        await wait_until(pilot, lambda: calls)  # the unfiltered page is being read
        screen.filter_text = "state:running"
        screen.load()
        await wait_until(pilot, lambda: screen.total == 1)  # read while the first waits
        first.set()
        await wait_until(pilot, lambda: len(returned) == 2)
        await pilot.pause(0.2)
        assert shown == [("state:running", 1)]  # the unfiltered result was dropped

        second = asyncio.Event()
        gates.append(second)
        screen.load()
        await wait_until(pilot, lambda: len(calls) == 3)
        screen.load()  # change sets while the page is read
        screen.load()
        await pilot.pause(0.2)
        assert len(calls) == 3  # they wait for the read in flight
        second.set()
        await wait_until(pilot, lambda: len(returned) == 4)
        await pilot.pause(0.2)
        assert len(calls) == 4  # and then read the page once more
        assert shown[1:] == [("state:running", 1)] * 2
