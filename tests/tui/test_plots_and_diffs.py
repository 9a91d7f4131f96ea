"""Plots (an attempt's speedup and % of speed of light per submission; ρ̄ and its 95% CI per
lift row) and side-by-side diffs (two submissions of an attempt; a transfer's source attempt
against its treatment), with placeholders when there is nothing to draw or compare, and
agent text through the sanitizer."""

from __future__ import annotations

from pathlib import Path

import plots_seed
import pytest
import tui_seed as seed
from conftest import plain, wait_until
from test_hostile_text import LITERAL, poison, screen_text
from test_transfer_screen import first_comparison, open_transfer
from textual.widgets import Select, Static, TabbedContent

from screens.attempt_detail import AttemptDetailScreen
from screens.diffs import DiffPanel, skill_at
from screens.help import HelpScreen
from screens.lift import LiftScreen
from screens.plots import (
    PlotPanel,
    forest_caption,
    forest_rows,
    nice_ticks,
    sol_series,
    speedup_series,
)
from storage import queries, writes
from storage.db import open_db
from storage.store import Store


def sub(n: int, speedup: float | None, impl: float | None = None, sol: float | None = None,
        purpose: str = "submission", try_number: int = 1,
        at: str = "2026-01-01T10:00:00.000+00:00") -> queries.SubmissionRow:
    feedback = f'{{"impl_median_ms": {impl or "null"}, "sol_ms": {sol or "null"}}}'
    return queries.SubmissionRow(
        id=n, attempt_id=1, try_number=try_number, purpose=purpose, n=n, source=f"# {n}\n",
        source_hash="", state="done", verdict="pass" if speedup else "fail", reason=None,
        speedup=speedup, impl_median_ms=impl, eager_median_ms=None, feedback_json=feedback,
        submitted_at=at, graded_at=at)


def skill_row(skill_id: int, at: str) -> queries.SkillRow:
    return queries.SkillRow(id=skill_id, attempt_id=1, kind="collected", text=f"v{skill_id}",
                            text_hash="", author="", parent_skill_id=None, created_at=at)


def test_series_skip_what_is_missing() -> None:
    subs = [sub(1, 2.0, 0.5, 0.1), sub(2, None, None, 0.1), sub(3, float("inf"), 0.2),
            sub(1, 4.0, 0.25, 0.1, purpose="final", try_number=2)]
    speed = speedup_series(subs)
    assert speed.xs == (1, 4) and speed.ys == (2.0, 4.0) and speed.missing == 2
    assert speed.labels == ("#1", "#2", "#3", "2:F1")
    sol = sol_series(subs)  # only passing submissions with sol_ms and a runtime
    assert sol.xs == (1, 4) and sol.ys == pytest.approx((20.0, 40.0))
    assert speedup_series([]).total == 0 and not sol_series([sub(1, 2.0, 0.5)]).xs
    assert nice_ticks(3.7) == [0, 1, 2, 3] and nice_ticks(0.5)[:3] == [0, 0.1, 0.2]


def test_skill_at_a_submission_is_the_version_current_then() -> None:
    skills = [skill_row(1, "2026-01-01T10:00:00"), skill_row(2, "2026-01-01T10:05:00")]
    assert skill_at(skills, "2026-01-01T09:59:00") is None
    assert skill_at(skills, "2026-01-01T10:04:59").id == 1  # type: ignore[union-attr]
    assert skill_at(skills, "2026-01-01T10:05:00").id == 2  # type: ignore[union-attr]


def test_forest_rows_keep_intervals_only_from_two_pairs() -> None:
    report = {"lift": [
        {"model": "openai/gpt-4.1", "direction": "cute->tirx", "family": "all", "n": 3,
         "interval": {"gm": 1.2, "low": 0.9, "high": 1.6, "n": 3}},
        {"model": "m", "direction": "tirx->cute", "family": "Attention", "n": 1,
         "interval": {"gm": 0.5, "low": None, "high": None, "n": 1}},
        {"model": "m", "direction": "tirx->cute", "family": "KV Cache", "n": 0,
         "interval": {"gm": None}},
    ]}
    rows = forest_rows(report)
    assert [(r.label, r.gm, r.low, r.high) for r in rows] == [
        ("gpt-4.1 c→t all", 1.2, 0.9, 1.6), ("m t→c Attention", 0.5, None, None)]
    assert forest_caption([], False)[1] == "no resolved comparisons yet: nothing to plot"
    assert forest_caption(rows, True)[1] is None
    assert "PREVIEW" in forest_caption(rows, True)[0].plain


