"""Causal multi-head latent attention prefill in the non-absorbed form over ragged q/k/v
(DeepSeek-V3 at tensor parallel 8: 16 heads, query/key width 192 = 128 no-rope + 64 rope, value
width 128). The 63 sequences are packed: sequence ``b`` owns query rows
``qo_indptr[b]:qo_indptr[b+1]`` of ``q [2885, 16, 192]`` and key/value rows
``kv_indptr[b]:kv_indptr[b+1]`` of ``k [19013, 16, 192]`` and ``v [19013, 16, 128]`` (bfloat16;
each sequence has a 256-token cached prefix followed by its 38–54 new tokens). Query ``i``
attends to keys ``j ≤ i + Lk − Lq``; head ``h`` of q uses head ``h`` of k/v; scores are
``sm_scale · q·k``. Outputs: ``output [2885, 16, 128]`` bfloat16 and ``lse [2885, 16]``
float32, the base-2 log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    causal_pairs,
    indptr,
    permute,
    ragged_attention,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

ID = "p16"
SLUG = "mla_ragged_prefill_causal_h16_qk192_vo128_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/mla_ragged/mla_ragged_prefill_causal_h16_qk192_vo128.json, "
    "workload record 79a808fd"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Query lengths, the 256-token prefixes and sm_scale (0.0884, as captured) from the record. "
    "Per seed: the sequence order is shuffled and all values are redrawn (standard normal bf16)."
)
WORKLOAD = {
    "num_heads": 16,
    "head_dim_qk": 192,
    "head_dim_vo": 128,
    "q_lens": (
        39, 38, 39, 39, 39, 40, 40, 40, 41, 40, 40, 42, 42, 41, 42, 42, 43, 42, 43, 42, 43, 43, 44,
        44, 44, 46, 45, 44, 45, 45, 46, 46, 46, 46, 46, 47, 47, 47, 47, 48, 49, 48, 47, 48, 49, 50,
        49, 49, 50, 50, 51, 51, 50, 51, 51, 52, 50, 52, 53, 53, 54, 53, 52,
    ),
    "prefix_lens": (256,) * 63,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "q_lens": (6, 1, 9), "prefix_lens": (16, 16, 16)}
INPUTS = ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens = permute(order, w.q_lens)
    kv_lens = [lq + p for lq, p in zip(q_lens, permute(order, w.prefix_lens))]
    total_q, total_kv = sum(q_lens), sum(kv_lens)
    q = randn(g, (total_q, w.num_heads, w.head_dim_qk), torch.bfloat16, device)
    k = randn(g, (total_kv, w.num_heads, w.head_dim_qk), torch.bfloat16, device)
    v = randn(g, (total_kv, w.num_heads, w.head_dim_vo), torch.bfloat16, device)
    return [q, k, v, indptr(q_lens, device), indptr(kv_lens, device), w.sm_scale]


def reference(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, True)


def dropped_term(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    """Mutant: forgets the causal mask."""
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, False)


def reordered(q, k, v, qo_indptr, kv_indptr, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return ragged_attention(q, k, v, qo_indptr, kv_indptr, sm_scale, True, attend_split)


def cost(w: Workload) -> Cost:
    kv_lens = [lq + p for lq, p in zip(w.q_lens, w.prefix_lens)]
    total_q, total_kv, heads = sum(w.q_lens), sum(kv_lens), w.num_heads
    kv_bytes = total_kv * heads * (w.head_dim_qk + w.head_dim_vo) * 2
    q_out_bytes = total_q * heads * ((w.head_dim_qk + w.head_dim_vo) * 2 + 4)
    return attention_cost(
        causal_pairs(w.q_lens, kv_lens), heads, w.head_dim_qk, w.head_dim_vo,
        kv_bytes + q_out_bytes + 8 * (len(w.q_lens) + 1),
    )
