"""Parakeet-TDT gated MLP in float32: one fused linear layer (no bias) projects 1,024-channel
tokens to 8,192 channels, whose first half is the gate and second half the up projection; the
result SiLU(gate)·up (4,096 channels) is projected back to 1,024 channels by a bias-free down
projection. Inputs: hidden states [batch, seq, 1024], gate_up weight [8192, 1024] and down
weight [1024, 4096] in nn.Linear layout; output [batch, seq, 1024] float32. The sequence length
(773) is not a multiple of any tile size."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p32"
SLUG = "swiglu_mlp_parakeet_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = "nvidia/SOL-ExecBench: L1/074_fused_gated_mlp_silu (task #74), workload record 7"
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = "Weights drawn as N(0, 1/fan_in) so activations stay O(1)."
WORKLOAD = {"batch": 16, "seq": 773, "hidden": 1024, "intermediate": 4096}
SMOKE = {"batch": 2, "seq": 13, "hidden": 64, "intermediate": 256}
INPUTS = ("hidden_states", "gate_up_weight", "down_weight")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    x = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    w_gu = randn(g, (2 * w.intermediate, w.hidden), f32, device, std=1.0 / math.sqrt(w.hidden))
    w_d = randn(g, (w.hidden, w.intermediate), f32, device, std=1.0 / math.sqrt(w.intermediate))
    return [x, w_gu, w_d]


def reference(hidden_states, gate_up_weight, down_weight):
    dt = compute_dtype(hidden_states, gate_up_weight, down_weight)
    gu = torch.nn.functional.linear(hidden_states.to(dt), gate_up_weight.to(dt))
    gate, up = gu.chunk(2, dim=-1)
    h = gate * torch.sigmoid(gate) * up
    return torch.nn.functional.linear(h, down_weight.to(dt)).to(hidden_states.dtype)


def dropped_term(hidden_states, gate_up_weight, down_weight):
    """Mutant: forgets the up projection (uses SiLU(gate) alone)."""
    dt = compute_dtype(hidden_states, gate_up_weight, down_weight)
    gu = torch.nn.functional.linear(hidden_states.to(dt), gate_up_weight.to(dt))
    gate, _ = gu.chunk(2, dim=-1)
    h = gate * torch.sigmoid(gate)
    return torch.nn.functional.linear(h, down_weight.to(dt)).to(hidden_states.dtype)


def reordered(hidden_states, gate_up_weight, down_weight):
    """Valid alternative: separate gate and up GEMMs, down projection in two K halves."""
    dt = compute_dtype(hidden_states, gate_up_weight, down_weight)
    x = hidden_states.to(dt)
    inter = down_weight.shape[1]
    w_gu = gate_up_weight.to(dt)
    gate = x @ w_gu[:inter].t()
    up = x @ w_gu[inter:].t()
    h = torch.nn.functional.silu(gate) * up
    wd = down_weight.to(dt)
    half = inter // 2
    out = h[..., :half] @ wd[:, :half].t() + h[..., half:] @ wd[:, half:].t()
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 2.0 * tokens * w.hidden * 3 * w.intermediate
    elementwise = 6.0 * tokens * w.intermediate
    weights = 3 * w.hidden * w.intermediate
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (2 * tokens * w.hidden + weights))
