"""Actions on an attempt from the TUI: the dialog, the command row it writes, the answer, the
detail's record of it, and the browser view's token."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import plain, wait_until
from textual.widgets import Input, Static

from app.control import BAD_TOKEN, BROWSER_READ_ONLY, TOKEN_ENV
from screens.attempt_actions import ActionDialog
from screens.attempt_detail import AttemptDetailScreen
from screens.attempts import AttemptsScreen
from storage import controls
from storage.db import open_db


def _commands(db_path: Path) -> list[controls.Command]:
    db = open_db(db_path, readonly=True)
    try:
        return controls.for_experiment(db, "tui-test")
    finally:
        db.conn.close()


async def _act(pilot, app, key: str, reason: str = "", token: str | None = None) -> None:
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(app.screen, ActionDialog))
    app.screen.query_one("#action-reason", Input).value = reason
    if token is not None:
        app.screen.query_one("#action-token", Input).value = token
    app.screen.query_one("#action-reason", Input).focus()
    await pilot.press("enter")


async def test_attached_tui_excludes_and_is_told_no_engine_holds_the_run(
    make_app, seeded_db: Path
) -> None:
    app = make_app(attach=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, AttemptsScreen)
        await wait_until(pilot, lambda: screen.total == 17)
        first = screen.rows[0].id
        await _act(pilot, app, "minus")  # no reason: the dialog stays open
        await pilot.pause(0.1)
        assert isinstance(app.screen, ActionDialog) and _commands(seeded_db) == []
        app.screen.query_one("#action-reason", Input).value = "found a hole"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(_commands(seeded_db)) == 1)
        exclude = _commands(seeded_db)[0]
        assert (exclude.action, exclude.attempt_id, exclude.state) == ("exclude", first,
                                                                       "applied")
        await _act(pilot, app, "X", "loops")
        await wait_until(pilot, lambda: len(_commands(seeded_db)) == 2)
        stop = _commands(seeded_db)[1]
        assert (stop.action, stop.state, stop.outcome) == ("stop", "refused",
                                                           controls.NO_ENGINE)
        app.open_attempt(first)
        await wait_until(pilot, lambda: isinstance(app.screen, AttemptDetailScreen))
        await pilot.press("o")
        await wait_until(pilot, lambda: app.screen.query("#outcome-text"))
        outcome = app.screen.query_one("#outcome-text", Static)
        await wait_until(pilot, lambda: "found a hole" in plain(outcome))
        shown = plain(outcome)
        assert "exclude found a hole · applied" in shown and "stop loops · refused" in shown


@pytest.mark.parametrize("with_token", [False, True])
async def test_browser_view_acts_only_with_its_token(
    make_app, seeded_db: Path, monkeypatch: pytest.MonkeyPatch, with_token: bool
) -> None:
    if with_token:
        monkeypatch.setenv(TOKEN_ENV, hashlib.sha256(b"s3cret").hexdigest())
    else:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
    app = make_app(attach=True, browser=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        token = "wrong" if with_token else None
        await _act(pilot, app, "minus", "hole", token)
        await wait_until(pilot, lambda: len(_commands(seeded_db)) == 1)
        refused = _commands(seeded_db)[0]
        assert refused.state == "refused" and refused.actor.startswith("browser session")
        assert refused.outcome == (BAD_TOKEN if with_token else BROWSER_READ_ONLY)
        if not with_token:
            return
        await _act(pilot, app, "minus", "hole", "s3cret")
        await wait_until(pilot, lambda: len(_commands(seeded_db)) == 2)
        assert _commands(seeded_db)[1].state == "applied"
        await pilot.press("N")  # unlocked: no token asked again in this tab
        await wait_until(pilot, lambda: isinstance(app.screen, ActionDialog))
        assert not app.screen.query("#action-token")


async def test_a_lists_the_actions_and_opens_the_one_picked(make_app) -> None:
    from screens.attempt_actions import ActionMenu

    app = make_app(attach=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.total == 17)
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ActionMenu))
        await pilot.press("down", "enter")  # the second action: retry
        await wait_until(pilot, lambda: isinstance(app.screen, ActionDialog))
        assert (app.screen.action, app.screen.attempt_id) == ("retry", screen.rows[0].id)


async def test_lift_banner_counts_exclusions_and_i_leaves_out_intervened(
    make_app, seeded_db: Path
) -> None:
    from storage.db import immediate

    db = open_db(seeded_db)
    comps = db.execute(
        "SELECT baseline_attempt_id, treatment_attempt_id FROM comparisons WHERE "
        "experiment_id = 'tui-test' AND resolved = 1 ORDER BY id").fetchall()
    with immediate(db):
        controls.submit(db, "tui-test", "exclude", actor="t", attempt_id=comps[0][0],
                        reason="a hole")
        db.execute(  # an engine's applied extend on another comparison's treatment
            "INSERT INTO control_commands (experiment_id, attempt_id, action, actor, state, "
            "created_at) VALUES ('tui-test', ?, 'extend', 't', 'applied', 'x')",
            [comps[-1][1]])
    db.conn.close()
    app = make_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        banner = lambda: plain(app.screen.query_one("#lift-banner", Static))  # noqa: E731
        await wait_until(pilot, lambda: "resolved comparisons" in banner(), timeout=20)
        assert "1 excluded (a hole)" in banner() and "intervened" in banner()
        before = app.screen.report["coverage"]["comparisons"]
        await pilot.press("i")
        await wait_until(pilot, lambda: "WITHOUT intervened" in banner(), timeout=20)
        assert app.screen.report["coverage"]["comparisons"] < before


async def test_r_says_what_a_retry_does_to_the_selected_attempt(make_app, seeded_db: Path) -> None:
    db = open_db(seeded_db)
    with db.conn:
        oom, other = [r[0] for r in db.execute(
            "SELECT id FROM attempts WHERE experiment_id = 'tui-test' AND state = 'finished' "
            "ORDER BY id LIMIT 2")]
        db.execute("UPDATE attempts SET outcome = 'ungraded', reason = 'infra.oom' WHERE id = ?",
                   [oom])
    db.conn.close()
    app = make_app(attach=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, AttemptsScreen)
        await wait_until(pilot, lambda: screen.total == 17)
        for attempt_id, says in ((oom, "Re-grade its stored final (its grader failed: "
                                  "infra.oom); the agent does not run again"),
                                 (other, "Run a new try of the same slot")):
            screen.table.move_cursor(row=[r.id for r in screen.rows].index(attempt_id))
            await pilot.press("R")
            await wait_until(pilot, lambda: isinstance(app.screen, ActionDialog))
            what = plain(app.screen.query_one("#action-what", Static))
            assert says in what
            assert ("cannot be undone" in what) == (attempt_id == other)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen)
