"""NVFP4 weight-only SwiGLU MLP of Qwen3-8B (hidden 4,096, intermediate 12,288):
output = down(SiLU(x Wgᵀ) · (x Wuᵀ)) on bfloat16 activations x [B, S, 4096]. Each of the three
weights is NVFP4: packed uint8 [1, N, K/2] (two E2M1 codes per byte, element 2j in the low
nibble), float8_e4m3fn decode scales [1, N, K/16] (one per 16 consecutive K values) and a
float32 [1] global decode scale: W = E2M1(code) · block_scale · global_scale. Hopper has no FP4
tensor cores, so weights are dequantized in software (16-entry lookup table). Accumulate in
float32, keep the gated intermediate in float32, return bfloat16 [B, S, 4096]."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from problems.common import compute_dtype, generator, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p61"
SLUG = "mlp_silu_gating_qwen3_8b_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/029_nvfp4_fused_mlp_silu_gating (task 205), "
    "workload record 4 (batch 8 × seq 2048)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream also quantizes x and the gated intermediate to NVFP4 per call (W4A4, Blackwell "
    "FP4 tensor cores); on Hopper the problem is weight-only NVFP4 (W4A16, as vLLM's Marlin "
    "NVFP4 path): activations and the intermediate stay in float. Global decode scales are "
    "float32 [1] tensors (upstream: Python floats) so the float64 anchor promotes them. "
    "Weights drawn N(0, 0.02²) as upstream."
)
WORKLOAD: dict[str, Any] = {"batch": 8, "seq_len": 2048, "hidden": 4096, "intermediate": 12288}
SMOKE = {"batch": 2, "seq_len": 8, "hidden": 256, "intermediate": 384}
INPUTS = (
    "x", "gate_weight_fp4", "gate_scale", "gate_global_decode_scale", "up_weight_fp4",
    "up_scale", "up_global_decode_scale", "down_weight_fp4", "down_scale",
    "down_global_decode_scale",
)
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.batch, w.seq_len, w.hidden), torch.bfloat16, device)
    shapes = ((w.intermediate, w.hidden), (w.intermediate, w.hidden), (w.hidden, w.intermediate))
    weights: list[torch.Tensor] = []
    for n, k in shapes:
        weights.extend(_fp4.quantize(randn(g, (1, n, k), torch.float32, device, std=0.02)))
    return [x, *weights]


def _linear(x, packed, scales, global_scale, dt, global_last: bool = False):
    if global_last:
        one = torch.ones(1, dtype=dt, device=x.device)
        return (x @ _fp4.dequantize(packed[0], scales[0], one, dt).t()) * global_scale.to(dt)
    return x @ _fp4.dequantize(packed[0], scales[0], global_scale, dt).t()


def _mlp(x, gate: _fp4.Quantized, up: _fp4.Quantized, down: _fp4.Quantized,
         activate: bool = True, global_last: bool = False):
    dt = compute_dtype(x, gate[2], up[2], down[2])
    xd = x.to(dt)
    g = _linear(xd, *gate, dt, global_last)
    u = _linear(xd, *up, dt, global_last)
    h = (F.silu(g) if activate else g) * u
    return _linear(h, *down, dt, global_last).to(x.dtype)


def reference(x, gate_weight_fp4, gate_scale, gate_global_decode_scale, up_weight_fp4,
              up_scale, up_global_decode_scale, down_weight_fp4, down_scale,
              down_global_decode_scale):
    return _mlp(x, (gate_weight_fp4, gate_scale, gate_global_decode_scale),
                (up_weight_fp4, up_scale, up_global_decode_scale),
                (down_weight_fp4, down_scale, down_global_decode_scale))


def dropped_term(x, gate_weight_fp4, gate_scale, gate_global_decode_scale, up_weight_fp4,
                 up_scale, up_global_decode_scale, down_weight_fp4, down_scale,
                 down_global_decode_scale):
    """Mutant: forgets the SiLU on the gate."""
    return _mlp(x, (gate_weight_fp4, gate_scale, gate_global_decode_scale),
                (up_weight_fp4, up_scale, up_global_decode_scale),
                (down_weight_fp4, down_scale, down_global_decode_scale), activate=False)


def reordered(x, gate_weight_fp4, gate_scale, gate_global_decode_scale, up_weight_fp4,
              up_scale, up_global_decode_scale, down_weight_fp4, down_scale,
              down_global_decode_scale):
    """Valid alternative: GEMMs on block-scaled codes, global scales applied to the products."""
    return _mlp(x, (gate_weight_fp4, gate_scale, gate_global_decode_scale),
                (up_weight_fp4, up_scale, up_global_decode_scale),
                (down_weight_fp4, down_scale, down_global_decode_scale), global_last=True)


def cost(w: Workload) -> Cost:
    m, h, i = w.batch * w.seq_len, w.hidden, w.intermediate
    weight_elems = 3 * h * i
    return Cost(
        flops={"bf16": 2.0 * 3 * m * h * i, "fp32": 6.0 * m * i + 3.0 * weight_elems},
        bytes=2.0 * m * h + weight_elems / 2 + weight_elems / _fp4.BLOCK + 12.0 + 2.0 * m * h,
    )
