"""FLUX.1 transformer feed-forward block in float32: project 3,072-channel tokens up to 12,288
channels with a biased linear layer, apply GELU in its tanh approximation
(0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))), and project back to 3,072 channels with a second
biased linear layer. Inputs are hidden states [batch, seq, 3072] and the two weight/bias pairs
in nn.Linear layout ([out, in]); the output is [batch, seq, 3072] float32."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p29"
SLUG = "gelu_feedforward_flux_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/037_flux_feedforward_gelu_approximate (task #37), "
    "workload record 6"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = "Weights drawn as N(0, 1/fan_in) and biases as 0.1·N(0, 1) so activations stay O(1)."
WORKLOAD = {"batch": 32, "seq": 512, "hidden": 3072, "mlp_hidden": 12288}
SMOKE = {"batch": 2, "seq": 16, "hidden": 96, "mlp_hidden": 384}
INPUTS = ("hidden_states", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    x = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    w1 = randn(g, (w.mlp_hidden, w.hidden), f32, device, std=1.0 / math.sqrt(w.hidden))
    b1 = randn(g, (w.mlp_hidden,), f32, device, std=0.1)
    w2 = randn(g, (w.hidden, w.mlp_hidden), f32, device, std=1.0 / math.sqrt(w.mlp_hidden))
    b2 = randn(g, (w.hidden,), f32, device, std=0.1)
    return [x, w1, b1, w2, b2]


def _gelu_tanh(h: torch.Tensor) -> torch.Tensor:
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))


def reference(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    dt = compute_dtype(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    h = torch.nn.functional.linear(hidden_states.to(dt), fc1_weight.to(dt), fc1_bias.to(dt))
    a = _gelu_tanh(h)
    out = torch.nn.functional.linear(a, fc2_weight.to(dt), fc2_bias.to(dt))
    return out.to(hidden_states.dtype)


def dropped_term(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    """Mutant: forgets the cubic term of the tanh approximation."""
    dt = compute_dtype(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    h = torch.nn.functional.linear(hidden_states.to(dt), fc1_weight.to(dt), fc1_bias.to(dt))
    a = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * h))
    out = torch.nn.functional.linear(a, fc2_weight.to(dt), fc2_bias.to(dt))
    return out.to(hidden_states.dtype)


def reordered(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    """Valid alternative: the down projection summed over two halves of the hidden channels."""
    dt = compute_dtype(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
    a = _gelu_tanh(hidden_states.to(dt) @ fc1_weight.to(dt).t() + fc1_bias.to(dt))
    half = a.shape[-1] // 2
    w2 = fc2_weight.to(dt)
    out = a[..., :half] @ w2[:, :half].t() + a[..., half:] @ w2[:, half:].t()
    return (out + fc2_bias.to(dt)).to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 2.0 * tokens * w.hidden * w.mlp_hidden * 2
    elementwise = 10.0 * tokens * w.mlp_hidden
    weights = 2 * w.hidden * w.mlp_hidden + w.hidden + w.mlp_hidden
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (2 * tokens * w.hidden + weights))
