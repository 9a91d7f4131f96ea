"""Attach mode tails another process's writes read-only; rubric views; the palette."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import plain, wait_until
from textual.widgets import DataTable, Static

from app.tui import MkbApp, ReadOnlyError
from engine.rubric import subjects
from screens.attempts import AttemptsScreen
from screens.palette import JumpProvider, palette_entries
from screens.rubric import RubricScreen
from screens.transfer import TransferScreen
from storage import queries, writes
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


def seed_labels(path: Path) -> dict[str, list[int]]:
    """LLM labels for every task: source skills, treatment uptake and harmed comparisons.

    model-a's comparisons help or are neutral and model-b's harm or are neutral (see tui_seed).
    Helped skills have "measured evidence", harmed ones do not; model-a treatments follow
    their skill fully and propagate it, model-b treatments ignore it; two of model-b's harmed
    comparisons are "toolchain friction" and one had no target-side failure.
    """
    db = open_db(path)
    try:
        comps = queries.comparisons(db, "tui-test")
        helped = [c for c in comps if c.verdict == "help"]
        harmed = [c for c in comps if c.verdict == "harm"]
        with db.atomic():
            for comp in helped + harmed:
                skill_id = subjects.comparison_skill_id(db, comp)
                assert skill_id is not None
                ok = comp.verdict == "help"
                writes.add_label(db, task="skill", subject_type="skill", subject_id=skill_id,
                                 category="measured evidence",
                                 value="present" if ok else "absent", annotator="llm-2",
                                 annotator_kind="llm")
                treatment = comp.treatment_attempt_id
                assert treatment is not None
                writes.add_label(db, task="uptake", subject_type="attempt", subject_id=treatment,
                                 category="uptake",
                                 value="followed fully" if ok else "ignored",
                                 annotator="llm-2", annotator_kind="llm")
                writes.add_label(db, task="uptake", subject_type="attempt", subject_id=treatment,
                                 category="propagation", value="yes" if ok else "no",
                                 annotator="llm-2", annotator_kind="llm")
            for i, comp in enumerate(harmed):
                value = "no target-side failure" if i == len(harmed) - 1 else "toolchain friction"
                writes.add_label(db, task="cause", subject_type="comparison", subject_id=comp.id,
                                 category="cause", value=value, annotator="llm-2",
                                 annotator_kind="llm")
    finally:
        db.conn.close()
    return {"helped": [c.id for c in helped], "harmed": [c.id for c in harmed]}


def rows_of(table: DataTable) -> list[list[str]]:
    return [[cell.plain for cell in table.get_row_at(i)] for i in range(table.row_count)]


def row_for(table: DataTable, *keys: str) -> list[str]:
    found = [r for r in rows_of(table) if r[: len(keys)] == list(keys)]
    assert len(found) == 1, (keys, rows_of(table))
    return found[0]


async def test_rubric_views_from_labels_live(make_app, seeded_db: Path) -> None:
    ids = seed_labels(seeded_db)
    n_helped, n_harmed = len(ids["helped"]), len(ids["harmed"])
    assert n_helped >= 2 and n_harmed >= 3  # the fixture has both outcomes
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await wait_until(pilot, lambda: isinstance(app.screen, RubricScreen)
                         and app.screen.report is not None)
        screen = app.screen
        prevalence = screen.query_one("#rubric-prevalence-table", DataTable)
        # model-a: every helped skill has the category; model-b: no harmed skill has it
        assert row_for(prevalence, "model-a", "measured evidence")[2:6] == [
            "100.0%", str(n_helped), "-", "0"]
        assert row_for(prevalence, "model-b", "measured evidence")[2:6] == [
            "-", "0", "0.0%", str(n_harmed)]
        uptake = screen.query_one("#rubric-uptake-table", DataTable)
        columns = [str(key.value) for key in uptake.columns]  # headers shorten when narrow
        helped_row = dict(zip(columns, row_for(uptake, "model-a", "help"), strict=True))
        assert helped_row["n"] == str(n_helped) and helped_row["followed fully"] == "100.0%"
        assert helped_row["propagation"] == "100.0%" and helped_row["ignored"] == "0.0%"
        harmed_row = dict(zip(columns, row_for(uptake, "model-b", "harm"), strict=True))
        assert harmed_row["ignored"] == "100.0%" and harmed_row["followed"] == "0.0%"
        assert harmed_row["propagation"] == "0.0%" and harmed_row["n prop."] == str(n_harmed)
        causes = screen.query_one("#rubric-causes-table", DataTable)
        friction = row_for(causes, "model-b", "toolchain friction")
        comparisons_b = 4  # two problems × two directions
        assert friction[2:] == [str(n_harmed - 1), f"{100 * (n_harmed - 1) / comparisons_b:.1f}%",
                                str(n_harmed), str(n_harmed), "1"]
        assert [r[0] for r in rows_of(causes)] == ["model-b"]
        lift = screen.query_one("#rubric-lift-table", DataTable)
        assert {(r[0], r[1]) for r in rows_of(lift)} == {
            (m, f) for m in ("model-a", "model-b") for f in ("Attention", "MLP & Norm")}
        assert all(r[4] in ("100.0%", "0.0%") for r in rows_of(lift))
        summary = plain(screen.query_one("#rubric-summary", Static))
        assert "uptake vs ΔGM: Spearman" in summary and "over 4 cells" in summary
        usage = screen.query_one("#rubric-usage-table", DataTable)
        assert row_for(usage, "cause", "llm-2")[3] == str(n_harmed)

        # a human label overrides the LLM's and the views follow
        await app.add_human_label(task="cause", subject_type="comparison",
                                  subject_id=ids["harmed"][0], category="cause",
                                  value="search truncation", evidence="e")
        await wait_until(pilot, lambda: any(r[1] == "search truncation"
                                            for r in rows_of(causes)))
        assert row_for(causes, "model-b", "toolchain friction")[2] == str(n_harmed - 2)
        assert row_for(causes, "model-b", "search truncation")[2] == "1"
        agreement = screen.query_one("#rubric-agreement-table", DataTable)
        pair = row_for(agreement, "cause", "cause")
        assert pair[4:6] == ["1", "0"]  # one shared item, the human disagrees with the LLM


async def test_rubric_without_labels_says_so(make_app, tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    open_db(path).conn.close()
    app = make_app(db_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await wait_until(pilot, lambda: isinstance(app.screen, RubricScreen)
                         and app.screen.report is not None)
        assert "no labels yet" in plain(app.screen.query_one("#rubric-summary", Static))
        assert app.screen.query_one("#rubric-prevalence-table", DataTable).row_count == 0


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
