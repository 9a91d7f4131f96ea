"""Upstream's SOL-ExecBench recipes rebuilt from a dataset copy written for the test."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from problems.fidelity import FidelityOptions
from problems.fidelity_report import compare_catalog
from problems.registry import get
from problems.sol_recipes import HOLE, NAME_MARK, WORKLOAD_MARK, dataset_entries, fill, rebuild

# The dataset entry's code (written for this test): RMSNorm with our p36's epsilon.
ENTRY_CODE = """import torch

def run(hidden_states, weight):
    x = hidden_states.float()
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (x * inv * weight.float()).to(hidden_states.dtype)
"""
HEADER = '"""Fixture problem rebuilt from a recipe."""\n# Entry: {name} record {workload}\n'
TAIL = """
reference = run


def make_inputs():
    x = torch.randn(4, 128, device="cuda", dtype=torch.bfloat16)
    return [x, torch.ones(128, device="cuda", dtype=torch.bfloat16)]
"""


def _holes(code: str) -> tuple[str, int]:
    units = re.findall(r"\w+|[^\w\s]", code)
    return re.sub(r"\w+|[^\w\s]", HOLE, code), len(units)


def _write_dataset(root: Path) -> None:
    entry = root / "benchmark" / "L1" / "001_rms_norm"
    entry.mkdir(parents=True)
    (root / "benchmark" / "L2").mkdir()
    (entry / "definition.json").write_text(
        json.dumps({"name": "rms_norm", "reference": ENTRY_CODE})
    )
    (entry / "workload.jsonl").write_text('{"uuid": "aaa"}\n{"uuid": "bbb"}\n')


def _write_recipe(upstream: Path, sha: str | None = None) -> str:
    body, count = _holes(ENTRY_CODE)
    layout = HEADER.format(name=NAME_MARK, workload=WORKLOAD_MARK) + body + TAIL
    expected = HEADER.format(name="rms_norm", workload="bbb") + ENTRY_CODE + TAIL
    recipe = {
        "problem": "36_rms_norm_fixture",
        "category": "mlp_norm",
        "subset": "L1",
        "row": 0,
        "workload": 1,
        "layout": layout,
        "runs": [[0, count]],
        "sha256": sha or hashlib.sha256(expected.encode()).hexdigest(),
    }
    folder = upstream / "problems" / "_sol_execbench"
    folder.mkdir(parents=True)
    (folder / "36_rms_norm_fixture.json").write_text(json.dumps(recipe))
    return expected


def test_fill_rebuilds_the_recorded_text(tmp_path):
    _write_dataset(tmp_path / "data")
    expected = _write_recipe(tmp_path / "up")
    entries = dataset_entries(tmp_path / "data")
    assert entries[("L1", 0)].workload_ids == ("aaa", "bbb")
    recipe = json.loads(
        (tmp_path / "up/problems/_sol_execbench/36_rms_norm_fixture.json").read_text()
    )
    assert fill(recipe, entries[("L1", 0)]) == expected
    written, errors = rebuild(tmp_path / "up" / "problems", tmp_path / "data", tmp_path / "out")
    assert errors == {} and written["p36"].read_text() == expected


def test_digest_mismatch_is_an_error_not_a_file(tmp_path):
    _write_dataset(tmp_path / "data")
    _write_recipe(tmp_path / "up", sha="0" * 64)
    written, errors = rebuild(tmp_path / "up" / "problems", tmp_path / "data", tmp_path / "out")
    assert written == {} and "sha256" in errors["p36"]


def test_compare_uses_rebuilt_problems_only_with_a_dataset(tmp_path):
    _write_dataset(tmp_path / "data")
    _write_recipe(tmp_path / "up")
    (tmp_path / "up" / "problems" / "attention").mkdir()
    opts = FidelityOptions(device="cpu", seed=1, budget_gb=0.01)
    without = compare_catalog([get("p36")], tmp_path / "up", None, opts)
    assert without[0].verdict == "no upstream" and "--sol-execbench" in without[0].interface
    rows = compare_catalog([get("p36")], tmp_path / "up", tmp_path / "data", opts)
    assert rows[0].source == "sol-execbench" and rows[0].verdict == "same", rows[0]
