"""Attach mode tails another process's writes read-only; rubric counts; the palette."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import plain, wait_until
from textual.widgets import DataTable, Static

from app.tui import MkbApp, ReadOnlyError
from screens.attempts import AttemptsScreen
from screens.palette import JumpProvider, palette_entries
from screens.rubric import RubricScreen
from screens.transfer import TransferScreen
from storage import writes
from storage.db import StorageError, open_db
from storage.store import Store


async def test_attach_tails_events_and_refuses_writes(make_app, seeded_db: Path) -> None:
    before = seeded_db.stat().st_mtime_ns
    app = make_app(attach=True)
    assert app.read_only and app.store is None
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, AttemptsScreen)
        await wait_until(pilot, lambda: screen.total == 17)
        assert seeded_db.stat().st_mtime_ns == before  # opening read-only wrote nothing
        writer = Store(seeded_db)  # the engine's process
        try:
            for i in range(30):
                writer.write_sync(writes.ensure_attempt, "tui-test", f"late|{i}", model="late",
                                  problem_id="p28", dsl="cute", arm="solo_cute",
                                  replicate=i + 1)
        finally:
            writer.close()
        await wait_until(pilot, lambda: screen.total == 47)
        assert app.redraws < 30  # 30 events, coalesced into a few redraws
        with pytest.raises(ReadOnlyError):
            await app.add_human_label(task="cause", subject_type="comparison", subject_id=1,
                                      category="cause", value="x")
        app.open_comparison(1)
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                         and app.screen.view is not None)
        await pilot.press("l")
        await pilot.pause(0.1)
        assert isinstance(app.screen, TransferScreen)  # no dialog in a read-only view


def test_attach_refuses_a_missing_database(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        MkbApp(tmp_path / "absent.sqlite", attach=True)
    assert not (tmp_path / "absent.sqlite").exists()


async def test_rubric_counts_labels_live(make_app, seeded_db: Path) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await wait_until(pilot, lambda: isinstance(app.screen, RubricScreen))
        screen = app.screen
        table = screen.query_one("#rubric-skill-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 1)
        assert [c.plain for c in table.get_row_at(0)] == ["measured evidence", "present",
                                                          "llm", "1"]
        await app.add_human_label(task="cause", subject_type="comparison", subject_id=1,
                                  category="cause", value="toolchain friction", evidence="e")
        causes = screen.query_one("#rubric-cause-table", DataTable)
        await wait_until(pilot, lambda: causes.row_count == 1)
        assert causes.get_row_at(0)[1].plain == "toolchain friction"
        assert "2 labels" in plain(screen.query_one("#rubric-summary", Static))


async def test_palette_finds_attempts_problems_and_comparisons(make_app, seeded_db) -> None:
    db = open_db(seeded_db)
    try:
        entries = palette_entries(db, "tui-test")
    finally:
        db.conn.close()
    kinds = {kind for kind, _, _ in entries}
    assert kinds == {"experiment", "problem", "comparison", "attempt"}
    assert sum(kind == "attempt" for kind, _, _ in entries) == 17
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.experiment_id == "tui-test")
        provider = JumpProvider(app.screen)
        await provider.startup()
        hits = [hit async for hit in provider.search("comparison 3")]
        assert hits and hits[0].text.startswith("comparison 3 ")
        hits[0].command()
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen))
        assert app.screen.comparison_id == 3
        hits = [hit async for hit in provider.search("problem p01")]
        hits[0].command()
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen)
                         and app.screen.total == 8)
        assert all(r.problem_id == "p01" for r in app.screen.rows)
