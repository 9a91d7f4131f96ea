"""ConvNeXt-V2 block MLP with Global Response Normalization, float32, channels-last: expand
128 channels to 512 with a biased linear layer, apply exact (erf) GELU, then GRN: per image and
channel take the L2 norm over all spatial positions, divide it by its mean over the 512 channels
(plus eps 1e-6), and compute gamma·(x·norm) + beta + x; finally project back to 128 channels
with a second biased linear layer. Input [batch, height, width, 128]; GRN gamma/beta are
[1, 1, 1, 512]; output [batch, height, width, 128] float32."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p30"
SLUG = "gelu_grn_mlp_convnextv2_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = "nvidia/SOL-ExecBench: L1/045_fused_linear_gelu_grn_linear (task #45), workload record 4"
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "eps is fixed at 1e-6 (the record's scalar) and read from WORKLOAD; GRN gamma/beta are drawn "
    "as 0.5·N(0, 1) instead of the zero initialisation so the GRN term matters."
)
WORKLOAD = {"batch": 64, "height": 56, "width": 56, "dim": 128, "hidden": 512, "eps": 1e-6}
SMOKE = {"batch": 2, "height": 6, "width": 5, "dim": 32, "hidden": 128, "eps": 1e-6}
INPUTS = (
    "hidden_states",
    "pwconv1_weight",
    "pwconv1_bias",
    "grn_weight",
    "grn_bias",
    "pwconv2_weight",
    "pwconv2_bias",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    x = randn(g, (w.batch, w.height, w.width, w.dim), f32, device)
    w1 = randn(g, (w.hidden, w.dim), f32, device, std=1.0 / math.sqrt(w.dim))
    b1 = randn(g, (w.hidden,), f32, device, std=0.1)
    gamma = randn(g, (1, 1, 1, w.hidden), f32, device, std=0.5)
    beta = randn(g, (1, 1, 1, w.hidden), f32, device, std=0.5)
    w2 = randn(g, (w.dim, w.hidden), f32, device, std=1.0 / math.sqrt(w.hidden))
    b2 = randn(g, (w.dim,), f32, device, std=0.1)
    return [x, w1, b1, gamma, beta, w2, b2]


def _grn(a: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, norm: torch.Tensor):
    scale = norm / (norm.mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return gamma * (a * scale) + beta + a


def reference(hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias,
              pwconv2_weight, pwconv2_bias):
    dt = compute_dtype(hidden_states, pwconv1_weight, pwconv2_weight)
    lin = torch.nn.functional.linear
    a = torch.nn.functional.gelu(
        lin(hidden_states.to(dt), pwconv1_weight.to(dt), pwconv1_bias.to(dt))
    )
    norm = torch.linalg.vector_norm(a, ord=2, dim=(1, 2), keepdim=True)
    y = _grn(a, grn_weight.to(dt), grn_bias.to(dt), norm)
    return lin(y, pwconv2_weight.to(dt), pwconv2_bias.to(dt)).to(hidden_states.dtype)


def dropped_term(hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias,
                 pwconv2_weight, pwconv2_bias):
    """Mutant: forgets GRN's residual (+ x)."""
    dt = compute_dtype(hidden_states, pwconv1_weight, pwconv2_weight)
    lin = torch.nn.functional.linear
    a = torch.nn.functional.gelu(
        lin(hidden_states.to(dt), pwconv1_weight.to(dt), pwconv1_bias.to(dt))
    )
    norm = torch.linalg.vector_norm(a, ord=2, dim=(1, 2), keepdim=True)
    y = _grn(a, grn_weight.to(dt), grn_bias.to(dt), norm) - a
    return lin(y, pwconv2_weight.to(dt), pwconv2_bias.to(dt)).to(hidden_states.dtype)


def reordered(hidden_states, pwconv1_weight, pwconv1_bias, grn_weight, grn_bias,
              pwconv2_weight, pwconv2_bias):
    """Valid alternative: spatial sum of squares row by row, GRN folded as a·(1 + γ·s) + β."""
    dt = compute_dtype(hidden_states, pwconv1_weight, pwconv2_weight)
    a = torch.nn.functional.gelu(
        hidden_states.to(dt) @ pwconv1_weight.to(dt).t() + pwconv1_bias.to(dt)
    )
    sq = a.pow(2).sum(dim=2, keepdim=True).sum(dim=1, keepdim=True)
    norm = sq.sqrt()
    scale = norm / (norm.mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    y = a * (1.0 + grn_weight.to(dt) * scale) + grn_bias.to(dt)
    out = y @ pwconv2_weight.to(dt).t() + pwconv2_bias.to(dt)
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    pixels = w.batch * w.height * w.width
    matmul = 2.0 * pixels * w.dim * w.hidden * 2
    elementwise = 16.0 * pixels * w.hidden
    params = 2 * w.dim * w.hidden + 3 * w.hidden + w.dim
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (2 * pixels * w.dim + params))
