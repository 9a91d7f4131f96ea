"""What the p52 GEMM emulations share: the narrow-accumulator model, the check of an emulation
against the problem's reference with the judge's rule (codes and scales bit-exact), the kernel
constants read from a kernel's source, and the Blackwell (tcgen05 + TMEM) GEMM that the CuTe and
TIRx sm_100a kernels both implement."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
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


def kernel_constants(path: Path) -> dict[str, Any]:
    """The module-level constants of a kernel file (literals and simple arithmetic on them),
    read from its source so an emulation and the kernel cannot drift apart."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                try:
                    value = eval(compile(ast.Expression(node.value), "k", "eval"), {}, values)
                except Exception:  # noqa: BLE001 - not a constant
                    continue
                parts = value if isinstance(target, ast.Tuple) else [value]
                for name, part in zip(names, parts):
                    if isinstance(name, ast.Name):
                        values[name.id] = part
    return values


def tcgen05_block_sums(a: torch.Tensor, b: torch.Tensor, acc_bits: int | None) -> torch.Tensor:
    """fp32 block sums [K/128, T, T] of two code tiles [T, K] (float64 codes): per K block a
    fresh TMEM accumulator, the sum of its four k32 ``tcgen05.mma`` steps in order."""
    tile, kb = a.shape[0], a.shape[1] // GROUP
    steps = GROUP // K_STEP
    parts = torch.einsum(
        "mbsk,nbsk->bsmn",
        a.view(tile, kb, steps, K_STEP),
        b.view(b.shape[0], kb, steps, K_STEP),
    )
    blk = torch.zeros(kb, tile, b.shape[0], dtype=torch.float32)
    for step in range(steps):
        blk = truncate((blk.double() + parts[:, step]).float(), acc_bits)
    return blk


def emulate_tcgen05(
    quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    tile: int,
    x: torch.Tensor,
    w_codes: torch.Tensor,
    w_scales: torch.Tensor,
    bias: torch.Tensor,
    acc_bits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Blackwell p52 GEMMs (CuTe and TIRx alike): one CTA per ``tile`` x ``tile`` output
    tile; ``quantize(x)`` gives codes [M, K] and transposed scales ``sxT[K/128, M_pad]``
    (padding garbage); rows past M are zero codes (TMA zero fill); the promotion thread of
    tile row ``t`` (TMEM lane ``t``) does one FMA per element with the fp32 product
    ``sxT[kb, m0 + t] * w_scale[n_blk, kb]`` per K block (32-column ``tcgen05.ld`` chunks change
    nothing elementwise); then ``+ bias`` in fp32, bf16, and only rows < M are stored.
    Returns (codes, scales [M, K/128], output)."""
    m, k = x.shape
    n = w_codes.shape[0]
    codes, sxT = quantize(x)
    m_pad = sxT.shape[1]
    cx = torch.zeros(m_pad, k, dtype=torch.float64)
    cx[:m] = codes.double()
    cw = w_codes.double()
    lane = torch.arange(tile)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    for m0 in range(0, m_pad, tile):
        for n_blk in range(n // tile):
            n0 = n_blk * tile
            blks = tcgen05_block_sums(cx[m0 : m0 + tile], cw[n0 : n0 + tile], acc_bits)
            acc = torch.zeros(tile, tile, dtype=torch.float32)  # [thread, column]
            for kb in range(k // GROUP):
                s = sxT[kb, m0 + lane] * w_scales[n_blk, kb]  # fp32 multiply, one per thread
                acc = (acc.double() + blks[kb][lane].double() * s[:, None].double()).float()
            y = (acc + bias[n0 : n0 + tile].float()[None, :]).to(torch.bfloat16)
            rows = m0 + lane
            keep = rows < m  # the row guard of the epilogue's stores
            out[rows[keep], n0 : n0 + tile] = y[keep]
    return codes, sxT[:, :m].T.contiguous(), out
