"""Operators' commands through the store, applied by the real engine (simulated agents)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import controls, queries
from storage.db import open_db
from storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
[experiment]
name = "ctl"
problems = ["p28"]
dsls = ["cute"]
replicates = 2
max_submissions = 3

[[models]]
name = "sim/a"

[concurrency]
sandboxes = 2

[control]
max_extra_submissions = 5
"""


def _slow() -> SimulatedRunner:
    return SimulatedRunner(submissions=40, delay_s=0.4, blank_skill_rate=0.0)


async def _running(store: Store, exp: str, timeout: float = 10.0) -> queries.AttemptRow:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await store.read(queries.attempts_for_experiment, exp)
        running = [r for r in rows if r.state == "running"]
        if running:
            return running[0]
        await asyncio.sleep(0.02)
    raise AssertionError("no attempt started")


async def _settled(store: Store, command_id: int, timeout: float = 5.0) -> controls.Command:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        command = await store.read(controls.command, command_id)
        if command.state not in ("pending", "applying"):
            return command
        await asyncio.sleep(0.02)
    raise AssertionError(f"command {command_id} never applied")


def _applied_events(db: object, command_id: int) -> int:
    rows = db.execute(  # type: ignore[attr-defined]
        "SELECT payload_json FROM events WHERE kind = ?", [controls.EVENT_KIND]
    ).fetchall()
    return sum(f'"command": {command_id},' in r[0] and '"applied"' in r[0] for r in rows)


async def test_stop_ends_a_running_attempt_and_a_rerun_keeps_it_stopped(db_path: Path) -> None:
    config = parse_config(CONFIG)
    with Store(db_path) as store:
        engine = Engine(store, config, _slow(), SimulatedBackend())
        run = asyncio.create_task(engine.run())
        row = await _running(store, config.id)
        asked = time.monotonic()
        cmd = await store.write(controls.submit, config.id, "stop", actor="tester",
                                attempt_id=row.id, reason="loops on one error")
        done = await _settled(store, cmd.id)
        assert done.state == "applied", done.outcome
        assert time.monotonic() - asked < 2.0
        stopped = await store.read(queries.attempt, row.id)
        assert stopped.stop_reason == "loops on one error" and stopped.state == "interrupted"
        await run
        again = await Engine(store, config, _slow(), SimulatedBackend()).run()
        assert again.ran == 0  # the stopped attempt is not resumed
        assert (await store.read(queries.attempt, row.id)).tries == stopped.tries


async def test_retry_runs_a_new_linked_try_and_extend_raises_the_limit(db_path: Path) -> None:
    config = parse_config(CONFIG)
    with Store(db_path) as store:
        engine = Engine(store, config, _slow(), SimulatedBackend())
        run = asyncio.create_task(engine.run())
        row = await _running(store, config.id)
        ext = await store.write(controls.submit, config.id, "extend", actor="t",
                                attempt_id=row.id, args={"submissions": 4})
        assert (await _settled(store, ext.id)).state == "applied"
        too_much = await store.write(controls.submit, config.id, "extend", actor="t",
                                     attempt_id=row.id, args={"submissions": 2})
        refused = await _settled(store, too_much.id)
        assert refused.state == "refused" and "[control]" in refused.outcome
        retry = await store.write(controls.submit, config.id, "retry", actor="t",
                                  attempt_id=row.id, reason="sandbox hung")
        assert (await _settled(store, retry.id)).state == "applied"
        await run
        after = await store.read(queries.attempt, row.id)
        assert after.state == "finished" and after.tries == 2 and after.stop_reason is None
        assert after.submissions_used == 3 + 4  # the extension holds for the new try too
        link = await store.read(controls.command, retry.id)
        assert "try 2 queued; try 1 kept" in link.outcome
        intervened = await store.read(controls.intervened_attempts, config.id)
        assert intervened[row.id] == ["extend", "retry"]


