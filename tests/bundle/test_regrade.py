"""`mkb regrade`: a changed problem is reported, not graded; a re-grade killed with SIGKILL and
run again grades every implementation once (a real child process, the real local grader in
CPU preview)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bundle_support import WRONG, build_store

from app.cli import main
from engine.bundle import archive
from engine.bundle.export import collect, export_bundle
from engine.bundle.regrade import INTERRUPTED
from storage import provenance
from storage.db import StorageError, open_db

ROOT = Path(__file__).resolve().parents[2]


def _changed_problem_bundle(db_path: Path, out: Path) -> None:
    """A valid bundle whose p28 source differs from this catalog's."""
    db = open_db(db_path, readonly=True)
    manifest, members, _ = collect(db, "bt")
    db.conn.close()
    name = next(n for n in members if n.startswith("problems/p28"))
    members[name] += b"\n# changed after export\n"
    index = json.loads(members["problems/index.json"])
    index[0]["sha256"] = archive.sha256(members[name])
    members["problems/index.json"] = json.dumps(index).encode()
    archive.write_archive(out, manifest, members)


def _rows(db_path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    db = open_db(db_path, readonly=True)
    try:
        return [tuple(r) for r in db.execute(sql, list(params)).fetchall()]
    finally:
        db.conn.close()


def test_a_changed_problem_is_reported_and_not_regraded(
    graded_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, out = tmp_path / "changed.mkb", tmp_path / "out.sqlite"
    _changed_problem_bundle(graded_db, bundle)
    assert main(["bundle", "verify", str(bundle)]) == 0  # a sound bundle, of another p28
    code = main(["regrade", str(bundle), "--db", str(out), "--device", "cpu"])
    text = capsys.readouterr().out
    assert code == 1  # nothing could be compared
    assert "Problem p28: source differs from the bundle's: not re-graded" in text
    assert text.count("not re-graded: p28") == 4
    assert _rows(
        out,
        "SELECT count(*) FROM grading_jobs g JOIN submissions s ON "
        "s.id = g.submission_id JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id LIKE 'bt-regrade-%'",
    ) == [(0,)]
    states = _rows(
        out, "SELECT DISTINCT state FROM attempts WHERE experiment_id LIKE 'bt-regrade-%'"
    )
    assert states == [("interrupted",)]
    db = open_db(out, readonly=True)
    exp = _rows(out, "SELECT id, origin FROM experiments ORDER BY id")
    assert [e[0] for e in exp] == ["bt", next(e[0] for e in exp if e[0] != "bt")]
    assert dict(exp)["bt"].startswith("bundle:")  # the original, labelled with its origin
    report = provenance.latest_report(db, next(e[0] for e in exp if e[0] != "bt"), "regrade")
    db.conn.close()
    assert report is not None and report.payload["changed_problems"][0]["problem"] == "p28"


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (by parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text[text.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _wait_for(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (StorageError, sqlite3.OperationalError):  # the child is creating the store
            pass
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


@pytest.mark.slow
def test_kill_9_then_rerun_grades_every_implementation_once(tmp_path: Path) -> None:
    store, bundle, out = tmp_path / "store.sqlite", tmp_path / "bt.mkb", tmp_path / "out.sqlite"
    build_store(store, wrong_arm="tirx2cute_skill")
    db = open_db(store, readonly=True)
    export_bundle(db, "bt", bundle)
    db.conn.close()
    command = [
        sys.executable,
        "-m",
        "app.cli",
        "regrade",
        str(bundle),
        "--db",
        str(out),
        "--device",
        "cpu",
    ]
    done_sql = (
        "SELECT s.id FROM submissions s JOIN attempts a ON a.id = s.attempt_id WHERE "
        "a.experiment_id LIKE 'bt-regrade-%' AND s.state = 'done'"
    )
    child = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for(lambda: out.exists() and len(_rows(out, done_sql)) >= 1, timeout=240)
    finally:  # mid-run (the next grading under way), or on a failure: the child and the
        below = _descendants(child.pid)  # warm grader it started, each by its pid
        for pid in [child.pid, *below]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child.wait(timeout=30)
    graded_before = {r[0] for r in _rows(out, done_sql)}
    assert 1 <= len(graded_before) < 4
    cut_short = _rows(out, "SELECT id FROM grading_jobs WHERE state = 'running'")
    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]  # every verdict agrees (one fails twice)
    jobs = _rows(
        out,
        "SELECT g.submission_id, g.state FROM grading_jobs g JOIN submissions s "
        "ON s.id = g.submission_id JOIN attempts a ON a.id = s.attempt_id "
        "WHERE a.experiment_id LIKE 'bt-regrade-%'",
    )
    done = [sid for sid, state in jobs if state == "done"]
    assert sorted(done) == sorted(set(done)) and len(done) == 4  # each graded once
    for (job_id,) in cut_short:  # the grading the kill cut short is closed, not counted
        assert _rows(out, "SELECT state, error FROM grading_jobs WHERE id = ?", job_id) == [
            ("error", INTERRUPTED)
        ]
    for sid in graded_before:  # finished before the kill: never graded again
        assert [state for s, state in jobs if s == sid] == ["done"]
    assert "Verdicts: 4 of 4 agree (100.0%)" in rerun.stdout
    assert "graded" in rerun.stderr and rerun.stderr.count("graded ") == 4 - len(graded_before)
    regrade_id = _rows(out, "SELECT id FROM experiments WHERE id LIKE 'bt-regrade-%'")[0][0]
    assert _rows(
        out,
        "SELECT count(*) FROM experiment_reports WHERE experiment_id = ? AND kind = 'regrade'",
        regrade_id,
    ) == [(1,)]
    outcome = _rows(
        out,
        "SELECT outcome, reason FROM attempts WHERE experiment_id = ? AND arm = 'tirx2cute_skill'",
        regrade_id,
    )
    assert outcome == [("fail", "correctness.tolerance")] and WRONG
