"""The validator passes good problems and names the check that a broken problem fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from problems import check
from problems.check import CheckOptions, check_problem
from problems.registry import load_problem, problem_files

FAST = CheckOptions(draws=3, discrete_draws=6)


def _failed_checks(report):
    return {c.name for c in report.failures()}


def test_toy_problem_passes_every_check(write_problem):
    report = check_problem(load_problem(write_problem()), FAST)
    assert report.passed, [c.as_dict() for c in report.failures()]
    assert {c.name for c in report.checks} == set(check.CHECK_NAMES)
    mutants = next(c for c in report.checks if c.name == "mutants")
    # bf16 intermediates are within a bf16 output's 3-ulp floor: reported, not required
    assert "not applicable: bf16_accumulation" in mutants.detail
    assert "dropped_term" in mutants.detail.split(";")[0]


@pytest.mark.slow
def test_p28_passes():
    path = next(p for p in problem_files() if p.name.startswith("p28_"))
    report = check_problem(load_problem(path), CheckOptions())
    assert report.passed, [c.as_dict() for c in report.failures()]


BROKEN = {
    # hard-coded float32 compute and bfloat16 output: the anchor is not float64
    "not dtype-generic": (
        {
            "    dt = compute_dtype(x, residual, weight)\n    s = x.to(dt) + residual.to(dt)": (
                "    dt = torch.float32\n    s = x.to(dt) + residual.to(dt)"
            ),
            "    return y.to(x.dtype)\n\n\ndef dropped_term": (
                "    return y.to(torch.bfloat16)\n\n\ndef dropped_term"
            ),
        },
        {"anchor_float64"},
    ),
    # the reference returns another structure when given float64 inputs
    "anchor structure differs": (
        {
            "    return y.to(x.dtype)\n\n\ndef dropped_term": (
                "    return (y,) if x.dtype == torch.float64 else y.to(x.dtype)\n"
                "\n\ndef dropped_term"
            )
        },
        {"dtype_generic"},
    ),
    # draws without the seeded generator
    "non-deterministic generator": (
        {
            "    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)\n": (
                "    x = torch.randn(w.rows, w.hidden, device=device).to(torch.bfloat16)\n"
            )
        },
        {"deterministic"},
    ),
    # declares two outputs but returns one tensor
    "outputs not as declared": (
        {'OUTPUTS = ("out",)': 'OUTPUTS = ("out", "rms")'},
        {"declared_outputs"},
    ),
    # silently updates an input that INPLACE does not declare
    "undeclared in-place update": (
        {
            "    s = x.to(dt) + residual.to(dt)\n    y = s * torch": (
                "    s = x.to(dt) + residual.to(dt)\n    residual.zero_()\n    y = s * torch"
            )
        },
        {"declared_outputs"},
    ),
    # catastrophic cancellation: eager loses the residual that the anchor keeps
    "non-discriminative tolerance": (
        {
            "    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.to(dt)\n"
            "    return y.to(x.dtype)\n\n\ndef dropped_term": (
                "    big = x.to(dt) * 1e9\n    y = (big + residual.to(dt)) - big\n"
                "    return y.to(x.dtype)\n\n\ndef dropped_term"
            )
        },
        {"discriminative"},
    ),
    # the "dropped term" mutant is the reference itself, so it cannot fail
    "mutant that passes": (
        {
            "    dt = compute_dtype(x, weight)\n    s = x.to(dt)\n": (
                "    dt = compute_dtype(x, weight)\n    s = x.to(dt) + residual.to(dt)\n"
            )
        },
        {"mutants"},
    ),
    # the reference raises: every check that needs its outputs fails
    "reference crashes": (
        {
            "    return y.to(x.dtype)\n\n\ndef dropped_term": (
                "    raise RuntimeError('boom')\n\n\ndef dropped_term"
            )
        },
        {"anchor_float64", "declared_outputs", "mutants"},
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_problem_fails_the_right_check(write_problem, case):
    replacements, expected = BROKEN[case]
    report = check_problem(load_problem(write_problem(replacements)), FAST)
    assert not report.passed
    assert expected <= _failed_checks(report), [c.as_dict() for c in report.failures()]


def test_fp32_reference_without_float64_anchor_fails(write_problem):
    """An fp32 problem whose reference hard-codes float32 has a zero reference error."""
    path = write_problem(
        {
            "    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)\n": (
                "    x = randn(g, (w.rows, w.hidden), torch.float32, device)\n"
            ),
            "    dt = compute_dtype(x, residual, weight)\n    s = x.to(dt) + residual.to(dt)": (
                "    dt = torch.float32\n    s = x.to(dt) + residual.to(dt)"
            ),
        }
    )
    report = check_problem(load_problem(path), FAST)
    failed = _failed_checks(report)
    assert "anchor_float64" in failed
    detail = next(c.detail for c in report.checks if c.name == "anchor_float64")
    assert "reference error" in detail


def test_bf16_mutant_rejected_for_fp32_outputs(write_problem):
    path = write_problem(
        {
            "    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)\n": (
                "    x = randn(g, (w.rows, w.hidden), torch.float32, device)\n"
            ),
            "    r = randn(g, (w.rows, w.hidden), torch.bfloat16, device)\n": (
                "    r = randn(g, (w.rows, w.hidden), torch.float32, device)\n"
            ),
        }
    )
    report = check_problem(load_problem(path), FAST)
    assert report.passed, [c.as_dict() for c in report.failures()]
    mutants = next(c for c in report.checks if c.name == "mutants")
    rejected = mutants.detail.split(";")[0]
    assert "bf16_accumulation" in rejected and "dropped_term" in rejected


def test_exact_copy_outputs_exempt_zero_error(write_problem):
    copy = {
        "    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.to(dt)\n"
        "    return y.to(x.dtype)\n\n\ndef dropped_term": (
            "    return x.clone()\n\n\ndef dropped_term"
        ),
    }
    undeclared = check_problem(load_problem(write_problem(copy)), FAST)
    assert "anchor_float64" in _failed_checks(undeclared)
    declared = dict(copy)
    declared["DECISION_MARGIN = None"] = 'DECISION_MARGIN = None\nEXACT_COPY_OUTPUTS = ("out",)'
    report = check_problem(load_problem(write_problem(declared)), FAST)
    assert "anchor_float64" not in _failed_checks(report)
    bad = {"DECISION_MARGIN = None": 'DECISION_MARGIN = None\nEXACT_COPY_OUTPUTS = ("nope",)'}
    assert "anchor_float64" in _failed_checks(check_problem(load_problem(write_problem(bad)), FAST))


def test_discrete_disagreement_is_reported(write_problem):
    """Flooring on a fine grid without a margin: float32 and float64 round differently."""
    floor = "torch.floor(y * 2**20).to(torch.int64)"
    path = write_problem(
        {
            'OUTPUTS = ("out",)': 'OUTPUTS = ("out", "grid")',
            "    return y.to(x.dtype)\n\n\ndef dropped_term": (
                f"    return y.to(x.dtype), {floor}\n\n\ndef dropped_term"
            ),
            "    return y.to(x.dtype)\n\n\ndef cost": (
                f"    return y.to(x.dtype), {floor}\n\n\ndef cost"
            ),
        }
    )
    report = check_problem(load_problem(path), FAST)
    assert "discrete_agree" in _failed_checks(report)
    detail = next(c.detail for c in report.checks if c.name == "discrete_agree")
    assert "grid" in detail and "differ" in detail


@pytest.mark.slow
def test_cli_json_and_exit_codes(write_problem, capsys):
    good, bad = write_problem(), write_problem({'OUTPUTS = ("out",)': 'OUTPUTS = ("a", "b")'})
    assert check.main([str(good), "--json", "--discrete-draws", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["id"] == "p28" and data[0]["passed"] is True
    assert {c["name"] for c in data[0]["checks"]} == set(check.CHECK_NAMES)
    assert all(set(c) == {"name", "passed", "detail"} for c in data[0]["checks"])
    assert check.main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "declared_outputs" in out
    assert check.main(["no_such_problem_xyz"]) == 2


def test_load_error_is_reported_and_others_still_checked(write_problem, capsys):
    broken = write_problem({"def cost(w):": "def costs(w):"})
    good = write_problem()
    assert check.main([str(broken), str(good), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [r["passed"] for r in data] == [False, True]
    assert "cost()" in data[0]["error"] and Path(data[0]["id"]).name == "p28"


@pytest.mark.gpu
def test_cuda_check_records_eager_and_anchor_times():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = next(p for p in problem_files() if p.name.startswith("p28_"))
    report = check_problem(load_problem(path), CheckOptions(device="cuda"))
    assert report.passed, [c.as_dict() for c in report.failures()]
    assert report.eager_ms is not None and report.eager_ms > 0
    assert report.anchor_ms is not None and report.anchor_ms > 0
    assert {"eager_ms", "anchor_ms"} <= set(report.as_dict())


# The toy problem with a 0-dim float32 input (a scalar scale) multiplied into the output.
ZERO_DIM_INPUT = {
    'INPUTS = ("x", "residual", "weight")': 'INPUTS = ("x", "residual", "weight", "scale")',
    "    return [x, r, weight]\n": (
        "    scale = randn(g, (), torch.float32, device, std=0.1, mean=1.0)\n"
        "    return [x, r, weight, scale]\n"
    ),
    "def reference(x, residual, weight):": "def reference(x, residual, weight, scale):",
    "def dropped_term(x, residual, weight):": "def dropped_term(x, residual, weight, scale):",
    "* weight.to(dt)\n    return y.to(x.dtype)\n\n\ndef dropped_term": (
        "* weight.to(dt) * scale.to(dt)\n    return y.to(x.dtype)\n\n\ndef dropped_term"
    ),
}


def test_zero_dim_float_input_is_compared(write_problem):
    """0-dim float inputs go through the bitwise input comparisons without raising."""
    report = check_problem(load_problem(write_problem(ZERO_DIM_INPUT)), FAST)
    assert report.passed, [c.as_dict() for c in report.failures()]
    mutating = dict(ZERO_DIM_INPUT)
    mutating["* weight.to(dt)\n    return y.to(x.dtype)\n\n\ndef dropped_term"] = (
        "* weight.to(dt) * scale.to(dt)\n    scale.add_(1.0)\n    return y.to(x.dtype)\n"
        "\n\ndef dropped_term"
    )
    broken = check_problem(load_problem(write_problem(mutating)), FAST)
    detail = next(c.detail for c in broken.checks if c.name == "declared_outputs")
    assert "declared_outputs" in _failed_checks(broken) and "'scale'" in detail, detail