async def open_detail(app, pilot, attempt_id: int) -> AttemptDetailScreen:  # type: ignore[no-untyped-def]
    app.open_attempt(attempt_id)
    await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen)
                     and app.screen.subs is not None)
    screen: AttemptDetailScreen = app.screen
    return screen


def screen_lines(app) -> str:  # type: ignore[no-untyped-def]
    """The screen's text row by row (a highlighted line is many pieces in the SVG), after
    checking the frame for control characters."""
    screen_text(app)
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def shows(pilot, app, *texts: str) -> None:  # type: ignore[no-untyped-def]
    """Every text on screen (and never a control character in a frame)."""
    await wait_until(pilot, lambda: all(t in screen_lines(app) for t in texts))


async def test_detail_plots_speedup_and_sol_per_submission(make_app, seeded_db: Path) -> None:
    first = plots_seed.enrich(seeded_db)
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_detail(app, pilot, first)
        await pilot.press("p")
        assert screen.query_one(TabbedContent).active == "plots"
        speed = screen.query_one("#speedup-plot", PlotPanel)
        await wait_until(pilot, lambda: speed.plot.points)
        # #3 failed: no speedup, so no point at x = 3; the final evaluation is x = 4
        assert [x for x, _ in speed.plot.points] == [1.0, 2.0, 4.0]
        assert [y for _, y in speed.plot.points] == pytest.approx([1 / 0.30, 1 / 0.20, 4.0])
        assert speed.plot.display and speed.placeholder is None
        assert "1 of 4 without a speedup" in plain(speed.query_one(".plot-caption", Static))
        sol = screen.query_one("#sol-plot", PlotPanel)
        assert [y for _, y in sol.plot.points] == pytest.approx(
            [100 * plots_seed.SOL_MS / ms for ms in (0.30, 0.20, plots_seed.FINAL_MS)])
        await shows(pilot, app, "speedup per submission", "% of speed of light", "#1", "F1")
        # the plots fit the tab at 100×30: the x axis (labels under the frame) is in view
        assert speed.plot.region.bottom <= sol.region.y and sol.plot.region.bottom <= 29


@pytest.mark.slow
async def test_plots_say_why_when_there_is_nothing_to_draw(make_app, seeded_db: Path) -> None:
    failed = seed.attempt_id(seeded_db, "model-a", "p28", "cute2tirx_skill")  # no speedup
    single = seed.attempt_id(seeded_db, "model-a", "p28", "solo_tirx")
    db = open_db(seeded_db)
    try:
        with db.atomic():  # one submission left: a single point
            db.execute("DELETE FROM grading_jobs WHERE submission_id IN (SELECT id FROM "
                       "submissions WHERE attempt_id=? AND n=2)", [single])
            db.execute("DELETE FROM submissions WHERE attempt_id=? AND n=2", [single])
        empty = db.execute("SELECT id FROM attempts WHERE plan_key=?",
                           ["model-b|p28|r2|solo_cute"]).fetchone()[0]
    finally:
        db.conn.close()
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_detail(app, pilot, empty)
        await pilot.press("p")
        speed, sol = (screen.query_one(f"#{p}-plot", PlotPanel) for p in ("speedup", "sol"))
        assert speed.placeholder == sol.placeholder == "no submissions yet"
        assert not speed.plot.display and not speed.plot.points
        await shows(pilot, app, "no submissions yet")
        await pilot.press("escape")
        screen = await open_detail(app, pilot, failed)
        await pilot.press("p")
        speed = screen.query_one("#speedup-plot", PlotPanel)
        assert speed.placeholder is not None and speed.placeholder.startswith("no speedups yet")
        await shows(pilot, app, "none passed")
        await pilot.press("escape")
        screen = await open_detail(app, pilot, single)
        await pilot.press("p")
        speed, sol = (screen.query_one(f"#{p}-plot", PlotPanel) for p in ("speedup", "sol"))
        assert len(speed.plot.points) == 1 and speed.plot.display
        assert sol.placeholder is not None and "sol_ms" in sol.placeholder  # CPU preview


