"""Fused residual add and RMSNorm for Llama-3.1-8B hidden states: add the residual to the
hidden states, normalise each row by the root mean square of the sum (epsilon 1e-5), and scale
by a learned per-channel weight. Inputs and the output are bfloat16 with 4,096 channels."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p28"
SLUG = "fused_add_rmsnorm_h4096_llama31_8b_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/rmsnorm/fused_add_rmsnorm_h4096.json, "
    "workload record 3e460c8c"
)
LICENSE = "Apache-2.0"
WORKLOAD = {"rows": 14509, "hidden": 4096, "eps": 1e-5}
SMOKE = {"rows": 64, "hidden": 4096, "eps": 1e-5}
INPUTS = ("hidden_states", "residual", "weight")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.rows, w.hidden), torch.bfloat16, device)
    r = randn(g, (w.rows, w.hidden), torch.bfloat16, device)
    weight = randn(g, (w.hidden,), torch.bfloat16, device, std=0.1, mean=1.0)
    return [x, r, weight]


def reference(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    dt = compute_dtype(hidden_states, residual, weight)
    s = hidden_states.to(dt) + residual.to(dt)
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return (s * inv * weight.to(dt)).to(hidden_states.dtype)


def dropped_term(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    """Mutant: forgets the residual add."""
    dt = compute_dtype(hidden_states, weight)
    s = hidden_states.to(dt)
    inv = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return (s * inv * weight.to(dt)).to(hidden_states.dtype)


def reordered(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    """Valid alternative: sum of squares in two halves, weight applied before the scale."""
    dt = compute_dtype(hidden_states, residual, weight)
    s = hidden_states.to(dt) + residual.to(dt)
    half = s.shape[-1] // 2
    ss = s[..., :half].pow(2).sum(-1, keepdim=True) + s[..., half:].pow(2).sum(-1, keepdim=True)
    inv = torch.rsqrt(ss / s.shape[-1] + WORKLOAD["eps"])
    return ((s * weight.to(dt)) * inv).to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    elems = w.rows * w.hidden
    return Cost(flops={"fp32": 6.0 * elems}, bytes=2.0 * (3 * elems + w.hidden))
