"""`mkb analyze` and `mkb power` on a store graded in preview with repeated finals: the
noise-aware table and the bands (labelled PREVIEW) in text, JSON and CSV; the power plan in
under 2 s."""

from __future__ import annotations

import asyncio
import csv
import json
import time
from pathlib import Path

import pytest

from app.cli import main
from engine.config import parse_config

PILOT = """
[experiment]
name = "pilot"
problems = ["p28", "p36"]
replicates = 3
agent = "simulated"
grading = "simulated"
max_submissions = 0

[agent]
blank_skill_rate = 0.0
final_runtime_ms = 1.0
skill_runtime_factor = { p36 = 0.9 }

[grading]
final_repeats = 3
noise_cv = { default = 0.05 }

[[models]]
name = "sim/a"
"""

PLAN = """
[experiment]
name = "plan"
problems = ["p28", "p36", "p02"]
replicates = 4

[[models]]
name = "sim/a"

[[models]]
name = "sim/c"

[grading]
final_repeats = 3
"""


@pytest.fixture(scope="module")
def pilot_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.factory import make_backend, make_runner
    from engine.scheduler import Engine
    from storage.store import Store

    db = tmp_path_factory.mktemp("pilot") / "pilot.sqlite"
    config = parse_config(PILOT, check_problems=False)
    with Store(db) as store:
        asyncio.run(Engine(store, config, make_runner(config), make_backend(config)).run())
    return db


@pytest.mark.slow
def test_analyze_prints_the_noise_aware_table_labelled_preview(
    pilot_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--db", str(pilot_db), "--draws", "50"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Noise-aware lift") :]
    assert section.splitlines()[0].endswith("[PREVIEW: CPU-graded, not comparable]")
    assert "T>n" in section and "~n" in section
    bands = out[out.index("A/A bands per problem") :]
    assert "p28" in bands and "simulated (preview)" in bands and "PREVIEW" in bands
    assert main(["analyze", "--db", str(pilot_db), "--json", "--draws", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    bands_json = report["noise"]["bands"]  # one per problem and DSL on the one host
    assert report["noise"]["time"] == "e2e" and len(bands_json) == 4
    assert {b["dsl"] for b in bands_json} == {"cute", "tirx"}
    assert all(b["dof"] == 3 * 2 * 2 for b in bands_json)
    assert {c["noise"] for c in report["comparisons"]} <= {"help", "harm", "within"}
    assert main(["analyze", "--db", str(pilot_db), "--csv", str(tmp_path), "--draws", "50"]) == 0
    with (tmp_path / "noise_lift.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {"help_beyond_noise", "within_noise", "strict_help_within_noise"} <= set(
        rows[0]
    )
    assert all(r["grading"].startswith("PREVIEW") for r in rows)
    assert (tmp_path / "noise_bands.csv").exists()
    assert main(["analyze", "--db", str(pilot_db), "--time", "host"]) == 2
    capsys.readouterr()
    # the simulated grader reports no spans: on spans every passing attempt is left out
    assert main(["analyze", "--db", str(pilot_db), "--time", "span", "--json"]) == 0
    on_spans = json.loads(capsys.readouterr().out)["time"]
    assert on_spans["source"] == "span" and on_spans["attempts_left_out"] > 0
    assert on_spans["left_out"] == on_spans["comparisons"] - on_spans["with_time"] > 0


@pytest.mark.slow
@pytest.mark.serial  # a wall-clock bound (2 s): alone, not beside another worker
def test_mkb_power_answers_from_a_pilot_store_in_under_two_seconds(
    pilot_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "plan.toml"
    config.write_text(PLAN)
    started = time.perf_counter()
    assert main(["power", str(config), "--from", str(pilot_db), "--lift", "10"]) == 0
    elapsed = time.perf_counter() - started
    out = capsys.readouterr().out
    assert elapsed < 2.0, f"{elapsed:.2f} s"
    assert "Power plan from pilot pilot" in out and "PREVIEW pilot" in out
    assert "sim/c" in out and "0.0" in out  # a model without pilot data: pooled sigma_b (*)
    assert "Per comparison on each band's host" in out and "k for 1.1x" in out
    assert main(["power", str(config), "--from", str(pilot_db), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    per = result["per_comparison"]  # one row per known band: CV 5 %, 12 dof
    assert len(per) == 4 and {b["dsl"] for b in per} == {"cute", "tirx"}
    for b in per:
        assert b["pairs"] == 3 and b["detect_0.3"] > b["detect_0.1"]
        assert b["pairs_for_0.1"] >= b["pairs_for_0.3"] >= 2
    assert result["repeats"] == 3 and result["pilot_comparisons"] == 12
    assert all(len(c["lifts"]) == 2 for c in result["cells"])
    pooled = [c for c in result["cells"] if c["model"] == "sim/c"]
    assert pooled and all(c["sigma_between_from"] == "pooled" for c in pooled)
    assert main(["power", str(config), "--from", str(pilot_db), "--pilot", "nope"]) == 2
    assert main(["power", str(config), "--from", str(pilot_db), "--lift", "-5"]) == 2