async def test_no_engine_is_answered_at_once_and_data_actions_need_none(db_path: Path) -> None:
    config = parse_config(CONFIG)
    with Store(db_path) as store:
        await Engine(store, config, SimulatedRunner(submissions=1), SimulatedBackend()).run()
        first = (await store.read(queries.attempts_for_experiment, config.id))[0]
        stop = await store.write(controls.submit, config.id, "stop", actor="t",
                                 attempt_id=first.id)
        assert (stop.state, stop.outcome) == ("refused", controls.NO_ENGINE)
        with pytest.raises(controls.ControlError, match="needs a reason"):
            await store.write(controls.submit, config.id, "exclude", actor="t",
                              attempt_id=first.id)
        ex = await store.write(controls.submit, config.id, "exclude", actor="t",
                               attempt_id=first.id, reason="found a hole in the task")
        assert ex.state == "applied"
        assert await store.read(controls.exclusions_by_attempt, config.id) == {
            first.id: "found a hole in the task"}
        await store.write(controls.submit, config.id, "include", actor="t",
                          attempt_id=first.id, reason="hole was harmless")
        assert await store.read(controls.exclusions_by_attempt, config.id) == {}


CHILD = """
import asyncio, os, signal, sys
from engine.config import parse_config
from engine.control import Control
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage.store import Store

async def die(self, command):  # the claim is committed: die before any effect
    os.kill(os.getpid(), signal.SIGKILL)

Control._apply = die
config = parse_config(open(sys.argv[1]).read())
store = Store(sys.argv[2])
runner = SimulatedRunner(submissions=40, delay_s=0.4, blank_skill_rate=0.0)
asyncio.run(Engine(store, config, runner, SimulatedBackend()).run())
"""


def test_kill_nine_between_claim_and_effect_applies_once_on_resume(tmp_path: Path) -> None:
    config_path, db_path = tmp_path / "ctl.toml", tmp_path / "ctl.sqlite"
    config_path.write_text(CONFIG)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(config_path),
                              str(db_path)], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        running = None
        while running is None and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
            if db_path.exists():
                db = open_db(db_path)
                rows = queries.attempts_for_experiment(db, "ctl")
                running = next((r for r in rows if r.state == "running"), None)
                db.conn.close()
        assert running is not None, child.stderr.read().decode() if child.stderr else ""
        db = open_db(db_path)
        with db.conn:
            cmd = controls.submit(db, "ctl", "stop", actor="t", attempt_id=running.id,
                                  reason="hung")
        db.conn.close()
        assert cmd.state == "pending"
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    db = open_db(db_path)
    left = controls.command(db, cmd.id)
    db.conn.close()
    assert left.state == "applying"  # claimed by the killed engine, no effect written

    async def resume() -> None:
        config = parse_config(CONFIG)
        with Store(db_path) as store:
            for _ in range(2):  # a second run must not apply it again
                await Engine(store, config, SimulatedRunner(submissions=1),
                             SimulatedBackend()).run()

    asyncio.run(resume())
    db = open_db(db_path)
    done = controls.command(db, cmd.id)
    row = queries.attempt(db, running.id)
    events = _applied_events(db, cmd.id)
    db.conn.close()
    assert done.state == "applied" and events == 1
    assert row is not None and row.stop_reason == "hung" and row.state == "interrupted"
    assert row.tries == running.tries  # never resumed after the stop


def test_control_limits_default_to_the_budget_and_are_checked() -> None:
    from engine.config import ConfigError

    base = CONFIG.replace("[control]\nmax_extra_submissions = 5\n", "")
    config = parse_config(base)
    assert (config.max_extra_minutes, config.max_extra_submissions) == (40.0, 3)
    for bad, message in (("max_extra_submissions = -1", "≥ 0"), ("max_extra_minutes = true",
                         "number"), ("minutes = 3", "unknown keys")):
        with pytest.raises(ConfigError, match=message):
            parse_config(base + f"\n[control]\n{bad}\n")
