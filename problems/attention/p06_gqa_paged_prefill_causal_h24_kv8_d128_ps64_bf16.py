"""Causal grouped-query attention prefill over a paged KV cache with 64-token pages (Llama-3.2-3B:
24 query heads, 8 KV heads, head_dim 128). The 15 sequences' bfloat16 queries are packed in
``q [6069, 24, 128]``: sequence ``b`` owns rows ``qo_indptr[b]:qo_indptr[b+1]`` and the pages
``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of ``k_cache``/``v_cache`` ``[32757, 64, 8, 128]``;
every page is full except the last, which holds ``kv_last_page_len[b]`` tokens, so the sequence
has ``Lk = (num_pages_b − 1)·64 + kv_last_page_len[b]`` KV tokens (about 64 times its ``Lq``
queries in this capture). The queries are the last positions of the sequence: query ``i``
attends to keys ``j ≤ i + Lk − Lq``. Query head ``h`` uses KV head ``h // 3``; scores are
``sm_scale · q·k``. Outputs: ``output [6069, 24, 128]`` bfloat16 and ``lse [6069, 24]`` float32,
the base-2 log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    causal_pairs,
    draw_pages,
    indptr,
    paged_attention,
    permute,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

ID = "p06"
SLUG = "gqa_paged_prefill_causal_h24_kv8_d128_ps64_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_prefill_causal_h24_kv8_d128_ps64.json, "
    "workload record 022ad0c2"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size, query lengths, page counts, last-page lengths (all 1) and sm_scale "
    "from the captured record, in which qo_indptr equals kv_indptr numerically although the "
    "latter counts 64-token pages; kept as captured, so each sequence has a long cached prefix. "
    "Per seed: the sequence order is shuffled, pages are a fresh random subset of the pool, and "
    "all values are redrawn (standard normal bf16). Memory: the caches are 8.6 GB in bf16 and "
    "34 GB at the float64 anchor; the reference widens one sequence's pages at a time."
)
_LENS = (206, 167, 239, 224, 276, 330, 496, 473, 552, 445, 531, 524, 536, 602, 468)
WORKLOAD = {
    "num_qo_heads": 24,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 64,
    "num_pages": 32757,
    "q_lens": _LENS,
    "kv_pages": _LENS,
    "kv_last_page_len": (1,) * 15,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {
    **WORKLOAD,
    "num_pages": 10,
    "q_lens": (5, 30, 20),
    "kv_pages": (2, 1, 3),
    "kv_last_page_len": (1, 30, 64),
}
INPUTS = (
    "q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len",
    "sm_scale",
)
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    order = sequence_order(g, len(w.q_lens))
    q_lens, pages = permute(order, w.q_lens), permute(order, w.kv_pages)
    last = permute(order, w.kv_last_page_len)
    cache_shape = (w.num_pages, w.page_size, w.num_kv_heads, w.head_dim)
    q = randn(g, (sum(q_lens), w.num_qo_heads, w.head_dim), torch.bfloat16, device)
    k_cache = randn(g, cache_shape, torch.bfloat16, device)
    v_cache = randn(g, cache_shape, torch.bfloat16, device)
    kv_indices = draw_pages(g, w.num_pages, sum(pages), device)
    last_len = torch.tensor(last, dtype=torch.int32, device=device)
    return [
        q, k_cache, v_cache, indptr(q_lens, device), indptr(pages, device), kv_indices, last_len,
        w.sm_scale,
    ]


def reference(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, True
    )


def dropped_term(
    q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale
):
    """Mutant: forgets the causal mask."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, False
    )


def reordered(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return paged_attention(
        q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale, True,
        attend_split,
    )


def kv_tokens(w: Workload) -> list[int]:
    return [(n - 1) * w.page_size + last for n, last in zip(w.kv_pages, w.kv_last_page_len)]


def cost(w: Workload) -> Cost:
    total_q, batch, pages = sum(w.q_lens), len(w.q_lens), sum(w.kv_pages)
    tokens = kv_tokens(w)
    kv_bytes = 2 * sum(tokens) * w.num_kv_heads * w.head_dim * 2
    q_out_bytes = 2 * total_q * w.num_qo_heads * w.head_dim * 2 + total_q * w.num_qo_heads * 4
    index_bytes = 4 * (pages + 3 * batch + 2)
    return attention_cost(
        causal_pairs(w.q_lens, tokens), w.num_qo_heads, w.head_dim, w.head_dim,
        kv_bytes + q_out_bytes + index_bytes,
    )
