"""Backward pass of a fused residual add + RMSNorm (Qwen3-4B, 2,560 channels). Forward (saved
by the caller): s = hidden + residual, rstd = 1/sqrt(mean(s²) + eps), n = s·rstd, y = n·w. Given
the bfloat16 upstream gradient dy [batch, seq, 2560] and the saved float32 n and rstd
[batch, seq, 1] and float32 weight w, compute ds = rstd·(g − n·mean(g·n)) with g = dy·w, returned
twice in bfloat16 (as the gradient of hidden_states and of residual, which receive the same
gradient), and the float32 weight gradient Σ dy·n over all tokens. Memory-bound over a large
token count."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p38"
SLUG = "residual_rmsnorm_backward_qwen3_4b_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/013_fused_residual_rms_norm_backward (task #13), "
    "workload record 1"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "The saved n and rstd come from a real forward pass on a drawn float32 sum s (eps 1e-6). The "
    "upstream input x (the pre-norm sum) is dropped because the backward never reads it; the "
    "weight is drawn as 1 + 0.1·N(0, 1) instead of ones. The largest record (1.34G elements): "
    "one draw (inputs, reference, float64 anchor) peaked at 63 GB on an H200."
)
WORKLOAD = {"batch": 64, "seq": 8192, "hidden": 2560, "eps": 1e-6}
SMOKE = {"batch": 2, "seq": 40, "hidden": 2560, "eps": 1e-6}
INPUTS = ("grad_output", "normalized", "rstd", "weight")
OUTPUTS = ("grad_hidden_states", "grad_residual", "grad_weight")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    dy = randn(g, (w.batch, w.seq, w.hidden), torch.bfloat16, device)
    s = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    rstd = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + w.eps)
    n = s.mul_(rstd)
    weight = randn(g, (w.hidden,), f32, device, std=0.1, mean=1.0)
    return [dy, n, rstd, weight]


def _backward(grad_output, normalized, rstd, weight, projection: bool = True):
    dt = compute_dtype(grad_output, normalized, rstd, weight)
    dy, n = grad_output.to(dt), normalized.to(dt)
    grad_weight = (dy * n).sum(dim=(0, 1))
    gn = dy * weight.to(dt)
    del dy  # in place from here: the float64 anchor at full scale is ~11 GB per tensor
    if projection:
        gn -= n * (gn * n).mean(dim=-1, keepdim=True)
    gn *= rstd.to(dt)
    ds = gn.to(grad_output.dtype)
    return ds, ds.clone(), grad_weight.to(weight.dtype)


def reference(grad_output, normalized, rstd, weight):
    return _backward(grad_output, normalized, rstd, weight)


def dropped_term(grad_output, normalized, rstd, weight):
    """Mutant: forgets the projection term −n·mean(g·n)."""
    return _backward(grad_output, normalized, rstd, weight, projection=False)


def reordered(grad_output, normalized, rstd, weight):
    """Valid alternative: the projection written as (Σ dy·w·n)/H, rstd folded in first; the
    weight gradient summed per sequence then over the batch."""
    dt = compute_dtype(grad_output, normalized, rstd, weight)
    dy, n, r = grad_output.to(dt), normalized.to(dt), rstd.to(dt)
    wgt = weight.to(dt)
    dot = (dy * n) @ wgt
    ds = r * (dy * wgt) - (r * n) * (dot.unsqueeze(-1) / n.shape[-1])
    ds = ds.to(grad_output.dtype)
    grad_weight = (dy * n).sum(dim=1).sum(dim=0)
    return ds, ds.clone(), grad_weight.to(weight.dtype)


def cost(w: Workload) -> Cost:
    elems = w.batch * w.seq * w.hidden
    tokens = w.batch * w.seq
    read = 2 * elems + 4 * elems + 4 * tokens + 4 * w.hidden
    write = 2 * 2 * elems + 4 * w.hidden
    return Cost(flops={"fp32": 7.0 * elems}, bytes=float(read + write))
