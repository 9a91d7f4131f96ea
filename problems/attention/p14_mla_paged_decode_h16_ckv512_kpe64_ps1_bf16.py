"""Multi-head latent attention (MLA) decode in the absorbed form over a paged latent cache
(DeepSeek-V3 at tensor parallel 8: 16 query heads, a 512-wide compressed KV latent plus a 64-wide
rotary key part, page size 1). Each of the 64 sequences has one query token split as
``q_nope [64, 16, 512]`` and ``q_pe [64, 16, 64]`` (bfloat16); its tokens are the pages
``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of ``ckv_cache [989669, 1, 512]`` and
``kpe_cache [989669, 1, 64]``, shared by all heads. The score of token ``t`` is
``sm_scale · (q_nope·ckv[t] + q_pe·kpe[t])``; the softmax over the sequence's tokens weights the
latent rows ``ckv[t]`` (the values are the latent itself). Outputs: ``output [64, 16, 512]``
bfloat16 and ``lse [64, 16]`` float32, the base-2 log-sum-exp of the scaled scores
(``logsumexp / ln 2``)."""

from __future__ import annotations

import torch

from problems.attention._paged import (
    attend_split,
    attention_cost,
    draw_pages,
    indptr,
    mla_paged_attention,
    permute,
    sequence_order,
)
from problems.common import generator, randn
from problems.spec import Cost, Workload

ID = "p14"
SLUG = "mla_paged_decode_h16_ckv512_kpe64_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/mla_paged/mla_paged_decode_h16_ckv512_kpe64_ps1.json, "
    "workload record 5bef8d88"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, the captured 989,669-page pool, sequence lengths and sm_scale from the record. "
    "Per seed: the sequence order is shuffled, pages are a fresh random subset of the pool, and "
    "all values are redrawn (standard normal bf16). Memory: the full pool is 1.14 GB in bf16 and "
    "4.6 GB at the float64 anchor (plus a transient 2 GB float32 draw buffer), well inside an "
    "H200; the reference widens only the gathered pages of one sequence at a time, so the whole "
    "pool is kept rather than shrunk."
)
WORKLOAD = {
    "num_qo_heads": 16,
    "head_dim_ckv": 512,
    "head_dim_kpe": 64,
    "page_size": 1,
    "num_pages": 989669,
    "kv_lens": (
        537, 514, 638, 510, 1572, 1540, 1593, 1590, 2661, 2103, 2418, 9197, 554, 519, 1879, 692,
        814, 679, 670, 540, 516, 518, 612, 512, 3299, 633, 536, 1050, 519, 568, 658, 514, 534, 728,
        642, 916, 1444, 1582, 1633, 1537, 1511, 629, 1096, 1501, 1486, 1512, 519, 550, 940, 568,
        520, 3013, 555, 523, 1426, 579, 644, 524, 517, 533, 1428, 1316, 1394, 1690,
    ),
    "sm_scale": 0.1352337747812271,
}
SMOKE = {**WORKLOAD, "num_pages": 200, "kv_lens": (9, 1, 40, 17, 3)}
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    lens = permute(sequence_order(g, len(w.kv_lens)), w.kv_lens)
    batch = len(lens)
    q_nope = randn(g, (batch, w.num_qo_heads, w.head_dim_ckv), torch.bfloat16, device)
    q_pe = randn(g, (batch, w.num_qo_heads, w.head_dim_kpe), torch.bfloat16, device)
    ckv = randn(g, (w.num_pages, w.page_size, w.head_dim_ckv), torch.bfloat16, device)
    kpe = randn(g, (w.num_pages, w.page_size, w.head_dim_kpe), torch.bfloat16, device)
    kv_indices = draw_pages(g, w.num_pages, sum(lens), device)
    return [q_nope, q_pe, ckv, kpe, indptr(lens, device), kv_indices, w.sm_scale]


def reference(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale: float):
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, None, kv_indptr, kv_indices, sm_scale, False
    )


def dropped_term(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale: float):
    """Mutant: forgets the rotary score term q_pe·kpe."""
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, None, kv_indptr, kv_indices, sm_scale, False,
        with_pe=False,
    )


def reordered(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale: float):
    """Valid alternative: two key blocks merged through their log-sum-exps (split-KV)."""
    return mla_paged_attention(
        q_nope, q_pe, ckv_cache, kpe_cache, None, kv_indptr, kv_indices, sm_scale, False,
        attend_split,
    )


def cost(w: Workload) -> Cost:
    tokens, batch, heads = sum(w.kv_lens), len(w.kv_lens), w.num_qo_heads
    d_qk = w.head_dim_ckv + w.head_dim_kpe
    cache_bytes = tokens * d_qk * 2
    q_bytes = batch * heads * d_qk * 2
    out_bytes = batch * heads * (w.head_dim_ckv * 2 + 4)
    index_bytes = 4 * (tokens + batch + 1)
    return attention_cost(
        tokens, heads, d_qk, w.head_dim_ckv, cache_bytes + q_bytes + out_bytes + index_bytes
    )
