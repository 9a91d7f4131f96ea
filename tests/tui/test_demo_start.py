"""`mkb demo` paints first: the experiment's config, agent stack and plan are built off the
UI loop after the App is on screen (the real figure: benchmarks/first_paint.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until

from app.cli import main
from app.tui import MkbApp
from engine.config import parse_config
from storage import queries
from storage.db import open_db

QUICK_DEMO = """\
[experiment]
name = "demo"
id = "demo"
problems = ["p28"]
agent = "simulated"
grading = "simulated"
max_submissions = 1

[[models]]
name = "sim/a"
"""


def test_demo_builds_the_experiment_after_the_first_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.demo
    import engine.factory

    calls: list[tuple[str, bool, bool]] = []
    holder: dict[str, MkbApp] = {}

    def record(what: str) -> None:
        app = holder.get("app")
        on_ui_thread = threading.current_thread() is threading.main_thread()
        calls.append((what, on_ui_thread, app is not None and app.painted))

    def demo_config() -> Any:
        record("config")
        return parse_config(QUICK_DEMO, "<demo>")

    real_make_runner = engine.factory.make_runner

    def make_runner(config: Any) -> Any:
        record("runner")
        return real_make_runner(config)

    monkeypatch.setattr(engine.demo, "demo_config", demo_config)
    monkeypatch.setattr(engine.factory, "make_runner", make_runner)

    def run_headless(self: MkbApp) -> int:  # what App.run does, without a terminal
        import asyncio

        holder["app"] = self

        async def drive() -> None:
            async with self.run_test(size=(120, 40)) as pilot:
                await wait_until(
                    pilot,
                    lambda: self.engine_worker is not None and self.engine_state == "idle",
                    timeout=30,
                )

        asyncio.run(drive())
        return 0

    monkeypatch.setattr(MkbApp, "run", run_headless)
    db = tmp_path / "demo.sqlite"
    assert main(["demo", "--db", str(db)]) == 0
    # neither on the UI thread nor before the first frame
    assert calls == [("config", False, True), ("runner", False, True)]
    conn = open_db(db, readonly=True)
    try:
        states = {a.state for a in queries.attempts_for_experiment(conn, "demo")}
        assert "finished" in states and states <= {"finished", "skipped"}
    finally:
        conn.conn.close()
