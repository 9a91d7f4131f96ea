"""The TUI's launch while another process runs the same experiment: refused with a notice that
names that process and how to watch it; nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import wait_until

from storage import queries, run_locks
from storage.db import immediate, open_db

CONFIG = """\
[experiment]
name = "busy"
id = "busy"
problems = ["p28"]
agent = "simulated"
grading = "simulated"

[[models]]
name = "alpha"
"""


async def test_launch_of_an_experiment_another_process_runs_is_refused(
    make_app, tmp_path: Path
) -> None:
    from engine.config import parse_config

    db_path = tmp_path / "busy.sqlite"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        db = open_db(db_path)
        me = run_locks.ProcessIdentity.current()
        holder = run_locks.ProcessIdentity(
            other.pid, me.host, run_locks.process_start(other.pid) or ""
        )
        with immediate(db):
            run_locks.acquire(db, "busy", "headless-run", command="mkb run busy.toml", me=holder)
        db.conn.close()

        app = make_app(db_path=db_path)
        notices: list[str] = []
        notify = app.notify

        def capture(message: str, **kwargs: object) -> None:
            notices.append(message)
            notify(message, **kwargs)  # type: ignore[arg-type]

        app.notify = capture  # type: ignore[method-assign]
        async with app.run_test(size=(120, 40)) as pilot:
            app.start_experiment(parse_config(CONFIG, "<test>"))
            await wait_until(pilot, lambda: any("already running" in n for n in notices), 30)
            await wait_until(pilot, lambda: app.engine_state == "idle")
        notice = next(n for n in notices if "already running" in n)
        assert f"pid {other.pid}" in notice and "mkb run busy.toml" in notice
        assert f"mkb tui --attach --db {db_path}" in notice
        db = open_db(db_path, readonly=True)
        try:
            assert queries.attempts_for_experiment(db, "busy") == []  # nothing was planned
            lock = run_locks.current(db, "busy")
            assert lock is not None and lock.owner == "headless-run"  # the holder keeps it
        finally:
            db.conn.close()
    finally:
        other.kill()
        other.wait()
