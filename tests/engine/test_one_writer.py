"""One engine per experiment: a second one refuses (in one process, and as two real `mkb run`
processes on one SQLite file), a killed one's lock is taken over on resume, and labels are
written while a run goes on."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.config import parse_config
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend, SimulatedRunner
from storage import queries, run_locks, writes
from storage.run_locks import ExperimentBusyError
from storage.store import Store

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
[experiment]
name = "onewriter"
problems = ["p28"]
replicates = 2
agent = "simulated"
grading = "simulated"

[agent]
submissions = 2
delay_s = {delay}

[[models]]
name = "sim/a"

[[models]]
name = "sim/b"

[concurrency]
sandboxes = 4
"""


def _starts_per_attempt(db) -> dict[int, int]:  # type: ignore[no-untyped-def]
    rows = db.execute(
        "SELECT a.id, count(e.id) FROM attempts a LEFT JOIN events e "
        "ON e.attempt_id = a.id AND e.kind = 'attempt_started' GROUP BY a.id"
    ).fetchall()
    return {int(a): int(n) for a, n in rows}


async def _wait_for_lock(store: Store, experiment_id: str) -> run_locks.RunLock:
    for _ in range(500):
        lock = await store.read(run_locks.current, experiment_id)
        if lock is not None:
            return lock
        await asyncio.sleep(0.02)
    raise AssertionError("the engine never took its run lock")


async def test_second_engine_refuses_while_the_first_runs(db_path: Path) -> None:
    config = parse_config(CONFIG.format(delay=0.1))
    other = parse_config(CONFIG.format(delay=0.0).replace('"onewriter"', '"other"'))
    with Store(db_path) as first_store, Store(db_path) as second_store:
        first = Engine(
            first_store,
            config,
            SimulatedRunner(submissions=2, delay_s=0.1),
            SimulatedBackend(),
            command="mkb run first.toml",
        )
        task = asyncio.create_task(first.run())
        lock = await _wait_for_lock(first_store, config.id)
        assert lock.owner == first.owner and lock.command == "mkb run first.toml"

        second = Engine(second_store, config, SimulatedRunner(submissions=2), SimulatedBackend())
        with pytest.raises(ExperimentBusyError, match="mkb run first.toml") as info:
            await second.run()
        assert "mkb tui --attach --db" in str(info.value)
        # another experiment in the same store runs meanwhile
        summary = await Engine(
            second_store, other, SimulatedRunner(submissions=1), SimulatedBackend()
        ).run()
        assert summary.ran + summary.skipped == 16

        done = await task
        assert not done.interrupted
        starts = await first_store.read(_starts_per_attempt)
        ids = {a.id for a in await first_store.read(queries.attempts_for_experiment, config.id)}
        assert {starts[i] for i in ids} <= {0, 1}  # no attempt ran twice (0: skipped)
        interrupted = await first_store.read(
            lambda db: db.execute(
                "SELECT count(*) FROM events WHERE kind='attempt_interrupted'"
            ).fetchone()[0]
        )
        assert interrupted == 0  # the refused engine marked none of the first's attempts
        assert await first_store.read(run_locks.current, config.id) is None  # released

        again = await Engine(
            second_store, config, SimulatedRunner(submissions=2), SimulatedBackend()
        ).run()
        assert again.ran == 0 and again.reused == 16


async def test_cancelled_engine_releases_its_lock(db_path: Path) -> None:
    config = parse_config(CONFIG.format(delay=0.2))
    with Store(db_path) as store:
        task = asyncio.create_task(
            Engine(store, config, SimulatedRunner(delay_s=0.2), SimulatedBackend()).run()
        )
        await _wait_for_lock(store, config.id)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.read(run_locks.current, config.id) is None


async def test_an_engine_whose_lock_was_taken_stops_writing(db_path: Path) -> None:
    config = parse_config(CONFIG.format(delay=0.2))
    with Store(db_path) as store:
        engine = Engine(
            store, config, SimulatedRunner(submissions=5, delay_s=0.2), SimulatedBackend()
        )
        engine.heartbeat_s = 0.05
        task = asyncio.create_task(engine.run())
        await _wait_for_lock(store, config.id)
        await asyncio.sleep(0.3)
        await store.write(
            lambda db: db.execute(
                "UPDATE run_locks SET owner='taken-over' WHERE experiment_id=?", [config.id]
            )
        )
        summary = await asyncio.wait_for(task, 30)
        assert engine.lock_lost and summary.interrupted
        lock = await store.read(run_locks.current, config.id)
        assert lock is not None and lock.owner == "taken-over"  # not released by the loser
        experiment = await store.read(queries.experiment, config.id)
        assert experiment is not None and experiment.state == "running"  # left to the holder


# -- two real processes on one SQLite file ---------------------------------------------------


