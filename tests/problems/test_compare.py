"""The correctness rule on scalar (0-dim) and strided outputs."""

from __future__ import annotations

import torch

from problems.compare import bit_pattern, check_leaf, check_outputs

FP8 = torch.float8_e4m3fn


def test_bit_pattern_of_zero_dim_and_strided_floats():
    scalar = torch.tensor(1.0, dtype=torch.float32)
    assert bit_pattern(scalar).tolist() == list(
        torch.tensor([1.0], dtype=torch.float32).numpy().tobytes()
    )
    strided = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    assert torch.equal(bit_pattern(strided), bit_pattern(strided.contiguous()))
    assert bit_pattern(torch.tensor(0.0)).tolist() != bit_pattern(torch.tensor(-0.0)).tolist()


def test_zero_dim_fp8_output_is_compared_bitwise():
    v = torch.tensor(0.0).to(FP8)
    same = check_leaf(0, v.clone(), v, v)
    assert same.passed and same.kind == "exact"
    # -0 equals +0 numerically but not as a bit pattern
    negative_zero = torch.tensor(-0.0).to(FP8)
    differs = check_leaf(0, negative_zero, v, v)
    assert not differs.passed and differs.detail == "1 elements differ"


def test_strided_fp8_output_is_compared_bitwise():
    v = torch.linspace(-2, 2, 12).reshape(3, 4).to(FP8)
    u = v.t().contiguous().t()  # same values, other strides
    assert check_leaf(0, u, v, v).passed
    wrong = u.clone()
    wrong[1, 2] = torch.tensor(3.0).to(FP8)
    assert not check_leaf(0, wrong, v, v).passed


def test_zero_dim_float32_output_follows_the_float_rule():
    z = torch.tensor(1.0, dtype=torch.float64) / 3
    v = z.float()
    ok, structure, results = check_outputs(
        (v.clone(), torch.tensor(7)), (v, torch.tensor(7)), (z, torch.tensor(7))
    )
    assert ok and structure is None and [r.kind for r in results] == ["float", "exact"]
    far = check_leaf(0, v + 1e-3, v, z)
    assert not far.passed and far.kind == "float"
