"""`mkb analyze --time span`: every table recomputed on the runners' GPU spans, read from a real
store's feedback and repeated finals; attempts without spans left out and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from engine.analysis.outcomes import from_store, load_jsonl, to_jsonl
from engine.analysis.report import analyze
from engine.analysis.spans import on_time, span_of
from engine.grading.api import Feedback
from storage import repeats, writes
from storage.db import open_db

HOST = "gpu-host · NVIDIA H200"
ARMS = {
    "solo_cute": "cute",
    "solo_tirx": "tirx",
    "cute2tirx_skill": "tirx",
    "tirx2cute_skill": "cute",
}
# (replicate, arm) → (passed, e2e ms, span ms or None); eager: 4.0 ms e2e, 3.0 ms span
PLAN: dict[tuple[int, str], tuple[bool, float | None, float | None]] = {
    (1, "solo_cute"): (True, 1.5, 0.6),  # its repeats' spans: 0.5, 0.7, 0.6
    (1, "solo_tirx"): (True, 2.0, 1.0),
    (1, "cute2tirx_skill"): (True, 1.0, 0.8),
    (1, "tirx2cute_skill"): (True, 1.2, 0.5),
    (2, "solo_cute"): (True, 1.6, 0.7),
    (2, "solo_tirx"): (True, 2.2, 1.1),
    (2, "cute2tirx_skill"): (True, 1.1, None),  # graded before spans were recorded
    (2, "tirx2cute_skill"): (False, None, None),  # failed: needs no span
}


def _feedback(passed: bool, e2e: float | None, span: float | None) -> dict[str, Any]:
    split: dict[str, Any] = {"source": "runner"}
    if span is not None:
        split["submission"] = {"e2e_ms": e2e, "span_ms": span, "span_calls": 50}
        split["eager"] = {"e2e_ms": 4.0, "span_ms": 3.0, "span_calls": 50}
    return Feedback(
        "pass" if passed else "fail",
        impl_median_ms=e2e,
        eager_median_ms=4.0,
        clock={"breakdown": split},
    ).to_dict()


def _repeat(db: Any, attempt: int, k: int, span: float, e2e: float) -> None:
    fb = _feedback(True, e2e, span)
    repeats.record_repeat(
        db, repeats.final_series(attempt, 1), k, fb, kind="final", problem_id="p36",
        dsl="cute", source="# solo_cute", host=HOST, experiment_id="x", attempt_id=attempt,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "spans.sqlite"
    db = open_db(path)
    writes.create_experiment(db, "x", "spans")
    for (rep, arm), (passed, e2e, span) in PLAN.items():
        attempt = writes.ensure_attempt(
            db, "x", f"{arm}:{rep}", model="m", problem_id="p36", family="MLP & Norm",
            dsl=ARMS[arm], arm=arm, replicate=rep,
        )  # fmt: skip
        writes.update_attempt(
            db, attempt, state="finished", outcome="pass" if passed else "fail", tries=1,
            impl_median_ms=e2e, eager_median_ms=4.0 if passed else None,
        )  # fmt: skip
        if arm.startswith("solo"):
            writes.add_skill(db, f"skill of {arm}", attempt_id=attempt)
        sub = writes.add_submission(db, attempt, 1, f"# {arm}", purpose="final")
        writes.finish_grading_job(
            db, writes.start_grading_job(db, sub, "test"), _feedback(passed, e2e, span)
        )
        if (rep, arm) == (1, "solo_cute"):
            for k, (s, e) in enumerate(((0.5, 1.4), (0.7, 1.5), (0.6, 1.6)), start=1):
                _repeat(db, attempt, k, s, e)
    db.conn.close()
    return path


def _rows(path: Path, time: str) -> Any:
    db = open_db(path, readonly=True)
    try:
        return from_store(db, "x", time=time)
    finally:
        db.conn.close()


def _rho(report: dict[str, Any], rep: int, direction: str) -> float:
    [c] = [c for c in report["comparisons"] if (c["replicate"], c["direction"]) == (rep, direction)]
    return float(c["rho"])


def test_spans_come_from_the_feedback_and_the_repeats_median(store: Path) -> None:
    outcomes = _rows(store, "span")
    by = {(r.replicate, r.arm, r.dsl): r for r in outcomes.rows}
    solo = by[(1, "solo", "cute")]
    assert solo.span_ms == 0.6 and solo.span_repeats_ms == (0.5, 0.7, 0.6)  # the median of 3
    assert solo.ref_span_ms == 3.0 and solo.host == HOST
    skill, spanless = by[(1, "skill", "tirx")], by[(2, "skill", "tirx")]
    assert skill.span_ms == 0.8 and skill.span_repeats_ms == ()  # its final alone
    assert spanless.span_ms is None  # reported as missing, not as e2e
    assert spanless.runtime_ms == 1.1  # its end-to-end time stays beside
    assert outcomes.series is not None
    assert [s.values_ms for s in outcomes.series] == [(0.5, 0.7, 0.6)]  # bands on spans
    assert all(r.span_ms is None for r in _rows(store, "e2e").rows)  # read only when asked


def test_every_table_is_recomputed_on_spans_and_the_missing_are_counted(store: Path) -> None:
    e2e = analyze(_rows(store, "e2e"))
    span = analyze(_rows(store, "span"))
    assert _rho(e2e, 1, "cute->tirx") == pytest.approx(2.0 / 1.0)
    assert _rho(span, 1, "cute->tirx") == pytest.approx(1.0 / 0.8)
    assert _rho(span, 1, "tirx->cute") == pytest.approx(0.6 / 0.5)
    assert _rho(span, 2, "tirx->cute") == 0.25  # a break needs no span: kept
    assert len(e2e["comparisons"]) == 4 and len(span["comparisons"]) == 3
    assert span["time"] == {
        "source": "span",
        "label": span["time"]["label"],
        "comparisons": 4,
        "with_time": 3,
        "left_out": 1,
        "attempts_left_out": 1,
    }
    assert e2e["time"]["source"] == "e2e" and e2e["time"]["left_out"] == 0
    solo = {(s["model"], s["dsl"]): s for s in span["solo"]}
    assert solo[("m", "cute")]["gm"] == pytest.approx((3.0 / 0.6 * 3.0 / 0.7) ** 0.5)
    assert span["noise"]["time"] == "span" and span["noise"]["bands"][0]["gradings"] == 3


def test_failures_stay_and_passing_attempts_without_spans_are_left_out() -> None:
    rows = parsed_rows([{"passed": True, "span_ms": None}, {"passed": False}])
    kept, missing = on_time(rows, "span")
    assert missing == 1 and len(kept) == 1 and kept[0].runtime_ms is None
    assert on_time(rows, "e2e") == (rows, 0)
    with pytest.raises(ValueError, match="time source"):
        on_time(rows, "cpu")


def parsed_rows(items: list[dict[str, Any]]) -> list[Any]:
    from engine.analysis.outcomes import parse_row

    base = {"model": "m", "problem": "p", "dsl": "cute", "arm": "solo", "runtime_ms": 1.0}
    return [parse_row({**base, "replicate": i, **x}, f"row {i}") for i, x in enumerate(items)]


@pytest.mark.parametrize(
    ("feedback", "expected"),
    [
        ({"clock": {"breakdown": {"eager": {"span_ms": 0.25}}}}, 0.25),
        ({"clock": {"breakdown": {"eager": {"span_ms": 0}}}}, None),
        ({"clock": {"breakdown": {"eager": {"span_ms": "0.25"}}}}, None),
        ({"clock": {"breakdown": {"eager": {"span_ms": float("nan")}}}}, None),
        ({"clock": {"breakdown": {"eager": None}}}, None),
        ({"clock": []}, None),
        (None, None),
    ],
)
def test_a_span_is_a_positive_finite_number_or_missing(feedback: Any, expected: Any) -> None:
    assert span_of(feedback, "eager") == expected


def test_the_cli_analyses_on_spans_and_says_how_many_comparisons_had_them(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--db", str(store), "--time", "span", "--draws", "20"]) == 0
    out = capsys.readouterr().out
    assert "Runtimes: GPU span per call (runner-reported" in out
    assert "3 of 4 resolved comparisons kept" in out and "1 passing attempts without a span" in out
    assert "Noise-aware lift (span runtimes" in out
    assert main(["analyze", "--db", str(store), "--draws", "20"]) == 0
    assert "Runtimes:" not in capsys.readouterr().out  # the default says nothing new
    assert main(["analyze", "--db", str(store), "--time", "gpu"]) == 2
    assert "--time must be one of e2e, span (got 'gpu')" in capsys.readouterr().err


def test_outcome_files_carry_spans_and_compare_uses_them(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(to_jsonl(_rows(store, "span")))
    assert load_jsonl(rows).rows[0].span_ms is not None
    argv = ["analyze", "--outcomes", str(rows), "--time", "span", "--json", "--draws", "20"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["time"]["with_time"] == 3 and report["time"]["attempts_left_out"] == 1
    assert main(["analyze", "--db", str(store), "--compare", "x", "x", "--time", "span"]) == 0
    assert "A runtimes: GPU span per call" in capsys.readouterr().out
