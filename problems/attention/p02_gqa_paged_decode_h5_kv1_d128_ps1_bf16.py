"""Grouped-query attention decode over a paged KV cache (Llama-4 Scout at tensor parallel 8: 5
query heads sharing a single KV head, head_dim 128, page size 1). Each of the 63 sequences has
one bfloat16 query token ``q[b]`` and reads its keys/values from the pages
``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of the caches ``k_cache``/``v_cache``
``[num_pages, 1, 1, 128]`` (scattered over a 53,173-page pool; lengths range from 4 to 5,668
tokens). Scores are ``sm_scale · q·k``, softmaxed over the sequence's tokens and applied to the
values. Outputs: ``output [63, 5, 128]`` bfloat16 and ``lse [63, 5]`` float32, the base-2
log-sum-exp of the scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import PAGED_DECODE

ID = "p02"
SLUG = "gqa_paged_decode_h5_kv1_d128_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_decode_h5_kv1_d128_ps1.json, "
    "workload record 69ec7197"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size and sm_scale from the captured record. Per seed: the order of the 63 "
    "captured sequence lengths is shuffled, pages are a fresh random subset of the pool, and "
    "all values are redrawn (standard normal bf16)."
)
WORKLOAD = {
    "num_qo_heads": 5,
    "num_kv_heads": 1,
    "head_dim": 128,
    "page_size": 1,
    "num_pages": 53173,
    "kv_lens": (
        20, 8, 70, 4, 22, 23, 13, 33, 5, 9, 23, 36, 16, 115, 13, 8, 32, 11, 25, 22, 306, 270, 251,
        77, 50, 23, 11, 6, 436, 17, 320, 22, 16, 19, 50, 8, 15, 9, 154, 10, 8, 11, 2053, 10, 100,
        21, 151, 8, 28, 75, 11, 16, 54, 5141, 5668, 13, 123, 12, 1813, 1123, 23, 78, 16,
    ),
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "num_pages": 128, "kv_lens": (4, 70, 1, 9, 23)}
INPUTS = ("q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p01 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = PAGED_DECODE
