"""Paired jobs survive kill -9: after kills at random points of the engine and a rerun, every
comparison's paired job has all its positions, each graded once after nothing of it was stored
(none graded again, none lost), on one slot, and the rows equal an uninterrupted run's (the
simulated noise is keyed by the request). The approach of ``test_final_repeats_crash.py``."""

from __future__ import annotations

import json
import random
import signal
from datetime import datetime
from pathlib import Path

import pytest

from storage import queries
from storage import repeats as repeat_rows
from storage.db import open_db
from tests.engine.test_final_repeats_crash import CONFIG as FINALS_CONFIG
from tests.engine.test_final_repeats_crash import run_cli, run_in_process

CONFIG = (
    FINALS_CONFIG.replace('name = "crash"', 'name = "paired"')
    .replace("final_repeats = 3", "final_repeats = 1\npaired_repeats = 3\nslots = 2")
    .replace("grading_slots = 1", "grading_slots = 2")
)


def pairing(db: Path) -> dict[tuple[str, int], tuple[str, str, str, float | None]]:
    """Per (comparison, position): arm, state, slot, runtime."""
    conn = open_db(db)
    keys = {
        c.id: f"{c.model}/{c.direction}/{c.replicate}" for c in queries.comparisons(conn, "paired")
    }
    rows = {
        (keys[cid], r.repeat): (str(r.arm), r.state, r.slot, r.impl_median_ms)
        for cid, rs in repeat_rows.paired_rows(conn, "paired").items()
        for r in rs
    }
    conn.conn.close()
    return rows


def graded_after_stored(db: Path, log: Path) -> list[str]:
    """Paired gradings that started after their row was stored done (must be none)."""
    starts: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "start" and "-pair" in entry["request_id"]:
            starts.setdefault(entry["request_id"], []).append(entry["t"])
    conn = open_db(db)
    rows = conn.execute(
        "SELECT attempt_id, pair_key, repeat, finished_at FROM timing_repeats "
        "WHERE state='done' AND pair_key IS NOT NULL"
    ).fetchall()
    conn.conn.close()
    late = []
    for attempt_id, key, position, finished_at in rows:
        request_id = f"{attempt_id}-pair{key.rsplit(':', 1)[1]}-p{position}"
        stored = datetime.fromisoformat(finished_at).timestamp()
        if any(t > stored for t in starts.get(request_id, [])):
            late.append(request_id)
    return late


@pytest.mark.slow
def test_kill_nine_never_regrades_or_loses_a_paired_grading(tmp_path: Path) -> None:
    clean_db, clean_log = tmp_path / "clean.sqlite", tmp_path / "clean.log"
    clean_cfg = tmp_path / "clean.toml"
    clean_cfg.write_text(CONFIG.format(log=clean_log))
    run_in_process(clean_cfg, clean_db)
    expected = pairing(clean_db)
    assert len(expected) == 8 * 6 and {row[1] for row in expected.values()} == {"done"}

    db, log = tmp_path / "crashed.sqlite", tmp_path / "crashed.log"
    cfg = tmp_path / "crashed.toml"
    cfg.write_text(CONFIG.format(log=log))
    rng = random.Random(20261207)
    kills = sum(
        run_cli(cfg, db, kill_at_events=rng.randint(60, 200)) == -signal.SIGKILL for _ in range(2)
    )
    assert kills >= 1, "the run finished before any kill: make the agents slower"
    left = pairing(db)
    assert left and len([r for r in left.values() if r[1] == "done"]) < len(expected), (
        "no kill mid-pair"
    )
    run_cli(cfg, db)
    got = pairing(db)
    assert {k: (v[0], v[1], v[3]) for k, v in got.items()} == {
        k: (v[0], v[1], v[3]) for k, v in expected.items()
    }
    by_comparison: dict[str, set[str]] = {}
    for (key, _), row in got.items():
        by_comparison.setdefault(key, set()).add(row[2])
    assert all(len(slots) == 1 for slots in by_comparison.values()), by_comparison
    assert graded_after_stored(db, log) == []