async def test_detail_diff_previous_against_latest_and_choices(make_app,
                                                               seeded_db: Path) -> None:
    first = plots_seed.enrich(seeded_db)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_detail(app, pilot, first)
        await pilot.press("d")
        assert screen.query_one(TabbedContent).active == "diff"
        panel = screen.query_one("#submission-diff", DiffPanel)
        await wait_until(pilot, lambda: panel.diff is not None)
        subs = screen.subs or []
        assert screen.diff_pair == (subs[-2].id, subs[-1].id)  # default: previous vs latest
        assert panel.diff is not None and panel.diff.counts == (1, 1)  # one line changed
        assert panel.diff.code_original == plots_seed.SOURCES[2]
        assert panel.diff.code_modified == plots_seed.FINAL
        # the changed line, on both sides; markup-like text shown literally (wrapped here)
        await shows(pilot, app, "#3 → F1 · implementation", "bold]fused[/]",
                    "-     out[row] = (x[row] * scale)", "+     out[row] = x[row] * scale * w")
        await pilot.press("left_square_bracket")  # one pair back: #2 → #3
        await wait_until(pilot, lambda: panel.diff is not None
                         and panel.diff.code_original == plots_seed.SOURCES[1])
        assert screen.diff_pair == (subs[1].id, subs[2].id)
        await pilot.press("i")  # the skill current at each: the first version, then the second
        await wait_until(pilot, lambda: panel.diff is not None
                         and panel.diff.code_modified == plots_seed.SKILL_V2)
        assert "tile size 32" in panel.diff.code_original  # the seed's first version
        await shows(pilot, app, "#2 → #3 · skill", "tile size 64 with 256 threads")
        await pilot.press("right_square_bracket")  # #3 → F1: the same skill version
        await wait_until(pilot, lambda: panel.placeholder == "identical skill: no line changed")
        assert panel.diff is None
        screen.query_one("#diff-from", Select).value = subs[0].id  # pick #1 → F1
        await wait_until(pilot, lambda: panel.diff is not None)
        assert screen.diff_pair == (subs[0].id, subs[-1].id)
        await pilot.press("i")
        await wait_until(pilot, lambda: panel.diff is not None
                         and panel.diff.code_original == plots_seed.SOURCES[0])


async def test_diff_follows_new_submissions_until_one_is_picked(make_app,
                                                                seeded_db: Path) -> None:
    db = open_db(seeded_db)
    try:
        running = db.execute("SELECT id FROM attempts WHERE plan_key=?",
                             ["model-b|p28|r2|solo_cute"]).fetchone()[0]
    finally:
        db.conn.close()
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_detail(app, pilot, running)
        await pilot.press("d")
        panel = screen.query_one("#submission-diff", DiffPanel)
        await wait_until(pilot, lambda: panel.placeholder == "no submissions yet: nothing to "
                                                             "compare")
        store = Store(seeded_db)
        try:
            store.write_sync(writes.add_submission, running, 1, "x = 1\ny = 2\n")
            await wait_until(pilot, lambda: panel.placeholder == "one submission so far: a "
                                                                 "diff needs two")
            store.write_sync(writes.add_submission, running, 2, "x = 1\ny = 3\n")
            await wait_until(pilot, lambda: panel.diff is not None)
            assert panel.diff is not None and panel.diff.counts == (1, 1)
            await shows(pilot, app, "y = 3")
            third = store.write_sync(writes.add_submission, running, 3, "x = 2\ny = 3\n")
            await wait_until(pilot, lambda: screen.diff_pair[1] == third)  # still following
            await wait_until(pilot, lambda: panel.diff is not None
                             and panel.diff.code_modified == "x = 2\ny = 3\n")
            subs = screen.subs or []
            screen.query_one("#diff-from", Select).value = subs[0].id  # picked: #1 → #3
            await wait_until(pilot, lambda: screen.diff_pair == (subs[0].id, third))
            fourth = store.write_sync(writes.add_submission, running, 4, "x = 3\n")
            await wait_until(pilot, lambda: screen.subs is not None and len(screen.subs) == 4)
            assert screen.diff_pair == (subs[0].id, third) != (third, fourth)  # kept
        finally:
            store.close()


