"""Stable Diffusion 1.5 UNet GroupNorm in float32: split the channels of an NCHW tensor into 32
groups, compute the mean and (biased) variance of each (image, group) over its channels and all
spatial positions, normalise by sqrt(var + 1e-5), and apply a per-channel affine weight and bias.
The workload has an odd spatial size (211 × 53) so no dimension is a power of two. Output has
the input's shape and dtype."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p31"
SLUG = "groupnorm_sd15_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = "nvidia/SOL-ExecBench: L1/078_group_norm_fusion (task #78), workload record 9"
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Inputs get a per-channel offset and scale so group means are non-zero (as in real UNet "
    "activations); affine weight ≈ 1 + 0.1·N and bias 0.1·N instead of ones/zeros."
)
WORKLOAD: dict[str, Any] = {"batch": 2, "channels": 640, "height": 211, "width": 53, "groups": 32, "eps": 1e-5}
SMOKE = {"batch": 2, "channels": 64, "height": 11, "width": 7, "groups": 32, "eps": 1e-5}
INPUTS = ("x", "weight", "bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    shift = randn(g, (1, w.channels, 1, 1), f32, device, std=0.5)
    spread = randn(g, (1, w.channels, 1, 1), f32, device, std=0.2, mean=1.0).abs()
    x = randn(g, (w.batch, w.channels, w.height, w.width), f32, device) * spread + shift
    weight = randn(g, (w.channels,), f32, device, std=0.1, mean=1.0)
    bias = randn(g, (w.channels,), f32, device, std=0.1)
    return [x, weight, bias]


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    dt = compute_dtype(x, weight, bias)
    b, c, h, wd = x.shape
    groups = WORKLOAD["groups"]
    xg = x.to(dt).reshape(b, groups, -1)
    mean = xg.mean(dim=-1, keepdim=True)
    var = (xg - mean).pow(2).mean(dim=-1, keepdim=True)
    y = ((xg - mean) / torch.sqrt(var + WORKLOAD["eps"])).reshape(b, c, h, wd)
    return (y * weight.to(dt).view(1, c, 1, 1) + bias.to(dt).view(1, c, 1, 1)).to(x.dtype)


def dropped_term(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Mutant: forgets to subtract the group mean."""
    dt = compute_dtype(x, weight, bias)
    b, c, h, wd = x.shape
    xg = x.to(dt).reshape(b, WORKLOAD["groups"], -1)
    var = xg.var(dim=-1, keepdim=True, unbiased=False)
    y = (xg / torch.sqrt(var + WORKLOAD["eps"])).reshape(b, c, h, wd)
    return (y * weight.to(dt).view(1, c, 1, 1) + bias.to(dt).view(1, c, 1, 1)).to(x.dtype)


def reordered(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Valid alternative: statistics per channel first, then combined per group (Chan's rule)."""
    dt = compute_dtype(x, weight, bias)
    b, c, h, wd = x.shape
    groups = WORKLOAD["groups"]
    xc = x.to(dt).reshape(b, groups, c // groups, h * wd)
    ch_mean = xc.mean(dim=-1, keepdim=True)
    ch_m2 = (xc - ch_mean).pow(2).sum(dim=-1, keepdim=True)
    mean = ch_mean.mean(dim=2, keepdim=True)
    m2 = ch_m2.sum(dim=2, keepdim=True) + (h * wd) * (ch_mean - mean).pow(2).sum(2, keepdim=True)
    var = m2 / (c // groups * h * wd)
    rstd = torch.rsqrt(var + WORKLOAD["eps"])
    wgt = weight.to(dt).view(1, groups, c // groups, 1)
    y = xc * (rstd * wgt) + (bias.to(dt).view(1, groups, c // groups, 1) - mean * rstd * wgt)
    return y.reshape(b, c, h, wd).to(x.dtype)


def cost(w: Workload) -> Cost:
    elems = w.batch * w.channels * w.height * w.width
    return Cost(flops={"fp32": 7.0 * elems}, bytes=4.0 * (2 * elems + 2 * w.channels))
