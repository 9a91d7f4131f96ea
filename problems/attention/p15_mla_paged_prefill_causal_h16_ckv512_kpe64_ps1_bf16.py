"""Causal multi-head latent attention (MLA) prefill in the absorbed form over a paged latent
cache (DeepSeek-V3 at tensor parallel 8: 16 query heads, 512-wide compressed KV latent plus a
64-wide rotary key part, page size 1). The 28 sequences' queries are packed in
``q_nope [1954, 16, 512]`` and ``q_pe [1954, 16, 64]`` (bfloat16): sequence ``b`` owns rows
``qo_indptr[b]:qo_indptr[b+1]`` and the tokens ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of
``ckv_cache [989669, 1, 512]`` / ``kpe_cache [989669, 1, 64]`` (2,044 tokens in all, a short
cached prefix before the new tokens). Token ``t`` scores ``sm_scale · (q_nope·ckv[t] +
q_pe·kpe[t])``; query ``i`` of a sequence with ``Lq`` queries and ``Lk`` tokens sees tokens
``t ≤ i + Lk − Lq``; the softmax weights the latent rows ``ckv[t]``. Outputs:
``output [1954, 16, 512]`` bfloat16 and ``lse [1954, 16]`` float32, the base-2 log-sum-exp of the
masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    causal_pairs,
    draw_pages,
    indptr,
    mla_paged_attention,
    permute,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

ID = "p15"
SLUG = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/mla_paged/mla_paged_prefill_causal_h16_ckv512_kpe64_ps1.json, "
    "workload record 892d1b8f"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, the captured 989,669-page pool, query/KV lengths and sm_scale from the record "
    "(the record the public MetaKernelBench chose). Per seed: the sequence order is shuffled, "
    "pages are a fresh random subset of the pool, and all values are redrawn (standard normal "
    "bf16). Memory: the pool is 1.14 GB in bf16 and 4.6 GB at the float64 anchor; the reference "
    "widens only one sequence's gathered pages at a time."
)
WORKLOAD = {
    "num_qo_heads": 16,
    "head_dim_ckv": 512,
    "head_dim_kpe": 64,
    "page_size": 1,
    "num_pages": 989669,
    "q_lens": (
        20, 11, 83, 14, 36, 9, 17, 137, 96, 33, 4, 39, 21, 82, 1, 10, 420, 28, 20, 61, 390, 49,
        176, 66, 9, 32, 79, 11,
    ),
    "kv_lens": (
        23, 15, 85, 18, 39, 11, 21, 141, 99, 36, 6, 44, 23, 90, 4, 14, 423, 30, 23, 64, 393, 53,
        180, 70, 12, 34, 81, 12,
    ),
    "sm_scale": 0.1352337747812271,
}
SMOKE = {**WORKLOAD, "num_pages": 128, "q_lens": (5, 1, 20, 3), "kv_lens": (9, 1, 23, 3)}
INPUTS = (
    "q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices",
    "sm_scale",
)
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens, kv_lens = permute(order, w.q_lens), permute(order, w.kv_lens)
    total_q = sum(q_lens)
    q_nope = randn(g, (total_q, w.num_qo_heads, w.head_dim_ckv), torch.bfloat16, device)
    q_pe = randn(g, (total_q, w.num_qo_heads, w.head_dim_kpe), torch.bfloat16, device)
    ckv = randn(g, (w.num_pages, w.page_size, w.head_dim_ckv), torch.bfloat16, device)
    kpe = randn(g, (w.num_pages, w.page_size, w.head_dim_kpe), torch.bfloat16, device)
    kv_indices = draw_pages(g, w.num_pages, sum(kv_lens), device)
    return [
        q_nope, q_pe, ckv, kpe, indptr(q_lens, device), indptr(kv_lens, device), kv_indices,
        w.sm_scale,
    ]


def reference(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, True
    )


def dropped_term(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    """Mutant: forgets the rotary score term q_pe·kpe."""
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, True,
        with_pe=False,
    )


def reordered(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, True,
        attend_split,
    )


def cost(w: Workload) -> Cost:
    total_q, tokens, batch, heads = sum(w.q_lens), sum(w.kv_lens), len(w.q_lens), w.num_qo_heads
    d_qk = w.head_dim_ckv + w.head_dim_kpe
    cache_bytes = tokens * d_qk * 2
    q_bytes = total_q * heads * d_qk * 2
    out_bytes = total_q * heads * (w.head_dim_ckv * 2 + 4)
    index_bytes = 4 * (tokens + 2 * (batch + 1))
    return attention_cost(
        causal_pairs(w.q_lens, w.kv_lens), heads, d_qk, w.head_dim_ckv,
        cache_bytes + q_bytes + out_bytes + index_bytes,
    )
