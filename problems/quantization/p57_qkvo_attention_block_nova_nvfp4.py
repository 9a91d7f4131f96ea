"""Causal GQA attention block of a Llama-3-70B-class model (Nova-70B) with NVFP4 weight-only
projections: hidden 8,192, 64 query heads and 8 key/value heads of 128 channels. bfloat16 hidden
states [B, S, 8192] are projected by four NVFP4 weights (q [8192, 8192], k and v [1024, 8192],
o [8192, 8192]), each stored as packed uint8 [N, K/2] (two E2M1 codes per byte, element 2j in
the low nibble), float8_e4m3fn decode scales [N, K/16] and a float32 [1] global decode scale
(W = E2M1(code) · block_scale · global_scale, dequantized in software: Hopper has no FP4 tensor
cores). q and k get rotary embeddings from the given bfloat16 cos/sin [B, S, 128]
(x · cos + rotate_half(x) · sin, rotate_half(x) = [−x₂, x₁] over the two 64-channel halves);
each key/value head serves 8 query heads; causal softmax attention with scale 1/√128; the
[B, S, 64·128] context goes through the o projection. Float32 accumulation and intermediates;
returns bfloat16 [B, S, 8192]."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, randint, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p57"
SLUG = "qkvo_attention_block_nova_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/019_nvfp4_grouped_query_attention (task 195), "
    "workload record 13 (batch 2 × seq 4096)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream also quantizes every projection input to NVFP4 per call (W4A4, Blackwell FP4 "
    "tensor cores) and rounds q/k/v and the probabilities to bfloat16; on Hopper the "
    "projections are weight-only NVFP4 (W4A16) and intermediates stay in float32 (anchor: "
    "float64). Global decode scales are float32 [1] tensors (upstream: Python floats). Upstream "
    "draws cos/sin as N(0, 1) noise; here they are real rotary tables (base 500000) at "
    "positions offset + 0..S−1 with a random offset per sequence."
)
WORKLOAD: dict[str, Any] = {
    "batch": 2, "seq_len": 4096, "hidden": 8192, "q_heads": 64, "kv_heads": 8, "head_dim": 128,
    "rope_base": 500000.0, "max_offset": 4096,
}
SMOKE = {
    "batch": 2, "seq_len": 16, "hidden": 128, "q_heads": 8, "kv_heads": 1, "head_dim": 16,
    "rope_base": 500000.0, "max_offset": 64,
}
INPUTS = (
    "hidden_states", "cos", "sin", "q_weight_fp4", "q_scale", "q_global_decode_scale",
    "k_weight_fp4", "k_scale", "k_global_decode_scale", "v_weight_fp4", "v_scale",
    "v_global_decode_scale", "o_weight_fp4", "o_scale", "o_global_decode_scale",
)
OUTPUTS = ("attn_output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def _rope_tables(g: torch.Generator, w: Workload, device: str) -> tuple[torch.Tensor, ...]:
    half = w.head_dim // 2
    inv_freq = w.rope_base ** (-torch.arange(half, dtype=torch.float64, device=device) / half)
    offsets = randint(g, 0, w.max_offset + 1, (w.batch, 1), device).double()
    positions = offsets + torch.arange(w.seq_len, dtype=torch.float64, device=device)
    angles = positions[..., None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    x = randn(g, (w.batch, w.seq_len, w.hidden), torch.bfloat16, device)
    cos, sin = _rope_tables(g, w, device)
    q_out, kv_out = w.q_heads * w.head_dim, w.kv_heads * w.head_dim
    weights: list[torch.Tensor] = []
    for n, k in ((q_out, w.hidden), (kv_out, w.hidden), (kv_out, w.hidden), (w.hidden, q_out)):
        weights.extend(_fp4.quantize(randn(g, (n, k), torch.float32, device, std=k**-0.5)))
    return [x, cos, sin, *weights]


def _linear(x, packed, scales, global_scale, dt, global_last: bool):
    if global_last:
        one = torch.ones(1, dtype=dt, device=x.device)
        return (x @ _fp4.dequantize(packed, scales, one, dt).t()) * global_scale.to(dt)
    return x @ _fp4.dequantize(packed, scales, global_scale, dt).t()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _block(hidden_states, cos, sin, projections: list[_fp4.Quantized], causal: bool = True,
           global_last=False):
    dt = compute_dtype(hidden_states, cos, sin, *(p[2] for p in projections))
    batch, seq_len, _ = hidden_states.shape
    head_dim = cos.shape[-1]
    x = hidden_states.to(dt)
    q, k, v = (_linear(x, *p, dt, global_last) for p in projections[:3])
    q = q.view(batch, seq_len, -1, head_dim).transpose(1, 2)
    k = k.view(batch, seq_len, -1, head_dim).transpose(1, 2)
    v = v.view(batch, seq_len, -1, head_dim).transpose(1, 2)
    c, s = cos.to(dt).unsqueeze(1), sin.to(dt).unsqueeze(1)
    q, k = _rotate(q, c, s), _rotate(k, c, s)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * head_dim**-0.5
    if causal:
        future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    context = torch.softmax(scores, dim=-1) @ v
    context = context.transpose(1, 2).reshape(batch, seq_len, -1)
    return _linear(context, *projections[3], dt, global_last).to(hidden_states.dtype)


def reference(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale,
              k_weight_fp4, k_scale, k_global_decode_scale, v_weight_fp4, v_scale,
              v_global_decode_scale, o_weight_fp4, o_scale, o_global_decode_scale):
    projections = (
        (q_weight_fp4, q_scale, q_global_decode_scale),
        (k_weight_fp4, k_scale, k_global_decode_scale),
        (v_weight_fp4, v_scale, v_global_decode_scale),
        (o_weight_fp4, o_scale, o_global_decode_scale),
    )
    return _block(hidden_states, cos, sin, projections)


def dropped_term(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale,
                 k_weight_fp4, k_scale, k_global_decode_scale, v_weight_fp4, v_scale,
                 v_global_decode_scale, o_weight_fp4, o_scale, o_global_decode_scale):
    """Mutant: forgets the causal mask."""
    projections = (
        (q_weight_fp4, q_scale, q_global_decode_scale),
        (k_weight_fp4, k_scale, k_global_decode_scale),
        (v_weight_fp4, v_scale, v_global_decode_scale),
        (o_weight_fp4, o_scale, o_global_decode_scale),
    )
    return _block(hidden_states, cos, sin, projections, causal=False)


def reordered(hidden_states, cos, sin, q_weight_fp4, q_scale, q_global_decode_scale,
              k_weight_fp4, k_scale, k_global_decode_scale, v_weight_fp4, v_scale,
              v_global_decode_scale, o_weight_fp4, o_scale, o_global_decode_scale):
    """Valid alternative: GEMMs on block-scaled codes, global scales applied to the products."""
    projections = (
        (q_weight_fp4, q_scale, q_global_decode_scale),
        (k_weight_fp4, k_scale, k_global_decode_scale),
        (v_weight_fp4, v_scale, v_global_decode_scale),
        (o_weight_fp4, o_scale, o_global_decode_scale),
    )
    return _block(hidden_states, cos, sin, projections, global_last=True)


def cost(w: Workload) -> Cost:
    m, h = w.batch * w.seq_len, w.hidden
    q_out, kv_out = w.q_heads * w.head_dim, w.kv_heads * w.head_dim
    weight_elems = h * (q_out + 2 * kv_out) + q_out * h
    causal_pairs = w.batch * w.q_heads * w.seq_len * (w.seq_len + 1) / 2
    return Cost(
        flops={
            "bf16": 2.0 * m * weight_elems + 4.0 * causal_pairs * w.head_dim,
            "fp32": 5.0 * causal_pairs + 6.0 * m * (q_out + kv_out) + 3.0 * weight_elems,
        },
        bytes=(2.0 * m * h + 2 * 2.0 * m * w.head_dim + weight_elems / 2
               + weight_elems / _fp4.BLOCK + 16.0 + 2.0 * m * h),
    )
