"""NVFP4 × NVFP4 Mamba2 output projection of Nemotron-3-Nano-30B-A3B (1,920 → 1,920 channels,
M tokens). Both operands arrive quantized: the activation as packed uint8 [1, M, 960] and the
weight as packed uint8 [1, 1920, 960] (two E2M1 codes per byte, element 2j in the low nibble),
each with float8_e4m3fn decode scales per 16 consecutive K values ([1, M, 120] and
[1, 1920, 120]) and a float32 [1] global decode scale: value = E2M1(code) · block_scale ·
global_scale. Hopper has no FP4 tensor cores, so both are dequantized in software (16-entry
lookup table); the output is A @ Wᵀ, float32 [1, M, 1920] with float32 accumulation."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p60"
SLUG = "mamba2_output_projection_nemotron_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/026_nvfp4_mamba2_out_projection (task 202), "
    "workload record 11 (M = 8192)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Same call contract as upstream except that the two global decode scales are float32 [1] "
    "tensors (upstream: Python floats) so the float64 anchor promotes them. Activation and "
    "weight drawn N(0, 1) and quantized offline as upstream."
)
WORKLOAD = {"tokens": 8192, "in_features": 1920, "out_features": 1920}
SMOKE = {"tokens": 32, "in_features": 128, "out_features": 96}
INPUTS = (
    "hidden_states", "hidden_states_scale", "global_decode_scale_input", "weight",
    "weight_scale", "global_decode_scale_weight",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (1, w.tokens, w.in_features), torch.float32, device)
    weight = randn(g, (1, w.out_features, w.in_features), torch.float32, device)
    return [*_fp4.quantize(x), *_fp4.quantize(weight)]


def _operands(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
              weight_scale, global_decode_scale_weight, with_global: bool = True):
    dt = compute_dtype(global_decode_scale_input, global_decode_scale_weight)
    one = torch.ones(1, dtype=dt, device=weight.device)
    ga = global_decode_scale_input if with_global else one
    gw = global_decode_scale_weight if with_global else one
    a = _fp4.dequantize(hidden_states, hidden_states_scale, ga, dt)
    b = _fp4.dequantize(weight, weight_scale, gw, dt)
    return a, b, dt


def reference(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
              weight_scale, global_decode_scale_weight):
    a, b, dt = _operands(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
                         weight_scale, global_decode_scale_weight)
    return (a @ b.transpose(-1, -2)).to(_out_dtype(dt))


def dropped_term(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
                 weight_scale, global_decode_scale_weight):
    """Mutant: forgets the activation's global decode scale."""
    dt = compute_dtype(global_decode_scale_input, global_decode_scale_weight)
    one = torch.ones(1, dtype=dt, device=weight.device)
    a = _fp4.dequantize(hidden_states, hidden_states_scale, one, dt)
    b = _fp4.dequantize(weight, weight_scale, global_decode_scale_weight, dt)
    return (a @ b.transpose(-1, -2)).to(_out_dtype(dt))


def reordered(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
              weight_scale, global_decode_scale_weight):
    """Valid alternative: GEMM on block-scaled codes, both global scales applied afterwards."""
    a, b, dt = _operands(hidden_states, hidden_states_scale, global_decode_scale_input, weight,
                         weight_scale, global_decode_scale_weight, with_global=False)
    scale = global_decode_scale_input.to(dt) * global_decode_scale_weight.to(dt)
    return ((a @ b.transpose(-1, -2)) * scale).to(_out_dtype(dt))


def _out_dtype(dt: torch.dtype) -> torch.dtype:
    """float32 as declared; the compute dtype for the float64 anchor and the bf16 mutant."""
    return dt if dt in (torch.float64, torch.bfloat16) else torch.float32


def cost(w: Workload) -> Cost:
    m, k, n = w.tokens, w.in_features, w.out_features
    packed = (m + n) * k
    return Cost(
        flops={"bf16": 2.0 * m * n * k, "fp32": 3.0 * packed},
        bytes=packed / 2 + packed / _fp4.BLOCK + 8.0 + 4.0 * m * n,
    )
