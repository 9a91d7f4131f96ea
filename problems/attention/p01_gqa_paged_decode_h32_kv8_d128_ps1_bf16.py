"""Grouped-query attention decode over a paged KV cache (Llama-3.1-8B: 32 query heads, 8 KV
heads, head_dim 128, page size 1). Each of the 64 sequences has one bfloat16 query token ``q[b]``
and reads its keys/values from the pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of the
caches ``k_cache``/``v_cache`` ``[num_pages, 1, 8, 128]`` (pages scattered over a 68,237-page
pool); query head ``h`` uses KV head ``h // 4``. Scores are ``sm_scale · q·k``, softmaxed over the
sequence's tokens and applied to the values. Outputs: ``output [64, 32, 128]`` bfloat16 and
``lse [64, 32]`` float32, the base-2 log-sum-exp of the scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import PAGED_DECODE

ID = "p01"
SLUG = "gqa_paged_decode_h32_kv8_d128_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.json, "
    "workload record 5444fc56"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size and sm_scale from the captured record. Per seed: the order of the 64 "
    "captured sequence lengths is shuffled, pages are a fresh random subset of the pool, and "
    "all values are redrawn (standard normal bf16)."
)
WORKLOAD = {
    "num_qo_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 1,
    "num_pages": 68237,
    "kv_lens": (
        542, 525, 570, 599, 778, 524, 525, 513, 558, 518, 516, 555, 511, 520, 527, 848, 578, 2570,
        3087, 1543, 2320, 2322, 1477, 1573, 1517, 527, 705, 521, 529, 523, 538, 516, 524, 532, 518,
        920, 641, 689, 517, 516, 522, 551, 532, 537, 2883, 3172, 822, 522, 900, 642, 512, 523, 551,
        2495, 531, 2123, 1589, 807, 557, 515, 848, 916, 509, 575,
    ),
    "sm_scale": 0.0883883461356163,
}
SMOKE = {**WORKLOAD, "num_pages": 96, "kv_lens": (5, 17, 1, 30, 12, 3)}
INPUTS = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p02 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = PAGED_DECODE
