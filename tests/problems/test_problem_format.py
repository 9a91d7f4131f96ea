"""Malformed problem modules are rejected with a ProblemFormatError that names the file."""

from __future__ import annotations

import pytest

from problems.registry import load_problem
from problems.spec import ProblemFormatError


def test_toy_problem_is_valid(write_problem):
    problem = load_problem(write_problem())
    assert problem.id == "p28"
    assert problem.inputs == ("x", "residual", "weight")
    assert problem.workload.rows == 16


BAD_CASES = {
    "missing reference": ({"def reference(": "def reference_typo("}, "reference()"),
    "missing cost": ({"def cost(w):": "def costs(w):"}, "cost()"),
    "short docstring": (
        {
            "Toy fused residual add and RMSNorm for the validator tests.\n": "Toy.\n",
            "Add the residual to bfloat16 rows, normalise each row by its root mean square "
            "(epsilon 1e-5)\nand scale by a weight.": "",
        },
        "docstring",
    ),
    "bad id": ({'ID = "p28"': 'ID = "p99"'}, "ID"),
    "bad slug": ({'SLUG = "toy_add_rmsnorm"': 'SLUG = "Toy-Add"'}, "SLUG"),
    "file name mismatch": ({'SLUG = "toy_add_rmsnorm"': 'SLUG = "other_name"'}, "file name"),
    "unknown family": ({'FAMILY = "MLP & Norm"': 'FAMILY = "Norms"'}, "FAMILY"),
    "family not the folder's": ({'FAMILY = "MLP & Norm"': 'FAMILY = "MoE"'}, "folder"),
    "unknown origin": ({'ORIGIN = "flashinfer"': 'ORIGIN = "github"'}, "ORIGIN"),
    "empty source": ({'SOURCE = "tests/problems/conftest.py"': 'SOURCE = ""'}, "SOURCE"),
    "smoke keys differ": (
        {'SMOKE = {"rows": 16, "hidden": 256}': 'SMOKE = {"rows": 16}'},
        "SMOKE",
    ),
    "workload not a dict": (
        {'WORKLOAD = {"rows": 16, "hidden": 256}': "WORKLOAD = [16, 256]"},
        "WORKLOAD",
    ),
    "inputs not a tuple": (
        {'INPUTS = ("x", "residual", "weight")': 'INPUTS = ["x", "residual", "weight"]'},
        "INPUTS",
    ),
    "duplicate output names": ({'OUTPUTS = ("out",)': 'OUTPUTS = ("out", "out")'}, "OUTPUTS"),
    "inplace names unknown": ({"INPLACE = {}": 'INPLACE = {"out": "cache"}'}, "INPLACE"),
    "margin missing": ({"DECISION_MARGIN = None": ""}, "DECISION_MARGIN"),
    "margin negative": ({"DECISION_MARGIN = None": "DECISION_MARGIN = -1.0"}, "DECISION_MARGIN"),
    "import fails": ({"import torch\n": "import torch\nimport not_a_module_xyz\n"}, "import"),
    "syntax error": ({"def cost(w):": "def cost(w)"}, "import failed"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_malformed_module_names_file_and_reason(write_problem, case):
    replacements, fragment = BAD_CASES[case]
    path = write_problem(replacements)
    with pytest.raises(ProblemFormatError) as info:
        load_problem(path)
    assert str(path) in str(info.value)
    assert fragment in info.value.reason
