"""FP8 block-scaled attention output projection of Qwen3-VL-30B-A3B (60 heads × 128 = 7,680
input channels → 7,680 hidden). The bfloat16 attention output [tokens, 7680] is quantized
dynamically per token and 128-channel group: scale = amax(group) / 448 (float32), codes =
E4M3(x / scale). The weight is stored pre-quantized as float8_e4m3fn [7680, 7680] with one
float32 decode scale per 128×128 block ([60, 60]). The output is
(codes_x · scale_x) @ (codes_w · scale_w)ᵀ + bias, accumulated in float32 and returned as
bfloat16 [tokens, 7680]. The generator keeps every activation rounding decision away from
E4M3 ties."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.quantization import _fp8
from problems.spec import Cost, Workload

ID = "p52"
SLUG = "attention_output_projection_qwen3vl_fp8"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/001_fp8_attention_output_projection (task 177), "
    "workload record 3 (batch 8 × seq 2048)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream quantizes both the bfloat16 activation and the bfloat16 weight inside the "
    "reference; here the weight arrives pre-quantized (E4M3 + 128×128 float32 scales, as an FP8 "
    "checkpoint stores it) and only the activation is quantized per call (1×128 groups). "
    "Activations are nudged one bf16 step toward zero where their E4M3 rounding lies within "
    "DECISION_MARGIN code spacings of a tie. Bias std 0.1 (upstream N(0,1))."
)
WORKLOAD = {"tokens": 16384, "in_features": 7680, "out_features": 7680, "group": 128}
SMOKE = {"tokens": 48, "in_features": 512, "out_features": 384, "group": 128}
INPUTS = ("attn_output", "o_proj_weight", "o_proj_weight_scale", "o_proj_bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = 1e-3


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.tokens, w.in_features), torch.bfloat16, device)
    x = _fp8.nudge_off_ties(x, (1, w.group), DECISION_MARGIN)
    codes, scales = _fp8.random_weight(g, w.out_features, w.in_features, device,
                                       block=(w.group, w.group))
    bias = randn(g, (w.out_features,), torch.bfloat16, device, std=0.1)
    return [x, codes, scales, bias]


def _quantized_activation(x: torch.Tensor, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return _fp8.quantize(x.to(dt), (1, WORKLOAD["group"]))


def reference(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    dt = compute_dtype(attn_output, o_proj_weight_scale, o_proj_bias)
    codes, scales = _quantized_activation(attn_output, dt)
    x = _fp8.dequantize(codes, scales, dt)
    weight = _fp8.dequantize(o_proj_weight, o_proj_weight_scale, dt)
    return (x @ weight.t() + o_proj_bias.to(dt)).to(attn_output.dtype)


def dropped_term(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    """Mutant: forgets the bias."""
    dt = compute_dtype(attn_output, o_proj_weight_scale, o_proj_bias)
    codes, scales = _quantized_activation(attn_output, dt)
    x = _fp8.dequantize(codes, scales, dt)
    weight = _fp8.dequantize(o_proj_weight, o_proj_weight_scale, dt)
    return (x @ weight.t()).to(attn_output.dtype)


def reordered(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    """Valid alternative: kernel order — raw-code partial products per K block, then scales."""
    dt = compute_dtype(attn_output, o_proj_weight_scale, o_proj_bias)
    codes, scales = _quantized_activation(attn_output, dt)
    y = _fp8.blockwise_matmul(codes, scales, o_proj_weight, o_proj_weight_scale, dt)
    return (y + o_proj_bias.to(dt)).to(attn_output.dtype)


def cost(w: Workload) -> Cost:
    m, k, n = w.tokens, w.in_features, w.out_features
    scale_bytes = 4.0 * (n // w.group) * (k // w.group)
    return Cost(
        flops={"fp8": 2.0 * m * n * k, "fp32": 4.0 * m * k + m * n},
        bytes=2.0 * m * k + n * k + scale_bytes + 2.0 * n + 2.0 * m * n,
    )
