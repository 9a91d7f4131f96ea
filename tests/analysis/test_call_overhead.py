"""Call overhead against kernel time per attempt, from the feedback the store keeps whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.analysis.call_overhead import call_overhead, medians_by_dsl
from engine.grading.api import Feedback
from storage import writes
from storage.call_breakdown import call_splits
from storage.db import open_db


def _feedback(host: Any, device: Any, e2e: Any) -> dict[str, Any]:
    split = {
        "source": "runner",
        "submission": {"host_ms": host, "device_ms": device, "e2e_ms": e2e},
        "eager": {"host_ms": 0.02, "device_ms": 0.1, "e2e_ms": 0.15},
    }
    return Feedback("pass", impl_median_ms=e2e, clock={"breakdown": split}).to_dict()


def _graded(db: Any, attempt: int, n: int, feedback: dict[str, Any], purpose: str) -> int:
    sub = writes.add_submission(db, attempt, n, f"# {n}\n", purpose=purpose)
    writes.finish_grading_job(db, writes.start_grading_job(db, sub, "test"), feedback)
    return sub


@pytest.fixture
def db(tmp_path: Path) -> Any:
    db = open_db(tmp_path / "split.sqlite")
    writes.create_experiment(db, "x", "x")
    for key, dsl in (("cute", "cute"), ("tirx", "tirx")):
        writes.ensure_attempt(db, "x", key, model="m", problem_id="p36", family="f", dsl=dsl,
                              arm=f"solo_{dsl}", replicate=1)
    yield db
    db.conn.close()


def _attempt(db: Any, key: str) -> int:
    return int(db.execute("SELECT id FROM attempts WHERE plan_key=?", [key]).fetchone()[0])


def test_the_final_evaluation_is_picked_and_overhead_is_split(db: Any) -> None:
    cute, tirx = _attempt(db, "cute"), _attempt(db, "tirx")
    _graded(db, cute, 1, _feedback(0.099, 0.085, 0.180), "submission")
    _graded(db, cute, 1, _feedback(0.0715, 0.085, 0.155), "final")
    _graded(db, cute, 2, _feedback(0.5, 0.5, 0.9), "submission")  # after the final: not it
    _graded(db, tirx, 1, _feedback(0.020, 0.098, 0.120), "submission")
    rows = {r.dsl: r for r in call_overhead(db, "x")}
    assert rows["cute"].purpose == "final" and rows["cute"].host_ms == pytest.approx(0.0715)
    assert rows["cute"].off_gpu_ms == pytest.approx(0.155 - 0.085)
    assert rows["cute"].host_share == pytest.approx(0.0715 / 0.155)
    assert rows["tirx"].purpose == "submission" and rows["tirx"].device_ms == 0.098
    assert rows["tirx"].eager_device_ms == 0.1 and rows["tirx"].eager_e2e_ms == 0.15
    medians = medians_by_dsl(rows.values())
    assert medians["tirx"]["off_gpu_ms"] == pytest.approx(0.022)
    assert medians["cute"]["e2e_ms"] == pytest.approx(0.155)


def test_garbage_and_unreadable_records_read_as_missing(db: Any) -> None:
    cute = _attempt(db, "cute")
    _graded(db, cute, 1, _feedback("12", -1.0, True), "submission")
    broken = _graded(db, cute, 2, _feedback(0.1, 0.1, 0.2), "submission")
    db.execute("UPDATE submissions SET feedback_json='{not json' WHERE id=?", [broken])
    rows = call_splits(db, "x")
    assert [(r.host_ms, r.device_ms, r.e2e_ms) for r in rows] == [(None, None, None)] * 2
    assert rows[0].eager_host_ms == 0.02 and rows[1].eager_host_ms is None
    assert call_overhead(db, "x") == []  # nothing usable to split
    assert medians_by_dsl([]) == {}
