"""FP8 block-scaled fused gate/up projection with SiLU gating for a Qwen3-VL dense MLP
(hidden 3,584 → intermediate 18,944): output = SiLU(x Wgᵀ) · (x Wuᵀ). Everything arrives
pre-quantized as float8_e4m3fn codes with float32 decode scales: the activation x [M, 3584]
with one scale per token and 128-channel group ([M, 28]); the gate and up weights
[18944, 3584] with one scale per 128×128 block ([148, 28]). Dequantize (codes · scale), multiply
with float32 accumulation, apply SiLU to the gate product, multiply by the up product and
return bfloat16 [M, 18944]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from problems.common import compute_dtype, generator
from problems.quantization import _fp8
from problems.spec import Cost, Workload

ID = "p53"
SLUG = "mlp_gate_up_projection_qwen3vl_fp8"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/003_fp8_mlp_gate_up_projection (task 179), "
    "workload record 2 (M = 8704)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Same call contract as upstream (pre-quantized activation and weights, 1×128 and 128×128 "
    "float32 scales). Upstream rounds both GEMM results to bfloat16 before the gating; here the "
    "gating runs on the float32 (anchor: float64) products and only the output is rounded."
)
WORKLOAD = {"tokens": 8704, "hidden": 3584, "intermediate": 18944, "group": 128}
SMOKE = {"tokens": 40, "hidden": 384, "intermediate": 512, "group": 128}
INPUTS = ("x", "scale_x", "gate_proj_weight", "scale_gate", "up_proj_weight", "scale_up")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = torch.randn(w.tokens, w.hidden, generator=g, device=device)
    x_codes, x_scales = _fp8.quantize_static(x, (1, w.group))
    block = (w.group, w.group)
    gate, gate_scale = _fp8.random_weight(g, w.intermediate, w.hidden, device, block=block)
    up, up_scale = _fp8.random_weight(g, w.intermediate, w.hidden, device, block=block)
    return [x_codes, x_scales, gate, gate_scale, up, up_scale]


def _projections(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    dt = compute_dtype(scale_x, scale_gate, scale_up)
    xd = _fp8.dequantize(x, scale_x, dt)
    gate = xd @ _fp8.dequantize(gate_proj_weight, scale_gate, dt).t()
    up = xd @ _fp8.dequantize(up_proj_weight, scale_up, dt).t()
    return gate, up


def reference(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    gate, up = _projections(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up)
    return (F.silu(gate) * up).to(_fp8.output_dtype(gate.dtype, torch.bfloat16))


def dropped_term(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    """Mutant: forgets the SiLU on the gate."""
    gate, up = _projections(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up)
    return (gate * up).to(_fp8.output_dtype(gate.dtype, torch.bfloat16))


def reordered(x, scale_x, gate_proj_weight, scale_gate, up_proj_weight, scale_up):
    """Valid alternative: kernel-order block-scaled GEMMs, SiLU written as g / (1 + e^−g)."""
    dt = compute_dtype(scale_x, scale_gate, scale_up)
    gate = _fp8.blockwise_matmul(x, scale_x, gate_proj_weight, scale_gate, dt)
    up = _fp8.blockwise_matmul(x, scale_x, up_proj_weight, scale_up, dt)
    return (gate / (1 + torch.exp(-gate)) * up).to(_fp8.output_dtype(dt, torch.bfloat16))


def cost(w: Workload) -> Cost:
    m, k, n = w.tokens, w.hidden, w.intermediate
    scale_bytes = 4.0 * (m * (k // w.group) + 2 * (n // w.group) * (k // w.group))
    return Cost(
        flops={"fp8": 2.0 * 2 * m * n * k, "fp32": 6.0 * m * n},
        bytes=m * k + 2.0 * n * k + scale_bytes + 2.0 * m * n,
    )
