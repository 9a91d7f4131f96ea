"""Transfer inspector: skills side by side, ρ and verdict, human labels, edited skills and a
treatment launched with one through the App-owned engine."""

from __future__ import annotations

from pathlib import Path

from conftest import plain, wait_until
from textual.widgets import DataTable, Input, OptionList, Select, Static, TextArea

from engine.rubric.model import default_rubric
from screens.attempts import AttemptsScreen
from screens.dialogs import LabelDialog, SkillEditor
from screens.rubric_terms import values_for
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
        renders = screen.renders
        await screen.load().wait()  # a reload that finds nothing new leaves the screen alone
        assert screen.renders == renders
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
    assert stored_hashes(seeded_db, "cause") == {default_rubric().hash}


def stored_hashes(path: Path, task: str) -> set[str]:
    db = open_db(path)
    try:
        return {r[0] for r in db.execute("SELECT rubric_hash FROM labels WHERE task=?", [task])}
    finally:
        db.conn.close()


def offered(dialog: LabelDialog, select_id: str) -> list[str]:
    """The choices a Select of the dialog shows in its drop-down."""
    options = dialog.query_one(select_id, Select).query_one("SelectOverlay", OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def test_label_dialog_offers_values_per_category(make_app, seeded_db: Path) -> None:
    comp = first_comparison(seeded_db)
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        await open_transfer(app, pilot, comp.id)
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, LabelDialog))
        dialog = app.screen
        assert offered(dialog, "#label-value") == list(values_for("cause", "cause"))
        dialog.query_one("#label-task", Select).value = "skill"
        await wait_until(pilot, lambda: offered(dialog, "#label-value") == ["present", "absent"])
        assert offered(dialog, "#label-category") == list(default_rubric().category_names)
        dialog.query_one("#label-task", Select).value = "uptake"
        await wait_until(pilot, lambda: offered(dialog, "#label-category")
                         == ["uptake", "propagation"])
        assert offered(dialog, "#label-value") == list(values_for("uptake", "uptake"))
        dialog.query_one("#label-category", Select).value = "propagation"
        await wait_until(pilot, lambda: offered(dialog, "#label-value") == ["yes", "no"])
        dialog.query_one("#label-value", Select).value = "no"
        dialog.query_one("#label-evidence", Input).value = "rewrote the kernel from scratch"
        await pilot.click("#label-save")
        await wait_until(pilot, lambda: isinstance(app.screen, TransferScreen)
                         and app.screen.query_one("#labels-table", DataTable).row_count == 1)
        row = [c.plain for c in app.screen.query_one("#labels-table", DataTable).get_row_at(0)]
        assert row[:4] == ["uptake", f"attempt {comp.treatment_attempt_id}", "propagation", "no"]
    db = open_db(seeded_db)
    try:
        labels = queries.labels(db, task="uptake", subject_id=comp.treatment_attempt_id)
    finally:
        db.conn.close()
    assert [(x.subject_type, x.annotator_kind, x.category, x.value) for x in labels] == [
        ("attempt", "human", "propagation", "no")]
    assert stored_hashes(seeded_db, "uptake") == {default_rubric().hash}


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
        edited_comp = next(c for c in await app.read(queries.comparisons, "tui-test")
                           if c.variant.startswith("edited:"))
        # the inspector of the edited treatment: its variant, and the skill it was given
        # (the edited one) as a diff against the original
        await pilot.press("escape")
        screen = await open_transfer(app, pilot, edited_comp.id)
        assert f"variant {edited_comp.variant}" in plain(screen.query_one("#transfer-title",
                                                                          Static))
        arms = plain(screen.query_one("#transfer-arms", Static))
        assert (f"treatment: #{edited_comp.treatment_attempt_id} {variant_arm(edited_comp)} "
                f"{edited_comp.variant} finished") in arms
        given = plain(screen.query_one("#source-skill", Static))
        assert "+ - only tile 64" in given and "- - measure first" in given
        assert "edited skill" in plain(screen.query_one("#source-skill-title", Static))
        # the Attempts table tells the edited treatment from the verbatim one
        await pilot.press("escape", "1")
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptsScreen))
        attempts = app.screen
        attempts.set_filter(f"arm:{variant_arm(edited_comp)} problem:{comp.problem_id} "
                            f"model:{comp.model}")
        await wait_until(pilot, lambda: attempts.total == 2 and len(attempts.rows) == 2)
        arms = sorted(attempts.table.get_row_at(i)[4].plain for i in range(2))
        assert arms == [variant_arm(edited_comp), f"{variant_arm(edited_comp)} "
                                                  f"{edited_comp.variant}"]
    db = open_db(seeded_db)
    try:
        edited = [s for s in db.query("SELECT * FROM skills WHERE kind='edited'")]
        variants = [a for a in queries.attempts_for_experiment(db, "tui-test")
                    if a.variant.startswith("edited:")]
    finally:
        db.conn.close()
    # one edited skill: the person's, with its lineage, and the treatment ran with it
    assert len(edited) == 1 and edited[0]["parent_skill_id"] == source_skill.id
    assert edited[0]["text"] == "# Edited\n- only tile 64\n"
    assert len(variants) == 1 and variants[0].attached_skill_id == edited[0]["id"]
    assert variants[0].problem_id == comp.problem_id and variants[0].model == comp.model
    assert variants[0].state == "finished"


def variant_arm(comparison: queries.ComparisonRow) -> str:
    return {"cute->tirx": "cute2tirx_skill", "tirx->cute": "tirx2cute_skill"}[
        comparison.direction]
