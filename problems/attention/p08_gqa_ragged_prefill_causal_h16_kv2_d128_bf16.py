"""Causal grouped-query attention prefill over ragged (variable-length) q/k/v (Qwen3-32B at
tensor parallel 4: 16 query heads, 2 KV heads, head_dim 128). The 71 sequences are packed:
sequence ``b`` owns query rows ``qo_indptr[b]:qo_indptr[b+1]`` of ``q [15687, 16, 128]`` and key /
value rows ``kv_indptr[b]:kv_indptr[b+1]`` of ``k``/``v`` ``[17699, 2, 128]`` (bfloat16); each
sequence has ``Lk ≥ Lq`` keys (a cached prefix followed by the new tokens). Query ``i`` attends
to keys ``j ≤ i + Lk − Lq``; query head ``h`` uses KV head ``h // 8``; scores are
``sm_scale · q·k``. Outputs: ``output [15687, 16, 128]`` bfloat16 and ``lse [15687, 16]``
float32, the base-2 log-sum-exp of the masked scaled scores (``logsumexp / ln 2``)."""

from __future__ import annotations

from problems.attention._gqa import RAGGED_PREFILL

ID = "p08"
SLUG = "gqa_ragged_prefill_causal_h16_kv2_d128_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gqa_ragged/gqa_ragged_prefill_causal_h16_kv2_d128.json, "
    "workload record 560c22ab"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Query lengths and sm_scale from the captured record; the cached-prefix lengths (0..64 per "
    "sequence, 2,012 in all) are the fixed ones authored by the public MetaKernelBench "
    "(YIGE24/MetaKernelBench problems/attention/08_*). Per seed: the sequence order is shuffled "
    "(query and prefix lengths move together) and all values are redrawn (standard normal bf16)."
)
WORKLOAD = {
    "num_qo_heads": 16,
    "num_kv_heads": 2,
    "head_dim": 128,
    "q_lens": (
        133, 181, 9, 8, 14, 43, 24, 29, 2383, 2678, 314, 14, 420, 134, 4, 15, 43, 2024, 23, 1618,
        1086, 300, 49, 7, 340, 422, 1, 68, 18, 7, 74, 3, 20, 21, 12, 31, 3, 7, 21, 40, 14, 107, 11,
        6, 30, 9, 26, 24, 301, 266, 247, 75, 49, 23, 9, 4, 441, 15, 349, 27, 14, 17, 54, 6, 13, 8,
        147, 8, 7, 9, 730,
    ),
    "prefix_lens": (
        0, 64, 17, 39, 5, 58, 26, 44, 11, 0, 33, 61, 8, 22, 49, 0, 14, 55, 30, 3, 41, 64, 19, 7,
        36, 0, 52, 24, 60, 13, 28, 46, 1, 0, 57, 20, 35, 9, 63, 42, 16, 0, 50, 27, 4, 38, 59, 23,
        12, 45, 0, 31, 54, 18, 6, 40, 62, 29, 15, 48, 0, 34, 21, 51, 10, 56, 2, 43, 25, 37, 0,
    ),
    "sm_scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "q_lens": (7, 1, 24, 3), "prefix_lens": (0, 5, 9, 0)}
INPUTS = ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None

# Generator, reference, mutant, valid reordering and cost are those of p09 (the same
# layout with other geometry): see problems/attention/_gqa.py.
make_inputs, reference, dropped_term, reordered, cost = RAGGED_PREFILL
