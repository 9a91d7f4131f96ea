"""Grouped-query attention of Qwen3-14B (40 query heads, 8 key/value heads of 128 channels) on
NVFP4-quantized q, k and v. Each arrives as packed uint8 [B, H, S, 64] (two E2M1 codes per
byte, element 2j in the low nibble), float8_e4m3fn decode scales [B, H, S, 8] (one per 16
consecutive head channels) and a float32 [1] global decode scale per tensor: value =
E2M1(code) · block_scale · global_scale, dequantized in software (Hopper has no FP4 tensor
cores). Each key/value head serves 5 consecutive query heads. Scores q·kᵀ / √128 plus the
bfloat16 additive mask [B, 1, S, S] (0 where visible, the most negative bfloat16 above the
diagonal) go through a float32 softmax; outputs are attn_output = P · v [B, 40, S, 128] and the
probabilities attn_weights P [B, 40, S, S], both bfloat16."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p58"
SLUG = "quantized_attention_scores_qwen3_14b_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/031_nvfp4_grouped_query_attention_with_kv_repeat (task 207), "
    "workload record 9 (batch 8 × seq 1024)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream takes bfloat16 q/k/v and quantizes q, k, the probabilities and vᵀ (blocks along "
    "the sequence) to NVFP4 inside the reference for Blackwell FP4 GEMMs. On Hopper the operands "
    "arrive already quantized (q and an NVFP4 KV cache, blocks of 16 along the head channels) "
    "and are dequantized in software; the probabilities are not re-quantized, because a "
    "per-call rounding of an intermediate cannot be kept away from ties. Global decode scales "
    "are float32 [1] tensors so the float64 anchor promotes them. The mask is causal, built as "
    "Hugging Face does (finfo(bfloat16).min above the diagonal)."
)
WORKLOAD: dict[str, Any] = {"batch": 8, "seq_len": 1024, "q_heads": 40, "kv_heads": 8, "head_dim": 128}
SMOKE = {"batch": 2, "seq_len": 32, "q_heads": 10, "kv_heads": 2, "head_dim": 32}
INPUTS = (
    "query_fp4", "query_scale", "query_global_scale", "key_fp4", "key_scale",
    "key_global_scale", "value_fp4", "value_scale", "value_global_scale", "attention_mask",
)
OUTPUTS = ("attn_output", "attn_weights")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    tensors: list[torch.Tensor] = []
    for heads in (w.q_heads, w.kv_heads, w.kv_heads):
        x = randn(g, (w.batch, heads, w.seq_len, w.head_dim), torch.float32, device)
        tensors.extend(_fp4.quantize(x))
    future = torch.ones(w.seq_len, w.seq_len, dtype=torch.bool, device=device).triu(1)
    mask = torch.zeros(w.batch, 1, w.seq_len, w.seq_len, dtype=torch.bfloat16, device=device)
    mask.masked_fill_(future, torch.finfo(torch.bfloat16).min)
    return [*tensors, mask]


def _attention(query: _fp4.Quantized, key: _fp4.Quantized, value: _fp4.Quantized,
               attention_mask, use_mask: bool = True, global_last: bool = False):
    dt = compute_dtype(query[2], key[2], value[2], attention_mask)
    one = torch.ones(1, dtype=dt, device=attention_mask.device)
    if global_last:
        q = _fp4.dequantize(query[0], query[1], one, dt)
        k = _fp4.dequantize(key[0], key[1], one, dt)
        qk_scale = query[2].to(dt) * key[2].to(dt)
    else:
        q = _fp4.dequantize(*query, dt)
        k = _fp4.dequantize(*key, dt)
        qk_scale = one
    v = _fp4.dequantize(*value, dt)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * qk_scale * q.shape[-1] ** -0.5
    if use_mask:
        scores = scores + attention_mask.to(dt)
    probs = torch.softmax(scores, dim=-1)
    out_dtype = attention_mask.dtype
    return (probs @ v).to(out_dtype), probs.to(out_dtype)


def reference(query_fp4, query_scale, query_global_scale, key_fp4, key_scale,
              key_global_scale, value_fp4, value_scale, value_global_scale, attention_mask):
    return _attention((query_fp4, query_scale, query_global_scale),
                      (key_fp4, key_scale, key_global_scale),
                      (value_fp4, value_scale, value_global_scale), attention_mask)


def dropped_term(query_fp4, query_scale, query_global_scale, key_fp4, key_scale,
                 key_global_scale, value_fp4, value_scale, value_global_scale, attention_mask):
    """Mutant: forgets the attention mask."""
    return _attention((query_fp4, query_scale, query_global_scale),
                      (key_fp4, key_scale, key_global_scale),
                      (value_fp4, value_scale, value_global_scale), attention_mask,
                      use_mask=False)


def reordered(query_fp4, query_scale, query_global_scale, key_fp4, key_scale,
              key_global_scale, value_fp4, value_scale, value_global_scale, attention_mask):
    """Valid alternative: q·kᵀ on block-scaled codes, both global scales applied afterwards."""
    return _attention((query_fp4, query_scale, query_global_scale),
                      (key_fp4, key_scale, key_global_scale),
                      (value_fp4, value_scale, value_global_scale), attention_mask,
                      global_last=True)


def cost(w: Workload) -> Cost:
    pairs = w.batch * w.q_heads * w.seq_len * w.seq_len
    qkv_elems = w.batch * (w.q_heads + 2 * w.kv_heads) * w.seq_len * w.head_dim
    return Cost(
        flops={"bf16": 4.0 * pairs * w.head_dim, "fp32": 6.0 * pairs + 3.0 * qkv_elems},
        bytes=(qkv_elems / 2 + qkv_elems / _fp4.BLOCK + 12.0
               + 2.0 * w.batch * w.seq_len * w.seq_len
               + 2.0 * w.batch * w.q_heads * w.seq_len * w.head_dim + 2.0 * pairs),
    )
