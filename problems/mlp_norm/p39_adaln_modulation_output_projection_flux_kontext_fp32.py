"""FLUX.1-Kontext final output chain (AdaLayerNormContinuous + proj_out) in float32: LayerNorm
each 3,072-channel token without affine parameters (biased variance, eps 1e-6); from the
per-image conditioning embedding temb [batch, 3072] compute SiLU(temb)·Wᵀ + b → 6,144 values,
whose first half is the shift and second half the scale; modulate x̂·(1 + scale) + shift
(broadcast over the sequence); and project to 64 output channels with a biased linear layer.
Inputs: hidden states [batch, seq, 3072], temb, the modulation weight [6144, 3072] and bias,
the output weight [64, 3072] and bias; output [batch, seq, 64] float32."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p39"
SLUG = "adaln_modulation_output_projection_flux_kontext_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/036_flux_output_norm_projection_chain (task #36), "
    "workload record 1"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "eps is a constant (1e-6, the record's scalar). Weights drawn as N(0, 1/fan_in), biases as "
    "0.1·N(0, 1); hidden states get a per-token offset so the mean subtraction matters."
)
WORKLOAD = {"batch": 32, "seq": 256, "inner": 3072, "out": 64, "eps": 1e-6}
SMOKE = {"batch": 3, "seq": 16, "inner": 96, "out": 16, "eps": 1e-6}
INPUTS = ("hidden_states", "temb", "linear_weight", "linear_bias", "proj_out_weight",
          "proj_out_bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    offset = randn(g, (w.batch, w.seq, 1), f32, device)
    x = randn(g, (w.batch, w.seq, w.inner), f32, device) + offset
    temb = randn(g, (w.batch, w.inner), f32, device)
    std = 1.0 / math.sqrt(w.inner)
    lw = randn(g, (2 * w.inner, w.inner), f32, device, std=std)
    lb = randn(g, (2 * w.inner,), f32, device, std=0.1)
    pw = randn(g, (w.out, w.inner), f32, device, std=std)
    pb = randn(g, (w.out,), f32, device, std=0.1)
    return [x, temb, lw, lb, pw, pb]


def _modulation(temb, linear_weight, linear_bias, dt):
    t = temb.to(dt)
    mod = torch.nn.functional.linear(t * torch.sigmoid(t), linear_weight.to(dt),
                                     linear_bias.to(dt))
    shift, scale = mod.chunk(2, dim=-1)
    return shift.unsqueeze(1), scale.unsqueeze(1)


def _layernorm(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + WORKLOAD["eps"])


def reference(hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias):
    dt = compute_dtype(hidden_states, temb, linear_weight, proj_out_weight)
    shift, scale = _modulation(temb, linear_weight, linear_bias, dt)
    y = _layernorm(hidden_states.to(dt)) * (1.0 + scale) + shift
    out = torch.nn.functional.linear(y, proj_out_weight.to(dt), proj_out_bias.to(dt))
    return out.to(hidden_states.dtype)


def dropped_term(hidden_states, temb, linear_weight, linear_bias, proj_out_weight,
                 proj_out_bias):
    """Mutant: forgets the shift."""
    dt = compute_dtype(hidden_states, temb, linear_weight, proj_out_weight)
    _, scale = _modulation(temb, linear_weight, linear_bias, dt)
    y = _layernorm(hidden_states.to(dt)) * (1.0 + scale)
    out = torch.nn.functional.linear(y, proj_out_weight.to(dt), proj_out_bias.to(dt))
    return out.to(hidden_states.dtype)


def reordered(hidden_states, temb, linear_weight, linear_bias, proj_out_weight, proj_out_bias):
    """Valid alternative: the shift is projected once per image and added after the GEMM; the
    variance is E[x²] − E[x]²."""
    dt = compute_dtype(hidden_states, temb, linear_weight, proj_out_weight)
    shift, scale = _modulation(temb, linear_weight, linear_bias, dt)
    x = hidden_states.to(dt)
    mean = x.mean(dim=-1, keepdim=True)
    var = x.pow(2).mean(dim=-1, keepdim=True) - mean.pow(2)
    xn = (x - mean) * torch.rsqrt(var + WORKLOAD["eps"])
    pw = proj_out_weight.to(dt)
    out = (xn * (1.0 + scale)) @ pw.t() + (shift @ pw.t() + proj_out_bias.to(dt))
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 2.0 * w.batch * w.inner * 2 * w.inner + 2.0 * tokens * w.inner * w.out
    elementwise = 8.0 * tokens * w.inner + 4.0 * w.batch * w.inner
    read = tokens * w.inner + w.batch * w.inner + 2 * w.inner * w.inner + 2 * w.inner
    read += w.out * w.inner + w.out
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (read + tokens * w.out))