def _query(db: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return []
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _mkb(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def _start_run(config: Path, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _mkb("run", str(config), "--db", str(db), "--json"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until(predicate, what: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}: {proc.stderr.read()[-2000:]}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _check_no_double_runs(db: Path) -> None:
    rows = _query(
        db,
        "SELECT a.id, a.tries, (SELECT count(*) FROM events e WHERE "
        "e.attempt_id = a.id AND e.kind = 'attempt_started'), (SELECT count(*) "
        "FROM skills s WHERE s.attempt_id = a.id) FROM attempts a",
    )
    assert rows
    for attempt_id, tries, starts, skills in rows:
        assert starts == tries <= 1, f"attempt {attempt_id} ran {starts} times"
        assert skills <= 1


@pytest.mark.slow
def test_two_processes_one_refuses_labels_go_in_kill_nine_resumes(tmp_path: Path) -> None:
    db = tmp_path / "mkb.sqlite"
    slow = tmp_path / "slow.toml"
    slow.write_text(CONFIG.format(delay=1.0))
    first = _start_run(slow, db)
    try:
        _wait_until(lambda: bool(_query(db, "SELECT 1 FROM run_locks")), "the run lock", first)
        _wait_until(
            lambda: bool(_query(db, "SELECT 1 FROM attempts WHERE state='running'")),
            "a running attempt",
            first,
        )

        # read now: on a loaded machine the first run may end while the second one starts
        since = _query(db, "SELECT started_at FROM run_locks")[0][0]
        second = subprocess.run(
            _mkb("run", str(slow), "--db", str(db), "--json"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 2, second.stderr[-2000:]
        assert first.poll() is None  # the first run goes on
        message = second.stderr
        for part in (
            "already running",
            f"pid {first.pid} on ",
            f"since {since}",
            f"mkb tui --attach --db {db}",
        ):
            assert part in message, message
        assert "Traceback" not in message and "database is locked" not in message
        _check_no_double_runs(db)

        # a person labels an attempt while the run writes
        attempt_id = _query(db, "SELECT id FROM attempts ORDER BY id LIMIT 1")[0][0]
        for value in ("ignored", "followed partially"):
            label = subprocess.run(
                _mkb(
                    "label",
                    "--db",
                    str(db),
                    "--annotator",
                    f"ana-{value}",
                    "--task",
                    "uptake",
                    "--subject",
                    str(attempt_id),
                    "--value",
                    value,
                ),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert label.returncode == 0, label.stderr[-2000:]

        first.send_signal(signal.SIGKILL)  # the lock stays behind, with a dead pid
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert _query(db, "SELECT pid FROM run_locks") == [(first.pid,)]

    fast = tmp_path / "fast.toml"  # the same plan, quicker agents
    fast.write_text(CONFIG.format(delay=0.0))
    resumed = subprocess.run(
        _mkb("run", str(fast), "--db", str(db), "--json"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert '"kind": "run_lock_taken_over"' in resumed.stdout  # said on the event stream
    assert _query(db, "SELECT count(*) FROM run_locks") == [(0,)]
    states = dict(_query(db, "SELECT state, count(*) FROM attempts GROUP BY state"))
    assert set(states) <= {"finished", "skipped"} and sum(states.values()) == 16  # type: ignore[arg-type]
    taken = _query(
        db,
        "SELECT payload_json FROM events WHERE kind='run_lock_acquired' ORDER BY id DESC LIMIT 1",
    )[0][0]
    assert f'"taken_over": {{"pid": {first.pid}' in str(taken)
    assert _query(db, "SELECT count(*) FROM labels WHERE annotator_kind='human'") == [(2,)]


@pytest.mark.slow
def test_two_processes_started_together_never_run_an_attempt_twice(tmp_path: Path) -> None:
    db = tmp_path / "fresh.sqlite"  # new: both processes also create and migrate it
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(delay=0.3))
    procs = [_start_run(config, db) for _ in range(2)]
    results = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        results.append((proc.returncode, err))
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for code, err in results:
        assert "Traceback" not in err and "database is locked" not in err, err[-2000:]
        if code == 2:
            assert "already running" in err
    _check_no_double_runs(db)
    states = dict(_query(db, "SELECT state, count(*) FROM attempts GROUP BY state"))
    assert set(states) <= {"finished", "skipped"} and sum(states.values()) == 16  # type: ignore[arg-type]
    assert _query(db, "SELECT count(*) FROM run_locks") == [(0,)]


def test_store_writes_from_the_tui_wait_for_a_running_engine(db_path: Path) -> None:
    """The App's own store (labels, edited skills) writes beside a running engine's store."""

    async def main() -> None:
        config = parse_config(CONFIG.format(delay=0.05))
        with Store(db_path) as engine_store, Store(db_path) as tui_store:
            task = asyncio.create_task(
                Engine(
                    engine_store,
                    config,
                    SimulatedRunner(submissions=3, delay_s=0.05),
                    SimulatedBackend(),
                ).run()
            )
            await _wait_for_lock(engine_store, config.id)
            ids = [a.id for a in await tui_store.read(queries.attempts_for_experiment, config.id)]
            for n, attempt_id in enumerate(ids):
                await tui_store.write(
                    writes.add_label,
                    task="uptake",
                    subject_type="attempt",
                    subject_id=attempt_id,
                    category="uptake",
                    value="ignored",
                    annotator=f"ana{n}",
                    annotator_kind="human",
                )
                await tui_store.write(writes.add_skill, f"edited {n}", kind="edited", author="ana")
            await task
            labels = await tui_store.read(
                lambda db: db.execute("SELECT count(*) FROM labels").fetchone()[0]
            )
            assert labels == len(ids) == 16

    asyncio.run(main())
