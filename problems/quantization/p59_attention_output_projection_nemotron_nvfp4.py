"""NVFP4 weight-only attention output projection of Nemotron-3-Nano-30B-A3B (4,096 input
channels → 2,816 outputs, i.e. hidden 2,688 padded to a multiple of 128). The float32
activations [M, 4096] (M = B · L tokens) multiply an NVFP4 weight stored as packed uint8
[2816, 2048] (two E2M1 codes per byte, element 2j in the low nibble), float8_e4m3fn decode
scales [2816, 256] (one per 16 consecutive input channels) and a float32 [1] global decode
scale: W = E2M1(code) · block_scale · global_scale. Hopper has no FP4 tensor cores, so the
weight is dequantized in software (16-entry lookup table). Output: x @ Wᵀ, float32 [M, 2816]
with float32 accumulation."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p59"
SLUG = "attention_output_projection_nemotron_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/024_nvfp4_attention_output_projection (task 200), "
    "workload record 15 (B 64 × L 512)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream also quantizes the activation to NVFP4 per call and runs a W4A4 FP4 GEMM, which "
    "needs Blackwell FP4 tensor cores; on Hopper the problem is weight-only NVFP4 (W4A32, as "
    "vLLM's Marlin NVFP4 path): the float32 activation is used as is. The global decode scale "
    "is a float32 [1] tensor (upstream: a Python float) so the float64 anchor promotes it. "
    "Weight drawn N(0, 0.02²) as upstream."
)
WORKLOAD = {"batch": 64, "seq_len": 512, "in_features": 4096, "out_features": 2816}
SMOKE = {"batch": 2, "seq_len": 16, "in_features": 256, "out_features": 128}
INPUTS = ("hidden_states", "weight_fp4", "weight_scale_fp8", "weight_global_decode_scale")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.batch * w.seq_len, w.in_features), torch.float32, device)
    weight = randn(g, (w.out_features, w.in_features), torch.float32, device, std=0.02)
    packed, scales, global_scale = _fp4.quantize(weight)
    return [x, packed, scales, global_scale]


def reference(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    dt = compute_dtype(hidden_states, weight_global_decode_scale)
    weight = _fp4.dequantize(weight_fp4, weight_scale_fp8, weight_global_decode_scale, dt)
    return (hidden_states.to(dt) @ weight.t()).to(hidden_states.dtype)


def dropped_term(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    """Mutant: forgets the global decode scale."""
    dt = compute_dtype(hidden_states, weight_global_decode_scale)
    one = torch.ones(1, dtype=dt, device=hidden_states.device)
    weight = _fp4.dequantize(weight_fp4, weight_scale_fp8, one, dt)
    return (hidden_states.to(dt) @ weight.t()).to(hidden_states.dtype)


def reordered(hidden_states, weight_fp4, weight_scale_fp8, weight_global_decode_scale):
    """Valid alternative: GEMM on block-scaled codes, global scale applied to the product."""
    dt = compute_dtype(hidden_states, weight_global_decode_scale)
    one = torch.ones(1, dtype=dt, device=hidden_states.device)
    weight = _fp4.dequantize(weight_fp4, weight_scale_fp8, one, dt)
    y = (hidden_states.to(dt) @ weight.t()) * weight_global_decode_scale.to(dt)
    return y.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    m, k, n = w.batch * w.seq_len, w.in_features, w.out_features
    return Cost(
        flops={"fp32": 2.0 * m * n * k + 3.0 * n * k},
        bytes=4.0 * m * k + n * k / 2 + n * k / _fp4.BLOCK + 4.0 + 4.0 * m * n,
    )