async def test_transfer_diffs_the_source_against_the_treatment(make_app,
                                                               seeded_db: Path) -> None:
    comp = first_comparison(seeded_db)
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_transfer(app, pilot, comp.id)
        panel = screen.query_one("#dsl-diff", DiffPanel)
        assert not panel.display and screen.query_one("#skills").display
        assert "v: diff with the treatment" in plain(screen.query_one("#transfer-arms", Static))
        await pilot.press("v")
        await wait_until(pilot, lambda: panel.diff is not None)
        assert panel.display and not screen.query_one("#skills").display
        view = screen.view
        assert view is not None and view.source_skill and view.treatment_skill
        assert panel.diff is not None
        assert panel.diff.code_original == view.source_skill.text
        assert panel.diff.code_modified == view.treatment_skill.text
        assert panel.diff.counts == (2, 2)  # the title line and the tile size changed
        await shows(pilot, app, "- tile size 64", "skill: source #")
        await pilot.press("i")  # the implementations: one DSL against the other
        await wait_until(pilot, lambda: panel.diff is not None
                         and panel.diff.code_original.startswith("# solo_"))
        assert panel.diff is not None and panel.diff.code_modified.startswith("# " + {
            "cute->tirx": "cute2tirx", "tirx->cute": "tirx2cute"}[comp.direction])
        await shows(pilot, app, "implementation: source #")
        await pilot.press("v")  # back to the three skills
        assert screen.query_one("#skills").display and not panel.display


async def test_lift_plot_has_a_point_and_interval_per_row(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, LiftScreen)
                         and app.screen.report is not None, timeout=30)
        screen = app.screen
        await pilot.press("p")
        assert screen.query_one(TabbedContent).active == "plot-tab"
        panel = screen.query_one("#forest-plot", PlotPanel)
        rows = screen.report["lift"]
        assert len(panel.plot.points) == len(rows) == 12
        assert [gm for gm, _ in panel.plot.points] == [r["interval"]["gm"] for r in rows]
        await shows(pilot, app, "model-a c→t all", "model-b t→c MLP & Norm", "1/4", "PREVIEW")
        assert panel.plot.region.bottom <= 30 - 4  # above the note and the footer


async def test_help_lists_the_plot_and_diff_keys(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await open_detail(app, pilot, 1)
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = plain(app.screen.query_one("#help-text", Static))
        for keys, what in (("p", "Plots"), ("d", "Diff"), ("i", "Diff implementation / skill"),
                           ("[", "Diff the earlier pair"), ("]", "Diff the later pair")):
            assert any(line.split()[:1] == [keys] and what in line
                       for line in text.splitlines()), (keys, what)
        await pilot.press("escape", "escape")
        app.open_comparison(1)
        await wait_until(pilot, lambda: app.screen.__class__.__name__ == "TransferScreen")
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = plain(app.screen.query_one("#help-text", Static))
        assert "Source vs treatment diff" in text and "Diff skill / implementation" in text


async def test_diffs_show_agent_text_plain_and_sanitized(make_app, seeded_db: Path) -> None:
    first, comparison_id = poison(seeded_db)
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_detail(app, pilot, first)
        await pilot.press("d")  # #2 → #3, the hostile implementation
        await shows(pilot, app, f"# impl  {LITERAL}")
        await pilot.press("escape")
        app.open_comparison(comparison_id)
        await wait_until(pilot, lambda: app.screen is not screen
                         and getattr(app.screen, "view", None) is not None)
        await pilot.press("v")  # the source's (hostile) skill against the treatment's
        await shows(pilot, app, LITERAL, "skill: source #")
        await pilot.press("i")
        await shows(pilot, app, f"# impl  {LITERAL}", "implementation: source #")


def test_implementation_prefers_the_final_source(seeded_db: Path) -> None:
    first = seed.attempt_id(seeded_db, "model-a", "p28", "solo_cute")
    db = open_db(seeded_db)
    try:
        assert queries.implementation(db, first) == "# solo_cute 2\n"  # the latest submission
        writes.add_submission(db, first, 1, "# final evaluation\n", purpose="final")
        assert queries.implementation(db, first) == "# final evaluation\n"
        writes.update_attempt(db, first, final_source="# collected at the end\n")
        assert queries.implementation(db, first) == "# collected at the end\n"
        assert queries.implementation(db, 10_000) is None
        writes.add_skill(db, "v2", attempt_id=first)
        assert [s.text for s in queries.skills_of(db, first)][-1] == "v2"
        assert len(queries.skills_of(db, first)) == 2
    finally:
        db.conn.close()
