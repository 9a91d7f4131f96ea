"""The writer thread, async reads, write functions and typed queries."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from storage import queries, writes
from storage.db import open_db
from storage.store import Store


def _experiment_with_attempt(db, plan_key: str = "m|p28|solo_cute|1") -> int:  # type: ignore[no-untyped-def]
    writes.create_experiment(db, "exp1", "demo")
    return writes.ensure_attempt(
        db,
        "exp1",
        plan_key,
        model="scripted/demo",
        problem_id="p28",
        dsl="cute",
        arm="solo_cute",
        replicate=1,
    )


async def test_write_then_read(store: Store) -> None:
    attempt_id = await store.write(_experiment_with_attempt)
    row = await store.read(queries.attempt, attempt_id)
    assert row is not None and row.problem_id == "p28" and row.state == "planned"


async def test_ensure_attempt_is_idempotent(store: Store) -> None:
    first = await store.write(_experiment_with_attempt)
    second = await store.write(_experiment_with_attempt)
    assert first == second
    assert await store.read(queries.count_attempts) == 1


async def test_failed_write_rolls_back_whole_transaction(store: Store) -> None:
    def half_then_fail(db) -> None:  # type: ignore[no-untyped-def]
        writes.append_event(db, "should_vanish")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await store.write(half_then_fail)
    assert await store.read(queries.last_event_id) == 0


async def test_many_concurrent_writes_and_a_tailing_reader(store: Store) -> None:
    seen: list[int] = []
    done = asyncio.Event()

    async def tail() -> None:
        last = 0
        while not done.is_set() or last < 400:
            rows = await store.read(queries.events_after, last)
            for r in rows:
                seen.append(r.id)
                last = r.id
            await asyncio.sleep(0.001)

    tailer = asyncio.create_task(tail())
    await asyncio.gather(
        *(store.write(writes.append_event, "tick", {"i": i}) for i in range(400))
    )
    done.set()
    await asyncio.wait_for(tailer, timeout=10)
    assert seen == sorted(seen) and len(seen) == 400 == len(set(seen))


def test_write_sync_from_plain_threads(store: Store) -> None:
    def worker(k: int) -> None:
        for i in range(50):
            store.write_sync(writes.append_event, "t", {"k": k, "i": i})

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.read_sync(queries.last_event_id) == 200


def test_second_process_style_reader_sees_committed_events(db_path: Path) -> None:
    with Store(db_path) as s:
        s.write_sync(writes.append_event, "hello", {"x": 1})
        other = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        rows = other.execute("SELECT kind, payload_json FROM events").fetchall()
        other.close()
    assert rows == [("hello", '{"x": 1}')]


def test_submission_lifecycle_grades_exactly_once(db_path: Path) -> None:
    db = open_db(db_path)
    attempt_id = _experiment_with_attempt(db)
    sub = writes.add_submission(db, attempt_id, 1, "def solve(*a): pass\n")
    assert writes.add_submission(db, attempt_id, 1, "ignored duplicate") == sub
    job1 = writes.start_grading_job(db, sub, "local")
    writes.finish_grading_job(db, job1, None, error="worker died")
    (pending,) = queries.pending_submissions(db)
    assert pending.id == sub and pending.state == "queued"
    job2 = writes.start_grading_job(db, sub, "local")
    writes.finish_grading_job(db, job2, {"verdict": "preview", "speedup": 1.5, "reason": None})
    writes.finish_grading_job(db, job2, {"verdict": "fail", "speedup": None})  # late duplicate
    (graded,) = queries.submissions(db, attempt_id)
    assert graded.verdict == "preview" and graded.speedup == 1.5
    assert graded.feedback == {"verdict": "preview", "speedup": 1.5, "reason": None}
    assert queries.pending_submissions(db) == []
    row = queries.attempt(db, attempt_id)
    assert row is not None and row.submissions_used == 1 and row.best_speedup == 1.5
    jobs = db.execute("SELECT try, state FROM grading_jobs ORDER BY id").fetchall()
    assert jobs == [(1, "error"), (2, "done")]


def test_steps_upsert_and_tail(db_path: Path) -> None:
    db = open_db(db_path)
    attempt_id = _experiment_with_attempt(db)
    writes.add_step(db, attempt_id, 0, analysis="look", keystrokes="ls\n")
    writes.add_step(db, attempt_id, 1, analysis="[/] not markup", terminal_output="out")
    writes.add_step(db, attempt_id, 1, analysis="replaced")
    rows = queries.steps(db, attempt_id)
    assert [r.step_index for r in rows] == [0, 1]
    assert rows[1].analysis == "replaced"
    assert queries.steps(db, attempt_id, after_id=rows[0].id)[0].step_index == 1


def test_attempt_pages_filter_sort_and_reject_unknown_columns(db_path: Path) -> None:
    db = open_db(db_path)
    writes.create_experiment(db, "exp1", "demo")
    for i in range(25):
        writes.ensure_attempt(
            db,
            "exp1",
            f"k{i}",
            model=f"m{i % 2}",
            problem_id=f"p{i + 1:02d}",
            dsl="cute" if i % 2 else "tirx",
            arm="solo_cute" if i % 2 else "solo_tirx",
        )
    page = queries.attempts_page(db, filters={"model": "m1"}, sort="problem_id", limit=5)
    assert [r.problem_id for r in page] == ["p02", "p04", "p06", "p08", "p10"]
    assert queries.count_attempts(db, filters={"model": "m1"}) == 12
    second = queries.attempts_page(db, limit=10, offset=10)
    assert second[0].problem_id == "p11"
    assert queries.attempt_states(db) == {"planned": 25}
    with pytest.raises(ValueError):
        queries.attempts_page(db, sort="id; DROP TABLE attempts")
    with pytest.raises(ValueError):
        queries.attempts_page(db, filters={"source": "x"})


def test_update_attempt_rejects_unknown_fields(db_path: Path) -> None:
    db = open_db(db_path)
    attempt_id = _experiment_with_attempt(db)
    writes.update_attempt(db, attempt_id, "attempt_started", state="running")
    assert queries.attempt(db, attempt_id).state == "running"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        writes.update_attempt(db, attempt_id, plan_key="hijack")
    kinds = [e.kind for e in queries.events_after(db)]
    assert kinds[-1] == "attempt_started"


def test_comparison_upsert_and_labels(db_path: Path) -> None:
    db = open_db(db_path)
    writes.create_experiment(db, "exp1", "demo")
    key = dict(model="m", problem_id="p28", direction="cute->tirx", replicate=1)
    writes.upsert_comparison(db, "exp1", **key, resolved=0)
    writes.upsert_comparison(db, "exp1", **key, resolved=1, rho=4.0, verdict="help")
    (c,) = queries.comparisons(db, "exp1")
    assert c.resolved == 1 and c.rho == 4.0 and c.verdict == "help"
    skill_id = writes.add_skill(db, "Use one pass over rows.")
    for value in ("yes", "no"):
        writes.add_label(
            db,
            task="skill",
            subject_type="skill",
            subject_id=skill_id,
            category="workload_facts",
            value=value,
            annotator="alice",
            annotator_kind="human",
        )
    (label,) = queries.labels(db, task="skill")
    assert label.value == "no"


def test_group_commit_isolates_a_failing_write(store: Store) -> None:
    def fail(db) -> None:  # type: ignore[no-untyped-def]
        writes.append_event(db, "doomed")
        raise ValueError("bad write")

    futures = [store.submit_write(writes.append_event, "ok", {"i": i}) for i in range(20)]
    bad = store.submit_write(fail)
    futures += [store.submit_write(writes.append_event, "ok", {"i": i}) for i in range(20, 40)]
    for f in futures:
        f.result(timeout=10)
    with pytest.raises(ValueError):
        bad.result(timeout=10)
    kinds = [e.kind for e in store.read_sync(queries.events_after, 0)]
    assert kinds.count("ok") == 40 and "doomed" not in kinds


def test_edited_skills_keep_their_lineage_and_are_reused(db_path: Path) -> None:
    db = open_db(db_path)
    attempt_id = _experiment_with_attempt(db)
    source = writes.add_skill(db, "# original", attempt_id=attempt_id)
    saved = writes.add_skill(db, "# edited", kind="edited", author="ana",
                             parent_skill_id=source)  # a person's edit, saved in the TUI
    assert writes.ensure_edited_skill(db, "# edited", source) == saved  # the run reuses it
    again = writes.add_skill(db, "# edited twice", kind="edited", author="ana",
                             parent_skill_id=saved)  # an edit of that edit
    assert writes.ensure_edited_skill(db, "# edited twice", source) == again
    other_source = writes.add_skill(db, "# another problem's skill", attempt_id=attempt_id)
    new = writes.ensure_edited_skill(db, "# edited", other_source)  # same text, other lineage
    assert new not in (saved, again)
    row = queries.skill(db, new)
    assert row is not None and row.kind == "edited" and row.parent_skill_id == other_source
    assert row.author == "config"
