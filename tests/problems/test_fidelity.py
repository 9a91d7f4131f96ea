"""`mkb problems compare`: our references against fixture files in upstream's layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.cli import main
from problems.fidelity import FidelityOptions, RunResult, compare_problem, overall
from problems.fidelity_report import compare_catalog, format_csv, format_markdown
from problems.registry import get
from problems.upstream import DeviceRedirect, load_upstream, upstream_files, upstream_inputs

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
SMALL = FidelityOptions(device="cpu", seed=3, budget_gb=0.01)  # our draws at smoke scale


def _row(pid: str, opts: FidelityOptions = SMALL):
    return compare_problem(
        get(pid), load_upstream(upstream_files(FIXTURES)[pid]), "upstream file", opts
    )


def test_upstream_layout_maps_numbers_to_our_ids():
    files = upstream_files(FIXTURES)
    assert sorted(files) == ["p28", "p31", "p36"]
    assert upstream_files(FIXTURES / "problems") == files


def test_device_redirect_moves_cuda_draws_to_cpu():
    module = load_upstream(upstream_files(FIXTURES)["p28"])
    inputs = upstream_inputs(module, 5, "cpu")
    assert [x.device.type for x in inputs] == ["cpu"] * 3
    assert torch.equal(inputs[0], upstream_inputs(module, 5, "cpu")[0])
    with DeviceRedirect("cpu"):
        assert torch.zeros(2, device="cuda").device.type == "cpu"
        assert torch.ones(1).to("cuda").device.type == "cpu"


@pytest.mark.slow
def test_same_when_the_maths_agree_with_both_generators():
    row = _row("p28")
    assert row.verdict == "same", row
    assert [r.generator for r in row.runs] == ["ours", "upstream"]
    assert all(r.verdict == "same" and r.max_error <= r.allowance for r in row.runs)
    assert row.runs[0].scale == "smoke"


def test_differs_reports_error_against_our_allowance():
    row = _row("p36")
    assert row.verdict == "differs"
    assert all(r.verdict == "differs" and r.max_error > r.allowance for r in row.runs)
    assert "exceeds allowance" in row.runs[0].detail


def test_interface_differs_on_argument_count():
    row = _row("p31")
    assert row.verdict == "interface differs"
    assert "upstream 4" in row.interface and "'eps'" in row.interface


def test_heavy_upstream_draw_is_skipped_and_says_so():
    row = _row("p28", FidelityOptions(device="cpu", seed=3, budget_gb=1e-6))
    theirs = row.runs[1]
    assert theirs.verdict == "skipped" and "too heavy for cpu" in theirs.detail
    assert row.runs[0].verdict == "same" and row.verdict == "same"


def test_output_structure_difference_is_an_interface_difference(tmp_path):
    text = (FIXTURES / "problems/mlp_norm/28_fixture_add_rmsnorm.py").read_text()
    folder = tmp_path / "problems" / "mlp_norm"
    folder.mkdir(parents=True)
    path = folder / "28_tuple.py"
    path.write_text(
        text.replace(
            "return (s * scale * weight.float()).to(hidden_states.dtype)",
            "return ((s * scale * weight.float()).to(hidden_states.dtype),)",
        )
    )
    row = compare_problem(get("p28"), load_upstream(path), "upstream file", SMALL)
    assert row.verdict == "interface differs"
    assert "values agree" in row.runs[0].detail and "got builtins.tuple" in row.runs[0].detail


def test_a_raising_reference_is_an_error_row(tmp_path):
    folder = tmp_path / "problems" / "mlp_norm"
    folder.mkdir(parents=True)
    path = folder / "36_broken.py"
    path.write_text(
        (FIXTURES / "problems/mlp_norm/36_fixture_rmsnorm_large_eps.py")
        .read_text()
        .replace("x = hidden_states.float()", "raise RuntimeError('boom')")
    )
    row = compare_problem(get("p36"), load_upstream(path), "upstream file", SMALL)
    assert row.verdict == "error" and "boom" in row.runs[0].detail


def test_overall_verdict_ranks_runs():
    same, differs = RunResult("ours", "same"), RunResult("upstream", "differs")
    skipped = RunResult("upstream", "skipped")
    assert overall([same, differs], "") == "differs"
    assert overall([same, skipped], "") == "same"
    assert overall([skipped, skipped], "") == "skipped"
    assert overall([same, same], "argument names: x→y") == "interface differs"


def test_catalog_rows_and_exports_cover_missing_problems():
    rows = compare_catalog([get("p28"), get("p25")], FIXTURES, None, SMALL)
    assert [(r.id, r.verdict) for r in rows] == [("p25", "no upstream"), ("p28", "same")]
    assert format_markdown(rows).splitlines()[0].startswith("| id | slug | verdict")
    assert format_csv(rows).splitlines()[2].startswith("p28,fused_add_rmsnorm")


@pytest.mark.slow
def test_cli_exports_json(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    code = main(
        [
            "problems",
            "compare",
            "p36",
            "p28",
            "--upstream",
            str(FIXTURES),
            "--budget-gb",
            "0.01",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out.read_text())}
    assert rows["p36"]["verdict"] == "differs" and rows["p28"]["verdict"] == "same"
    assert "2 problems:" in capsys.readouterr().out
    assert main(["problems", "compare", "--upstream", str(tmp_path / "nope")]) == 2
