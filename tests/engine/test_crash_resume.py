"""kill -9 at random points, then rerun: the same final outcomes as an uninterrupted run."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import queries
from storage.db import open_db

CONFIG = """
[experiment]
name = "crash"
problems = ["p28"]
replicates = 3
agent = "simulated"
grading = "simulated"

[agent]
submissions = 2
delay_s = 0.05

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"

[concurrency]
sandboxes = 4
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


def run_cli(config: Path, db: Path, kill_at_events: int | None = None) -> int:
    """Run `mkb run`; with ``kill_at_events``, SIGKILL it once that many more events exist."""
    cmd = [sys.executable, "-m", "app.cli", "run", str(config), "--db", str(db), "--json"]
    start_events = _events(db)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if kill_at_events is None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        return proc.returncode
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if _events(db) - start_events >= kill_at_events:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    return proc.returncode


def final_table(db: Path) -> list[tuple[object, ...]]:
    conn = open_db(db)
    attempts = sorted(
        (r.plan_key, r.state, r.outcome, r.impl_median_ms, r.speedup)
        for r in queries.attempts_for_experiment(conn, "crash")
    )
    comps = sorted(
        (c.model, c.direction, c.replicate, c.resolved, c.rho, c.verdict)
        for c in queries.comparisons(conn, "crash")
    )
    dupes = conn.execute(
        "SELECT count(*) FROM (SELECT plan_key FROM attempts GROUP BY experiment_id, plan_key "
        "HAVING count(*) > 1)"
    ).fetchone()[0]
    conn.conn.close()
    assert dupes == 0
    return attempts + comps  # type: ignore[operator]


@pytest.mark.slow
def test_kill_nine_then_rerun_matches_uninterrupted(tmp_path: Path) -> None:
    config = tmp_path / "crash.toml"
    config.write_text(CONFIG)
    clean_db = tmp_path / "clean.sqlite"
    run_cli(config, clean_db)
    expected = final_table(clean_db)

    crashed_db = tmp_path / "crashed.sqlite"
    rng = random.Random(20261202)
    kills = 0
    for _ in range(3):
        rc = run_cli(config, crashed_db, kill_at_events=rng.randint(20, 120))
        kills += rc == -signal.SIGKILL
    assert kills >= 1, "the run finished before any kill: make the agents slower"
    conn = open_db(crashed_db)
    states = queries.attempt_states(conn, "crash")
    conn.conn.close()
    assert sum(states.values()) > 0
    run_cli(config, crashed_db)
    assert final_table(crashed_db) == expected
