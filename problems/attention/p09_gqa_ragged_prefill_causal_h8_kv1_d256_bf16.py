"""Causal grouped-query attention prefill over ragged (variable-length) q/k/v (Qwen3-Next-80B-A3B
at tensor parallel 2: 8 query heads sharing one KV head, head_dim 256). The 63 sequences are
packed: sequence ``b`` owns query rows ``qo_indptr[b]:qo_indptr[b+1]`` of ``q [3053, 8, 256]``
and key / value rows ``kv_indptr[b]:kv_indptr[b+1]`` of ``k``/``v`` ``[4841, 1, 256]`` (bfloat16); each
sequence has ``Lk ≥ Lq`` keys (a cached prefix followed by the new tokens). Query ``i`` attends
to keys ``j ≤ i + Lk − Lq``; all query heads use the single KV head; scores are
``sm_scale · q·k``. Outputs: ``output [3053, 8, 256]`` bfloat16 and ``lse [3053, 8]``
float32, the base-2 log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import RAGGED_PREFILL

ID = "p09"
SLUG = "gqa_ragged_prefill_causal_h8_kv1_d256_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_ragged/gqa_ragged_prefill_causal_h8_kv1_d256.json, "
    "workload record 96ee50a6"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Query lengths and sm_scale (0.0884, as captured, although head_dim is 256) from the "
    "captured record; the cached-prefix lengths (0..64 per sequence, 1,788 in all) are the "
    "fixed ones authored by the public MetaKernelBench "
    "(YIGE24/MetaKernelBench problems/attention/09_*). Per seed: the sequence order is shuffled "
    "(query and prefix lengths move together) and all values are redrawn (standard normal bf16)."
)
WORKLOAD = {
    "num_qo_heads": 8,
    "num_kv_heads": 1,
    "head_dim": 256,
    "q_lens": (
        35, 71, 76, 69, 62, 52, 61, 39, 102, 94, 64, 44, 63, 37, 49, 56, 53, 58, 47, 18, 61, 83, 49,
        63, 64, 19, 82, 63, 17, 39, 59, 46, 66, 86, 41, 58, 36, 41, 33, 18, 19, 25, 32, 39, 68, 47,
        73, 41, 50, 13, 27, 59, 22, 29, 66, 23, 20, 37, 32, 40, 19, 55, 43,
    ),
    "prefix_lens": (
        0, 64, 17, 39, 5, 58, 26, 44, 11, 0, 33, 61, 8, 22, 49, 0, 14, 55, 30, 3, 41, 64, 19, 7,
        36, 0, 52, 24, 60, 13, 28, 46, 1, 0, 57, 20, 35, 9, 63, 42, 16, 0, 50, 27, 4, 38, 59, 23,
        12, 45, 0, 31, 54, 18, 6, 40, 62, 29, 15, 48, 0, 34, 21,
    ),
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "q_lens": (7, 1, 24, 3), "prefix_lens": (0, 5, 9, 0)}
INPUTS = ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p08 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = RAGGED_PREFILL
