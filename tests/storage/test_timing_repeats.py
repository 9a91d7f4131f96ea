"""The timing_repeats table: a repeat is graded once (done rows are never reopened), an error
leaves it to be graded again, and the reads the analysis and the resume use."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import repeats, writes
from storage.db import open_db


@pytest.fixture
def db(db_path: Path):  # noqa: ANN201 - a sqlite_utils Database
    conn = open_db(db_path)
    writes.create_experiment(conn, "e", "e")
    yield conn
    conn.conn.close()


def fb(verdict: str, impl: float | None) -> dict[str, object]:
    return {"verdict": verdict, "impl_median_ms": impl, "eager_median_ms": 1.0}


START = {"kind": "noise", "problem_id": "p28", "dsl": "cute", "source": "x", "host": "h"}


def test_a_done_repeat_is_never_reopened_and_an_error_is(db) -> None:  # noqa: ANN001
    assert repeats.start_repeat(db, "noise:a", 1, **START)
    assert repeats.finish_repeat(db, "noise:a", 1, fb("pass", 1.0))
    assert not repeats.start_repeat(db, "noise:a", 1, **START)  # done: graded once
    assert not repeats.finish_repeat(db, "noise:a", 1, fb("pass", 9.0))  # the first stands
    assert repeats.record_repeat(db, "noise:a", 2, fb("error", None), **START)
    assert repeats.done_repeats(db, "noise:a") == {1}  # an error is graded again
    assert repeats.start_repeat(db, "noise:a", 2, **START)
    assert repeats.finish_repeat(db, "noise:a", 2, fb("fail", None))
    rows = repeats.series_rows(db, "noise:a")
    assert [(r.repeat, r.state, r.passed, r.impl_median_ms) for r in rows] == [
        (1, "done", True, 1.0),
        (2, "done", False, None),
    ]


def test_series_of_problems_keep_only_passing_runtimes(db) -> None:  # noqa: ANN001
    for k, (verdict, impl) in enumerate([("pass", 1.0), ("fail", None), ("preview", 1.1)], 1):
        repeats.record_repeat(db, "noise:b", k, fb(verdict, impl), **START)
    repeats.record_repeat(db, "noise:c", 1, fb("pass", 2.0), **{**START, "problem_id": "p36"})
    (p28,) = repeats.problem_series(db, ["p28"])
    assert p28["values"] == [1.0, 1.1] and p28["preview"] and p28["host"] == "h"
    assert len(repeats.problem_series(db)) == 2 and repeats.problem_series(db, []) == []
    with pytest.raises(ValueError, match="runtime column"):
        repeats.problem_series(db, ["p28"], "source_hash")


def test_attempts_missing_repeats_and_the_latest_try(db) -> None:  # noqa: ANN001
    ids = []
    for i in range(3):
        aid = writes.ensure_attempt(
            db, "e", f"k{i}", model="m", problem_id="p28", dsl="cute", arm="solo_cute"
        )
        writes.update_attempt(db, aid, state="finished", outcome="preview", tries=2)
        ids.append(aid)
    writes.update_attempt(db, ids[2], outcome="fail")  # failing finals are not repeated
    start = {**START, "kind": "final", "experiment_id": "e"}
    for k in (1, 2, 3):
        repeats.record_repeat(
            db, repeats.final_series(ids[0], 2), k, fb("pass", 1.0), **start, attempt_id=ids[0]
        )
    repeats.record_repeat(
        db, repeats.final_series(ids[1], 1), 1, fb("pass", 5.0), **start, attempt_id=ids[1]
    )  # an older try: not this one's
    assert repeats.attempts_missing(db, "e", 3) == [ids[1]]
    assert repeats.attempts_missing(db, "e", 1) == [ids[1]]
    finals = repeats.experiment_finals(db, "e")
    assert [r.repeat for r in finals[ids[0]]] == [1, 2, 3]
    assert finals[ids[1]][0].impl_median_ms == 5.0  # its latest try with any repeats


def test_a_series_graded_on_two_hosts_is_split_by_host(db) -> None:  # noqa: ANN001
    """Repeats round-robined over graders: each host's gradings form their own series."""
    for k, host in enumerate(["quiet", "busy", "quiet", "busy"], 1):
        repeats.record_repeat(db, "noise:rr", k, fb("pass", float(k)), **{**START, "host": host})
    found = {s["host"]: s["values"] for s in repeats.problem_series(db, ["p28"])}
    assert found == {"quiet": [1.0, 3.0], "busy": [2.0, 4.0]}


def test_bands_of_an_experiment_read_its_series_and_noise_runs_only(db) -> None:  # noqa: ANN001
    writes.create_experiment(db, "other", "other")
    final = {**START, "kind": "final"}
    repeats.record_repeat(db, "final:1:1", 1, fb("pass", 1.0), **final, experiment_id="e")
    repeats.record_repeat(db, "final:2:1", 1, fb("pass", 2.0), **final, experiment_id="other")
    repeats.record_repeat(db, "noise:n", 1, fb("pass", 3.0), **START)
    repeats.record_repeat(db, "noise:n", 2, fb("pass", float("inf")), **START)
    keys = {s["key"] for s in repeats.problem_series(db, ["p28"], experiment_id="e")}
    assert keys == {"final:1:1", "noise:n"}
    (noise,) = [s for s in repeats.problem_series(db, ["p28"]) if s["key"] == "noise:n"]
    assert noise["values"] == [3.0]  # an infinite runtime is no runtime


def test_paired_rows_are_not_an_attempts_finals(db) -> None:  # noqa: ANN001
    start = {**START, "kind": "final", "experiment_id": "e"}
    repeats.record_repeat(db, "final:7:1", 1, fb("pass", 1.0), **start, attempt_id=None)
    repeats.record_repeat(db, "pair:e:3:baseline", 1, fb("pass", 1.0), **start)
    assert set(repeats.experiment_finals(db, "e")) == {7}  # no crash on the pair: series


def test_m008_fills_the_slot_and_span_of_stored_repeats(tmp_path: Path) -> None:
    import json

    from sqlite_utils import Database

    from storage.migrations import migrations

    db = Database(tmp_path / "old.sqlite")
    migrations.apply(db, stop_before="m008_add_repeat_pairing")
    feedback = {"verdict": "pass", "host": "node7:gpu3"}
    spans = {**feedback, "clock": {"breakdown": {"submission": {"span_ms": 0.25}}}}
    for n, data in enumerate((feedback, spans, {**spans, "host": 7}, None), start=1):
        db.execute(
            "INSERT INTO timing_repeats (series, repeat, kind, problem_id, dsl, source_hash, "
            "state, started_at, feedback_json) VALUES ('noise:x', ?, 'noise', 'p28', 'cute', "
            "'h', 'done', 't', ?)",
            [n, None if data is None else json.dumps(data)],
        )
    db.execute("INSERT INTO timing_repeats (series, repeat, kind, problem_id, dsl, "
               "source_hash, started_at, feedback_json) VALUES ('noise:y', 1, 'noise', 'p28', "
               "'cute', 'h', 't', 'not json')")  # fmt: skip
    migrations.apply(db)
    rows = db.execute(
        "SELECT series, repeat, slot, span_ms, pair_key, arm FROM timing_repeats "
        "ORDER BY series, repeat"
    ).fetchall()
    assert rows == [
        ("noise:x", 1, "node7:gpu3", None, None, None),
        ("noise:x", 2, "node7:gpu3", 0.25, None, None),
        ("noise:x", 3, "7", 0.25, None, None),
        ("noise:x", 4, "", None, None, None),
        ("noise:y", 1, "", None, None, None),
    ]
