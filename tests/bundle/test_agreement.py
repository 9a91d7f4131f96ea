"""The agreement report's figures, and `mkb analyze --compare` on two stored experiments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from bundle_support import build_store

from app.cli import main
from engine.bundle.agreement import Pair, agreement


def _pair(
    problem: str,
    old: tuple[str, str | None, float | None],
    new: tuple[str, str | None, float | None] | None,
    n: int = 1,
) -> Pair:
    label = {
        "model": "m",
        "problem": problem,
        "dsl": "cute",
        "arm": "solo_cute",
        "replicate": n,
        "purpose": "final",
        "n": 1,
    }
    fb = lambda v: {"verdict": v[0], "reason": v[1], "speedup": v[2]}  # noqa: E731
    return Pair(
        label,
        fb(old),
        None if new is None else fb(new),
        None if new is not None else "this catalog's problem source differs",
    )


def test_changed_verdicts_are_listed_with_both_reasons() -> None:
    pairs = [
        _pair("p28", ("pass", None, 2.0), ("pass", None, 1.0), 1),
        _pair("p28", ("pass", None, 4.0), ("fail", "correctness.tolerance", None), 2),
        _pair(
            "p36", ("fail", "rule.other_language", None), ("fail", "rule.other_language", None), 1
        ),
        _pair("p36", ("pass", None, 3.0), None, 2),
    ]
    report = agreement(
        pairs,
        original_preview=False,
        regrade_preview=False,
        original_devices=["NVIDIA H200"],
        regrade_device="NVIDIA H200",
    )
    v = report["verdicts"]
    assert (v["compared"], v["agree"]) == (3, 2) and v["agreement"] == pytest.approx(2 / 3)
    assert v["changed"] == [
        {
            **pairs[1].label,
            "original": {"verdict": "pass", "reason": None},
            "regraded": {"verdict": "fail", "reason": "correctness.tolerance"},
        }
    ]
    assert v["not_regraded"][0]["why"].startswith("this catalog's problem source")
    s = report["speedups"]
    assert s["n"] == 1 and s["per_problem"] == [
        {"problem": "p28", "n": 1, "mean_log_ratio": math.log(0.5), "ratio": 0.5}
    ]
    assert report["speedups_comparable"]


def test_preview_passes_agree_with_preview_and_speedups_rank() -> None:
    olds, news = [1.0, 2.0, 3.0, 4.0], [1.1, 1.9, 3.5, 3.9]
    pairs = [
        _pair(f"p{i}", ("preview", None, o), ("preview", None, n))
        for i, (o, n) in enumerate(zip(olds, news, strict=True))
    ]
    report = agreement(
        pairs,
        original_preview=True,
        regrade_preview=True,
        original_devices=["cpu (preview)"],
        regrade_device="cpu (preview)",
    )
    assert report["verdicts"]["agreement"] == 1.0 and report["verdicts"]["changed"] == []
    assert report["speedups"]["spearman"] == pytest.approx(1.0)
    gpu_vs_cpu = agreement(
        pairs,
        original_preview=False,
        regrade_preview=True,
        original_devices=["NVIDIA H200"],
        regrade_device="cpu (preview)",
    )
    assert not gpu_vs_cpu["speedups_comparable"] and "CPU preview" in gpu_vs_cpu["speedups_note"]


def test_analyze_compare_shows_both_experiments(
    graded_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_store(graded_db, experiment_id="bt2", name="bundle-test-2", wrong_arm="solo_tirx")
    assert (
        main(["analyze", "--db", str(graded_db), "--compare", "bt", "bt2", "--draws", "100"]) == 0
    )
    text = capsys.readouterr().out
    assert "A: bt (bundle-test)" in text and "B: bt2 (bundle-test-2)" in text
    solo = next(
        line
        for line in text.splitlines()
        if "openai/test-model" in line and " tirx " in line and "%" in line
    )
    assert "100.0%" in solo and "0.0%" in solo  # A passes its tirx solo, B fails it
    assert (
        main(
            [
                "analyze",
                "--db",
                str(graded_db),
                "--compare",
                "bt",
                "bt2",
                "--json",
                "--draws",
                "100",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    row = next(r for r in data["solo"] if r["dsl"] == "tirx")
    assert row["a"]["pass_rate"] == 1.0 and row["b"]["pass_rate"] == 0.0
    assert main(["analyze", "--db", str(graded_db), "--compare", "bt", "missing"]) == 2
