"""Causal grouped-query attention prefill over a paged KV cache (Llama-3.2-3B: 24 query heads,
8 KV heads, head_dim 128, page size 1). The 27 sequences' bfloat16 queries are packed in
``q [16372, 24, 128]``: sequence ``b`` owns rows ``qo_indptr[b]:qo_indptr[b+1]`` and the pages
``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of ``k_cache``/``v_cache`` ``[77646, 1, 8, 128]``
(here each sequence has as many KV tokens as queries). The queries are the last positions of the
sequence: query ``i`` of a sequence with ``Lq`` queries and ``Lk`` keys attends to keys
``j ≤ i + Lk − Lq``. Query head ``h`` uses KV head ``h // 3``; scores are ``sm_scale · q·k``.
Outputs: ``output [16372, 24, 128]`` bfloat16 and ``lse [16372, 24]`` float32, the base-2
log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import PAGED_PREFILL

ID = "p04"
SLUG = "gqa_paged_prefill_causal_h24_kv8_d128_ps1_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_prefill_causal_h24_kv8_d128_ps1.json, "
    "workload record 0b88caa4"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size, per-sequence query/KV lengths and sm_scale from the captured record. "
    "Per seed: the sequence order is shuffled (query and KV lengths move together), pages are a "
    "fresh random subset of the pool, and all values are redrawn (standard normal bf16)."
)
_LENS = (
    145, 166, 173, 402, 336, 346, 340, 342, 445, 354, 546, 447, 513, 538, 545, 775, 561, 715,
    825, 596, 940, 1081, 1150, 955, 963, 1250, 923,
)
WORKLOAD = {
    "num_qo_heads": 24,
    "num_kv_heads": 8,
    "head_dim": 128,
    "page_size": 1,
    "num_pages": 77646,
    "q_lens": _LENS,
    "kv_lens": _LENS,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "num_pages": 64, "q_lens": (9, 1, 20, 4), "kv_lens": (12, 1, 20, 9)}
INPUTS = ("q", "k_cache", "v_cache", "qo_indptr", "kv_indptr", "kv_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p05 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = PAGED_PREFILL
