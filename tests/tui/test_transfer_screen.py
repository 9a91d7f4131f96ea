"""Transfer inspector: skills side by side, ρ and verdict, human labels, edited skills and a
treatment launched with one through the App-owned engine."""

from __future__ import annotations

from pathlib import Path

from conftest import plain, wait_until
from textual.widgets import DataTable, Input, Static, TextArea

from screens.dialogs import LabelDialog, SkillEditor
from screens.transfer import TransferScreen
from storage import queries
from storage.db import open_db


def first_comparison(path: Path) -> queries.ComparisonRow:
    db = open_db(path)
    try:
        return queries.comparisons(db, "tui-test")[0]
    finally:
        db.conn.close()


async def open_transfer(app, pilot, comparison_id: int) -> TransferScreen:  # type: ignore[no-untyped-def]
    app.open_comparison(comparison_id)
    await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                     and app.screen.view is not None)
    return app.screen


async def test_inspector_shows_and_labels(make_app, seeded_db: Path) -> None:
    comp = first_comparison(seeded_db)
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await open_transfer(app, pilot, comp.id)
        title = plain(screen.query_one("#transfer-title", Static))
        assert f"comparison {comp.id}" in title and comp.direction in title
        assert f"ρ = {comp.rho:.3f}" in title and comp.verdict in title
        arms = plain(screen.query_one("#transfer-arms", Static))
        assert "source:" in arms and "baseline (target solo):" in arms and "treatment:" in arms
        source = plain(screen.query_one("#source-skill", Static))
        assert "keep [/] literal" in source and "solo_cute" in source
        treatment = screen.query_one("#treatment-skill", Static).content
        # lines that differ from the source skill are highlighted, equal ones are not
        assert any(s.style == "green" for s in treatment.spans)
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, LabelDialog))
        app.screen.query_one("#label-evidence", Input).value = "ran out of [budget]"
        await pilot.click("#label-save")
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                         and app.screen.query_one("#labels-table", DataTable).row_count == 1)
    db = open_db(seeded_db)
    try:
        labels = queries.labels(db, task="cause", subject_id=comp.id)
    finally:
        db.conn.close()
    assert [(x.subject_type, x.annotator_kind, x.category, x.evidence) for x in labels] == [
        ("comparison", "human", "cause", "ran out of [budget]")]


async def test_edit_skill_saves_and_launches_treatment(make_app, seeded_db: Path) -> None:
    comp = first_comparison(seeded_db)
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await open_transfer(app, pilot, comp.id)
        source_skill = screen.view.source_skill
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, SkillEditor))
        app.screen.query_one(TextArea).text = "# Edited\n- only tile 64\n"
        await pilot.click("#skill-launch")
        await wait_until(pilot, lambda: app.engine_worker is not None, timeout=20)
        await app.engine_worker.wait()
        assert app.engine_state == "idle"
    db = open_db(seeded_db)
    try:
        edited = [s for s in db.query("SELECT * FROM skills WHERE kind='edited'")]
        variants = [a for a in queries.attempts_for_experiment(db, "tui-test")
                    if a.variant.startswith("edited:")]
    finally:
        db.conn.close()
    mine = [s for s in edited if s["parent_skill_id"] == source_skill.id]
    assert mine and mine[0]["text"] == "# Edited\n- only tile 64\n"
    assert len(variants) == 1
    assert variants[0].problem_id == comp.problem_id and variants[0].model == comp.model
    assert variants[0].state == "finished"
