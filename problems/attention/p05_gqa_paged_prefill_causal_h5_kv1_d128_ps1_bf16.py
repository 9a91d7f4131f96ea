"""Causal grouped-query attention prefill with a cached prefix over a paged KV cache (Llama-4
Scout at tensor parallel 8: 5 query heads sharing one KV head, head_dim 128, page size 1). The
54 sequences' bfloat16 queries are packed in ``q [10847, 5, 128]``: sequence ``b`` owns rows
``qo_indptr[b]:qo_indptr[b+1]`` and the pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of
``k_cache``/``v_cache`` ``[44264, 1, 1, 128]`` (10,945 KV tokens in all: each sequence has a
few more KV tokens than queries). The queries are the last positions of the
sequence: query ``i`` of a sequence with ``Lq`` queries and ``Lk`` keys attends to keys
``j ≤ i + Lk − Lq``. All query heads use the single KV head; scores are ``sm_scale · q·k``.
Outputs: ``output [10847, 5, 128]`` bfloat16 and ``lse [10847, 5]`` float32, the base-2
log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import PAGED_PREFILL

ID = "p05"
SLUG = "gqa_paged_prefill_causal_h5_kv1_d128_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_prefill_causal_h5_kv1_d128_ps1.json, "
    "workload record b84bca7b"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size, per-sequence query/KV lengths and sm_scale from the captured record. "
    "Per seed: the sequence order is shuffled (query and KV lengths move together), pages are a "
    "fresh random subset of the pool, and all values are redrawn (standard normal bf16)."
)
_Q_LENS = (
    5, 68, 1, 20, 19, 11, 29, 3, 6, 20, 34, 13, 109, 9, 6, 27, 9, 23, 20, 303, 267, 248, 75,
    48, 21, 8, 4, 434, 15, 316, 20, 14, 17, 48, 4, 12, 6, 149, 7, 6, 8, 749, 2051, 7, 95, 19,
    148, 6, 26, 73, 9, 11, 52, 5139,
)
_KV_LENS = (
    7, 69, 3, 21, 22, 12, 32, 4, 8, 22, 35, 15, 114, 12, 7, 31, 10, 24, 21, 305, 269, 250, 76,
    49, 22, 10, 5, 435, 16, 319, 21, 15, 18, 49, 7, 14, 8, 153, 9, 7, 10, 753, 2052, 9, 99, 20,
    150, 7, 27, 74, 10, 15, 53, 5140,
)
WORKLOAD = {
    "num_qo_heads": 5,
    "num_kv_heads": 1,
    "head_dim": 128,
    "page_size": 1,
    "num_pages": 44264,
    "q_lens": _Q_LENS,
    "kv_lens": _KV_LENS,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "num_pages": 96, "q_lens": (5, 1, 40, 3), "kv_lens": (7, 3, 41, 3)}
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p04 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = PAGED_PREFILL
