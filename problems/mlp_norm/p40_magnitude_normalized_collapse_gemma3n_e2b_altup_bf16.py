"""Gemma-3n AltUp stream collapse in bfloat16 inputs: hidden_states holds three prediction
streams [3, batch, seq, 3072]. Stream 0 is kept as is; streams 1 and 2 are each projected by
their own unembedding matrix (x·Pᵢᵀ, [3072, 3072]) and rescaled per token so that their root
mean square equals that of stream 0 (the projected mean square is clamped below at 1e-5 before
the square root); the output is the mean of the three streams, [batch, seq, 3072] bfloat16.
The projections are computed from the bf16 values with float32 (or wider) arithmetic."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p40"
SLUG = "magnitude_normalized_collapse_gemma3n_e2b_altup_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/052_altup_hidden_state_collapse_with_magnitude_normalization "
    "(task #52), workload record 15"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "epsilon is a constant (1e-5, the record's scalar). Projections drawn as N(0, 1/3072) and "
    "each stream with its own per-token scale so that the magnitude matching matters."
)
WORKLOAD = {"streams": 3, "batch": 32, "seq": 541, "hidden": 3072, "eps": 1e-5}
SMOKE = {"streams": 3, "batch": 2, "seq": 13, "hidden": 128, "eps": 1e-5}
INPUTS = ("hidden_states", "unembed_proj_1", "unembed_proj_2")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    scale = randn(g, (w.streams, w.batch, w.seq, 1), f32, device, std=0.3, mean=1.0).abs()
    x = randn(g, (w.streams, w.batch, w.seq, w.hidden), f32, device) * (scale + 0.1)
    std = 1.0 / math.sqrt(w.hidden)
    p1 = randn(g, (w.hidden, w.hidden), torch.bfloat16, device, std=std)
    p2 = randn(g, (w.hidden, w.hidden), torch.bfloat16, device, std=std)
    return [x.to(torch.bfloat16), p1, p2]


def _rms(x: torch.Tensor, floor: float | None = None) -> torch.Tensor:
    ms = x.pow(2).mean(dim=-1, keepdim=True)
    return torch.sqrt(ms if floor is None else ms.clamp_min(floor))


def _collapse(hidden_states, unembed_proj_1, unembed_proj_2, rescale: bool = True):
    dt = compute_dtype(hidden_states, unembed_proj_1, unembed_proj_2)
    x = hidden_states.to(dt)
    first = x[0]
    target = _rms(first)
    total = first
    for i, proj in ((1, unembed_proj_1), (2, unembed_proj_2)):
        p = x[i] @ proj.to(dt).t()
        total = total + (p * (target / _rms(p, WORKLOAD["eps"])) if rescale else p)
    return (total / 3.0).to(hidden_states.dtype)


def reference(hidden_states, unembed_proj_1, unembed_proj_2):
    return _collapse(hidden_states, unembed_proj_1, unembed_proj_2)


def dropped_term(hidden_states, unembed_proj_1, unembed_proj_2):
    """Mutant: forgets to rescale the projected streams to stream 0's magnitude."""
    return _collapse(hidden_states, unembed_proj_1, unembed_proj_2, rescale=False)


def reordered(hidden_states, unembed_proj_1, unembed_proj_2):
    """Valid alternative: both projections in one batched GEMM, rescaling by rsqrt, streams
    summed in reverse order."""
    dt = compute_dtype(hidden_states, unembed_proj_1, unembed_proj_2)
    x = hidden_states.to(dt)
    projs = torch.stack([unembed_proj_1.to(dt), unembed_proj_2.to(dt)])
    b, s, h = x.shape[1:]
    p = torch.bmm(x[1:].reshape(2, b * s, h), projs.transpose(1, 2)).reshape(2, b, s, h)
    ms = (p * p).sum(dim=-1, keepdim=True) / h
    target = torch.sqrt((x[0] * x[0]).sum(dim=-1, keepdim=True) / h)
    q = p * (target * torch.rsqrt(ms.clamp_min(WORKLOAD["eps"])))
    return ((q[1] + q[0] + x[0]) / 3.0).to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 2 * 2.0 * tokens * w.hidden * w.hidden
    elementwise = 12.0 * tokens * w.hidden
    read = w.streams * tokens * w.hidden + 2 * w.hidden * w.hidden
    return Cost(flops={"fp32": matmul + elementwise}, bytes=2.0 * (read + tokens * w.hidden))
