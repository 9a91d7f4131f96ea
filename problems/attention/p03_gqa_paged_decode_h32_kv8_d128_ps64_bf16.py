"""Grouped-query attention decode over a paged KV cache with 64-token pages (Llama-3.1-8B: 32
query heads, 8 KV heads, head_dim 128). Each of the 64 sequences has one bfloat16 query token
``q[b]``; its pages are ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` in the caches
``k_cache``/``v_cache`` ``[29441, 64, 8, 128]``; every page is full except the last, which holds
``kv_last_page_len[b]`` tokens (its first slots), so the sequence has
``(num_pages_b − 1)·64 + kv_last_page_len[b]`` tokens. Query head ``h`` uses KV head ``h // 4``.
Scores are ``sm_scale · q·k``, softmaxed over the sequence's tokens and applied to the values.
Outputs: ``output [64, 32, 128]`` bfloat16 and ``lse [64, 32]`` float32, the base-2 log-sum-exp
of the scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    draw_pages,
    indptr,
    paged_attention,
    permute,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

ID = "p03"
SLUG = "gqa_paged_decode_h32_kv8_d128_ps64_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps64.json, "
    "workload record 8c88a86f"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size, per-sequence page counts, last-page lengths (all 1 in the capture) "
    "and sm_scale from the captured record. Per seed: the sequence order is shuffled, pages are "
    "a fresh random subset of the pool, and all values are redrawn (standard normal bf16). "
    "Memory: the two caches are 7.7 GB in bf16 and 31 GB at the float64 anchor; the reference "
    "widens only the gathered pages of one sequence at a time."
)
WORKLOAD = {
    "num_qo_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 64,
    "num_pages": 29441,
    "kv_pages": (
        46, 29, 74, 103, 282, 28, 29, 17, 62, 22, 20, 59, 15, 24, 31, 352, 82, 2074, 2591, 1047,
        1824, 1826, 981, 1077, 1021, 31, 209, 25, 33, 27, 42, 20, 28, 36, 22, 424, 145, 193, 21, 20,
        26, 55, 36, 41, 2387, 2676, 326, 26, 404, 146, 16, 27, 55, 1999, 35, 1627, 1093, 311, 61,
        19, 352, 420, 13, 79,
    ),
    "kv_last_page_len": (1,) * 64,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {
    **WORKLOAD,
    "num_pages": 12,
    "kv_pages": (2, 1, 3, 1, 2),
    "kv_last_page_len": (1, 17, 64, 40, 5),
}
INPUTS = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.kv_pages))
    pages = permute(order, w.kv_pages)
    last = permute(order, w.kv_last_page_len)
    cache_shape = (w.num_pages, w.page_size, w.num_kv_heads, w.head_dim)
    q = randn(g, (len(pages), w.num_qo_heads, w.head_dim), torch.bfloat16, device)
    k_cache = randn(g, cache_shape, torch.bfloat16, device)
    v_cache = randn(g, cache_shape, torch.bfloat16, device)
    kv_indices = draw_pages(g, w.num_pages, sum(pages), device)
    last_len = torch.tensor(last, dtype=torch.int32, device=device)
    return [q, k_cache, v_cache, indptr(pages, device), kv_indices, last_len, w.sm_scale]


def reference(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale: float):
    return paged_attention(
        q, k_cache, v_cache, None, kv_indptr, kv_indices, kv_last_page_len, sm_scale, False
    )


def dropped_term(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale: float):
    """Mutant: forgets the softmax scale."""
    return paged_attention(
        q, k_cache, v_cache, None, kv_indptr, kv_indices, kv_last_page_len, 1.0, False
    )


def reordered(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return paged_attention(
        q, k_cache, v_cache, None, kv_indptr, kv_indices, kv_last_page_len, sm_scale, False,
        attend_split,
    )


def cost(w: Workload) -> Cost:
    batch, pages = len(w.kv_pages), sum(w.kv_pages)
    tokens = sum((n - 1) * w.page_size + last for n, last in zip(w.kv_pages, w.kv_last_page_len))
    kv_bytes = 2 * tokens * w.num_kv_heads * w.head_dim * 2
    q_out_bytes = 2 * batch * w.num_qo_heads * w.head_dim * 2 + batch * w.num_qo_heads * 4
    index_bytes = 4 * (pages + 2 * batch + 1)
    return attention_cost(
        tokens, w.num_qo_heads, w.head_dim, w.head_dim, kv_bytes + q_out_bytes + index_bytes
    )
