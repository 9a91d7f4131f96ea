"""Repeated finals survive kill -9: after kills at random points and a rerun, every passing
final has its R repeats, each graded once after it was stored (none graded again, none lost),
and the tables equal an uninterrupted run's (the simulated noise is keyed by the request)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from storage import queries
from storage.db import open_db

CONFIG = """
[experiment]
name = "crash"
problems = ["p28"]
replicates = 2
agent = "simulated"
grading = "simulated"

[agent]
submissions = 1
delay_s = 0.05
blank_skill_rate = 0.0
final_runtime_ms = 1.0

[grading]
final_repeats = 3
noise_cv = {{ p28 = 0.05 }}
delay_s = 0.03
call_log = "{log}"

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"

[concurrency]
sandboxes = 4
grading_slots = 1
"""
ROOT = Path(__file__).resolve().parents[2]


def _events(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def run_in_process(config: Path, db: Path) -> None:
    """The uninterrupted run, in this process (the same engine `mkb run` builds)."""
    from engine.config import load_config
    from engine.factory import make_backend, make_runner
    from engine.scheduler import Engine
    from storage.store import Store

    parsed = load_config(config)
    with Store(db) as store:
        asyncio.run(Engine(store, parsed, make_runner(parsed), make_backend(parsed)).run())


def run_cli(config: Path, db: Path, kill_at_events: int | None = None) -> int:
    cmd = [sys.executable, "-m", "app.cli", "run", str(config), "--db", str(db), "--json"]
    start = _events(db)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if kill_at_events is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        return 0
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if _events(db) - start >= kill_at_events:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    return proc.returncode


def tables(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    conn = open_db(db)
    attempts = sorted(
        (r.plan_key, r.state, r.outcome, r.impl_median_ms, r.speedup)
        for r in queries.attempts_for_experiment(conn, "crash")
    )
    comps = sorted(
        (c.model, c.direction, c.replicate, c.rho, c.verdict)
        for c in queries.comparisons(conn, "crash")
    )
    repeats = sorted(
        (key, repeat, state, value)
        for key, repeat, state, value in conn.execute(
            "SELECT a.plan_key, t.repeat, t.state, t.impl_median_ms FROM timing_repeats t "
            "JOIN attempts a ON a.id = t.attempt_id"
        ).fetchall()
    )
    conn.conn.close()
    return attempts + comps, repeats  # type: ignore[operator]


def graded_after_stored(db: Path, log: Path) -> list[str]:
    """Repeats whose grading started after the repeat was stored done (must be none)."""
    starts: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "start":
            starts.setdefault(entry["request_id"], []).append(entry["t"])
    conn = open_db(db)
    rows = conn.execute(
        "SELECT attempt_id, repeat, finished_at FROM timing_repeats "
        "WHERE state='done' AND repeat > 1"
    ).fetchall()
    conn.conn.close()
    late = []
    for attempt_id, repeat, finished_at in rows:
        stored = datetime.fromisoformat(finished_at).timestamp()
        if any(t > stored for t in starts.get(f"{attempt_id}-final-r{repeat}", [])):
            late.append(f"{attempt_id}-final-r{repeat}")
    return late


@pytest.mark.slow
def test_kill_nine_never_regrades_or_loses_a_repeat(tmp_path: Path) -> None:
    clean_db, clean_log = tmp_path / "clean.sqlite", tmp_path / "clean.log"
    clean_cfg = tmp_path / "clean.toml"
    clean_cfg.write_text(CONFIG.format(log=clean_log))
    run_in_process(clean_cfg, clean_db)
    expected, expected_repeats = tables(clean_db)
    assert len(expected_repeats) == 16 * 3 and {r[2] for r in expected_repeats} == {"done"}

    db, log = tmp_path / "crashed.sqlite", tmp_path / "crashed.log"
    cfg = tmp_path / "crashed.toml"
    cfg.write_text(CONFIG.format(log=log))
    rng = random.Random(20261205)
    kills = sum(
        run_cli(cfg, db, kill_at_events=rng.randint(40, 160)) == -signal.SIGKILL for _ in range(2)
    )
    assert kills >= 1, "the run finished before any kill: make the agents slower"
    run_cli(cfg, db)
    assert tables(db) == (expected, expected_repeats)
    assert graded_after_stored(db, log) == []
