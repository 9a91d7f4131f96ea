"""Launch: load a config, narrow it, preview the plan, start, and watch it finish."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import plain, wait_until
from textual.widgets import Input, SelectionList, Static

from screens.launch import LaunchScreen
from storage import queries
from storage.db import open_db

CONFIG = """\
[experiment]
name = "launched"
problems = ["p28", "p01"]
agent = "simulated"
grading = "simulated"
max_submissions = 1

[[models]]
name = "alpha"

[[models]]
name = "beta"
"""


async def test_launch_preview_start(make_app, tmp_path: Path) -> None:
    config = tmp_path / "exp.toml"
    config.write_text(CONFIG)
    db_path = tmp_path / "fresh.sqlite"
    app = make_app(db_path=db_path)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        screen = app.screen
        screen.query_one("#config-path", Input).value = str(config)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: screen.config is not None)
        models = screen.query_one("#launch-models", SelectionList)
        assert set(models.selected) == {"alpha", "beta"}
        models.deselect("beta")
        screen.query_one("#launch-problems", Input).value = "p28"
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: "comparisons" in plain(
            screen.query_one("#plan-preview", Static)), timeout=20)
        preview = plain(screen.query_one("#plan-preview", Static))
        assert preview.startswith("4 attempts, 2 comparisons")
        assert "alpha|p28|r1|solo_cute" in preview and "beta" not in preview
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: app.engine_worker is not None, timeout=20)
        await app.engine_worker.wait()
        await wait_until(pilot, lambda: app.engine_state == "idle")
        assert "engine: idle" in plain(screen.query_one("#engine-state", Static))
    db = open_db(db_path)
    try:
        rows = queries.attempts_for_experiment(db, "launched")
    finally:
        db.conn.close()
    assert len(rows) == 4 and {r.state for r in rows} == {"finished"}
    assert {r.model for r in rows} == {"alpha"}


async def test_bad_config_is_reported_not_raised(make_app, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment]\n")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        screen = app.screen
        screen.query_one("#config-path", Input).value = str(bad)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: "name" in plain(screen.query_one("#plan-preview",
                                                                          Static)))
        assert screen.config is None
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: "load a config first" in plain(
            screen.query_one("#plan-preview", Static)))
        assert app.engine_worker is None


SLOW = """\
[experiment]
name = "slow"
id = "slow"
problems = ["p28"]
agent = "simulated"
grading = "simulated"
max_submissions = 5

[[models]]
name = "alpha"
"""


class SlowToStop:
    """A simulated agent that takes a while per submission and, like a real sandbox, a while
    to clean up when cancelled."""

    def __init__(self) -> None:
        from engine.standins.simulated import SimulatedRunner

        self.inner = SimulatedRunner(submissions=5, delay_s=0.5)

    async def __call__(self, job, backend, observer):  # type: ignore[no-untyped-def]
        import asyncio

        try:
            return await self.inner(job, backend, observer)
        except asyncio.CancelledError:
            await asyncio.sleep(1.0)  # tearing the sandbox down
            raise


@pytest.mark.parametrize("how", ["ctrl+q", "exit"])
async def test_quit_mid_run_records_interrupted_and_a_rerun_resumes(
    how: str, make_app, tmp_path: Path, monkeypatch
) -> None:
    from engine import factory
    from engine.config import parse_config
    from engine.scheduler import Engine
    from engine.standins.simulated import SimulatedBackend, SimulatedRunner
    from storage.store import Store

    monkeypatch.setattr(factory, "make_runner", lambda config: SlowToStop())
    db_path = tmp_path / "quit.sqlite"
    config = parse_config(SLOW, "<test>")
    app = make_app(db_path=db_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.start_experiment(config)

        def running() -> int:
            db = open_db(db_path, readonly=True)
            try:
                return queries.attempt_states(db, "slow").get("running", 0)
            finally:
                db.conn.close()

        await wait_until(pilot, lambda: running() == 2, timeout=20)
        if how == "exit":
            app.exit(0)  # any way out, not only the quit key
        else:
            await pilot.press("ctrl+q")
    db = open_db(db_path, readonly=True)
    try:
        rows = queries.attempts_for_experiment(db, "slow")
    finally:
        db.conn.close()
    assert sorted(r.state for r in rows) == ["interrupted", "interrupted", "planned", "planned"]
    with Store(db_path) as store:  # `mkb run` again: the interrupted attempts resume
        summary = await Engine(store, config, SimulatedRunner(submissions=1),
                               SimulatedBackend()).run()
    assert summary.reused == 0 and set(summary.by_state) <= {"finished", "skipped"}
