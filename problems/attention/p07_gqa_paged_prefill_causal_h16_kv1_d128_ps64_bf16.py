"""Causal grouped-query attention prefill over a paged KV cache with 64-token pages (Qwen3-235B-A22B
at tensor parallel 4: 16 query heads sharing one KV head, head_dim 128). The 15 sequences'
bfloat16 queries are packed in ``q [969, 16, 128]``: sequence ``b`` owns rows ``qo_indptr[b]:qo_indptr[b+1]`` and the pages
``kv_indices[kv_indptr[b]:kv_indptr[b+1]]`` of ``k_cache``/``v_cache`` ``[4166, 64, 1, 128]``;
every page is full except the last, which holds ``kv_last_page_len[b]`` tokens, so the sequence
has ``Lk = (num_pages_b − 1)·64 + kv_last_page_len[b]`` KV tokens (about 64 times its ``Lq``
queries in this capture). The queries are the last positions of the sequence: query ``i``
attends to keys ``j ≤ i + Lk − Lq``. All query heads use the single KV head; scores are
``sm_scale · q·k``. Outputs: ``output [969, 16, 128]`` bfloat16 and ``lse [969, 16]`` float32,
the base-2 log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import PAGED_PREFILL_LAST_PAGE

ID = "p07"
SLUG = "gqa_paged_prefill_causal_h16_kv1_d128_ps64_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_paged/gqa_paged_prefill_causal_h16_kv1_d128_ps64.json, "
    "workload record 820d93c0"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry, pool size, query lengths, page counts, last-page lengths (all 1) and sm_scale "
    "from the captured record, in which qo_indptr equals kv_indptr numerically although the "
    "latter counts 64-token pages; kept as captured, so each sequence has a long cached prefix. "
    "Per seed: the sequence order is shuffled, pages are a fresh random subset of the pool, and "
    "all values are redrawn (standard normal bf16). "
    "The caches are 0.14 GB in bf16."
)
_LENS = (17, 62, 93, 270, 16, 17, 5, 50, 10, 8, 47, 3, 12, 19, 340)
WORKLOAD = {
    "num_qo_heads": 16,
    "num_kv_heads": 1,
    "head_dim": 128,
    "page_size": 64,
    "num_pages": 4166,
    "q_lens": _LENS,
    "kv_pages": _LENS,
    "kv_last_page_len": (1,) * 15,
    "sm_scale": 0.08838834764831843,
}
SMOKE = {
    **WORKLOAD,
    "num_pages": 10,
    "q_lens": (3, 30, 24),
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

# Generator, reference, mutant, valid reordering and cost are those of p06 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = PAGED_PREFILL_LAST_PAGE
