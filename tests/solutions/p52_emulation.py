"""What the two p52 GEMM emulations share: the narrow-accumulator model and the check of an
emulation against the problem's reference with the judge's rule (codes and scales bit-exact)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from problems.compare import check_outputs, reference_and_anchor
from problems.quantization import _fp8
from problems.registry import get
from problems.spec import Workload

GROUP = 128
K_STEP = 32  # k of one wgmma.m64n128k32
# (tokens, in_features, out_features): the smoke shape, a mid one, the workload's full K
SHAPES = pytest.mark.parametrize(
    "shape", [(48, 512, 384), (300, 1024, 512), (37, 7680, 256)], ids=["smoke", "mid", "full_k"]
)
# fp32 block accumulation, and one that keeps 13 mantissa bits after each k32 step (Hopper's
# FP8 tensor-core accumulation is narrower than fp32)
ACC_BITS = pytest.mark.parametrize("acc_bits", [None, 13], ids=["fp32_acc", "13bit_acc"])


def truncate(x: torch.Tensor, bits: int | None) -> torch.Tensor:
    """fp32 ``x`` with its mantissa cut to ``bits`` bits (toward zero); None keeps fp32."""
    if bits is None:
        return x
    drop = 23 - bits
    return (x.view(torch.int32) & ~((1 << drop) - 1)).view(torch.float32)


def check_emulation(
    emulate: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    shape: tuple[int, int, int],
    acc_bits: int | None,
) -> None:
    """``emulate(*inputs, acc_bits=...)`` → (codes, scales [M, K/128], output) matches the
    reference: codes and scales bit for bit, the output within the judge's allowance."""
    problem = get("p52")
    m, k, n = shape
    w = Workload({"tokens": m, "in_features": k, "out_features": n, "group": GROUP})
    inputs: list[Any] = problem.module.make_inputs(0, "cpu", w)
    codes, scale, out = emulate(*inputs, acc_bits=acc_bits)
    ref_codes, ref_scale = _fp8.quantize(inputs[0].float(), (1, GROUP))
    assert torch.equal(codes.view(torch.uint8), ref_codes.view(torch.uint8))
    assert torch.equal(scale, ref_scale)
    v, z = reference_and_anchor(problem.module.reference, inputs)
    ok, structure, checks = check_outputs(out, v, z)
    assert ok, (structure, [c.as_dict() for c in checks])
