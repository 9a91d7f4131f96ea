"""CPU emulation of problems/solutions/p72_cute.py's per-thread arithmetic (the
DSL is not imported; running the kernel needs a GPU), checked against the problem's reference
and anchor with the judge's rule.

Gates as the kernel computes them: in float64 from the raw inputs (``a + dt_bias``, softplus
with threshold 20, ``exp(-exp(A_log) * sp)``, ``1 / (1 + exp(-b))``), rounded once to float32.
State update per (batch, head, row) as lane ``l`` of the row's warp does it on columns
``4l .. 4l+3``, in the order of the sm_90a PTX: ``gs = g * S`` (mul.f32);
``acc = fma(k_i, gs_i, acc)`` from 0 in column order; butterfly shuffle sum (offsets 16, 8, 4,
2, 1); ``delta = beta * (v - v_old)``; ``S' = fma(k_i, delta, gs_i)``; ``acc2 = fma(q_i, S'_i,
acc2)`` from 0; butterfly sum; ``scale * o`` in float32, rounded to bf16. An FMA is emulated
as the exact float32 product plus the addend in float64, rounded to float32 (the double
rounding can differ from a true FMA only in a tie, ~2^-29 of the time)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from problems.compare import check_outputs, reference_and_anchor
from problems.registry import get
from problems.spec import Workload

LANES = 32
VEC = 4
SOFTPLUS_THRESHOLD = 20.0


def gates(A_log, a, dt_bias, b) -> tuple[torch.Tensor, torch.Tensor]:
    """g and beta [B, Hv] float32: float64 arithmetic, one rounding (warps 0 and 1)."""
    x = a[:, 0].double() + dt_bias.double()
    sp = torch.where(x > SOFTPLUS_THRESHOLD, x, torch.log1p(torch.exp(x)))
    g = torch.exp(-(torch.exp(A_log.double()) * sp))
    beta = 1.0 / (1.0 + torch.exp(-b[:, 0].double()))
    return g.float(), beta.float()


def fma(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """float32 ``x * y + z`` with one rounding (the product of two floats is exact in float64)."""
    return (x.double() * y.double() + z.double()).float()


def warp_sum(x: torch.Tensor) -> torch.Tensor:
    """``cute.arch.warp_reduction_sum`` over the last dim (32 lanes): ``val + shfl_bfly(val)``
    for offsets 16, 8, 4, 2, 1; every lane ends with the same value, lane 0's is returned."""
    lane = torch.arange(LANES)
    for offset in (16, 8, 4, 2, 1):
        x = x + x[..., lane ^ offset]
    return x[..., 0]


def emulate(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    hk, hv = q.shape[2], v.shape[2]
    g, beta = gates(A_log, a, dt_bias, b)  # [B, Hv]
    # per (batch, value head): its q/k head's 4 columns per lane, [B, Hv, 1, lane, i]
    kf = k[:, 0].float().repeat_interleave(hv // hk, dim=1).view(*g.shape, 1, LANES, VEC)
    qf = q[:, 0].float().repeat_interleave(hv // hk, dim=1).view(*g.shape, 1, LANES, VEC)
    vf = v[:, 0].float()  # [B, Hv, rows]
    S = state.view(*g.shape, state.shape[2], LANES, VEC)  # [B, Hv, row, lane, i]
    gs = g[..., None, None, None] * S
    zero = torch.zeros(S.shape[:-1])
    acc = zero
    for i in range(VEC):
        acc = fma(kf[..., i], gs[..., i], acc)
    v_old = warp_sum(acc)  # [B, Hv, row]
    delta = beta[..., None] * (vf - v_old)
    sn = torch.empty_like(S)
    acc2 = zero
    for i in range(VEC):
        sn[..., i] = fma(kf[..., i], delta[..., None], gs[..., i])
        acc2 = fma(qf[..., i], sn[..., i], acc2)
    o = warp_sum(acc2)
    scale32 = torch.tensor(scale, dtype=torch.float32)
    out = (scale32 * o).to(torch.bfloat16)
    return out.unsqueeze(1), sn.view(state.shape)


# (batch, seed): the problem's smoke shape, and a larger batch
CASES = pytest.mark.parametrize("batch,seed", [(None, 0), (16, 1)], ids=["smoke", "batch16"])


@CASES
def test_emulation_matches_reference(batch: int | None, seed: int) -> None:
    problem = get("p72")
    w = problem.smoke if batch is None else Workload({**problem.smoke, "batch": batch})
    inputs: list[Any] = problem.module.make_inputs(seed, "cpu", w)
    out = emulate(*inputs)
    v, z = reference_and_anchor(problem.module.reference, inputs)
    ok, structure, checks = check_outputs(out, v, z)
    assert ok, (structure, [c.as_dict() for c in checks])


def test_gates_are_the_rounded_anchor_gates() -> None:
    """The kernel's g and beta are the anchor's float64 gates rounded once to float32."""
    problem = get("p72")
    q, k, v, state, A_log, a, dt_bias, b, scale = problem.module.make_inputs(
        0, "cpu", problem.smoke
    )
    g, beta = gates(A_log, a, dt_bias, b)
    g64, beta64 = problem.module.gates(A_log, a, dt_bias, b, torch.float64)
    assert torch.equal(g, g64[:, 0].float())
    assert torch.equal(beta, beta64[:, 0].float())
