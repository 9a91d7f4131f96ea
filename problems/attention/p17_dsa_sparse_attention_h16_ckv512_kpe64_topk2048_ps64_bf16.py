"""DeepSeek-V3.2 sparse (DSA) attention over a paged MLA cache, absorbed form, tensor-parallel
8: each of the T query tokens has 16 heads with a 512-channel latent query q_nope and a
64-channel rotary query q_pe (bfloat16). Keys come from a paged latent cache ckv [pages, 64,
512] and rotary cache kpe [pages, 64, 64] (bfloat16), addressed by flat token index
page · 64 + offset. Token t attends only to the up to 2048 cache tokens listed in
sparse_indices[t] (int32; −1 marks unused slots): logits = sm_scale · (q_nope·ckv + q_pe·kpe),
softmax over the selected tokens, output = Σ p · ckv (the latent values, [T, 16, 512]
bfloat16), and lse = log2 Σ exp(logits) per token and head ([T, 16] float32)."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn, randperm
from problems.spec import Cost, Workload

ID = "p17"
SLUG = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64_bf16"
FAMILY = "Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/dsa_paged/"
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.json, workload record 0f8137e0"
)
LICENSE = "Apache-2.0"
NOTES = (
    "sm_scale and the per-token selection counts are those of the record (one token selects "
    "2048 of a 2161-token context, in the record's exact runs of positions); the pages holding "
    "each token's context and all values are re-drawn per seed. Indices are listed in "
    "ascending order, padding (−1) at the end."
)
WORKLOAD = {
    "heads": 16, "ckv_dim": 512, "kpe_dim": 64, "page_size": 64, "topk": 2048, "pages": 6465,
    "sm_scale": 0.1352337788608801,
    "select_lens": (
        18, 11, 2048, 20, 25, 45, 135, 7, 8, 10, 22, 17, 11, 30, 130, 9, 600, 255, 1033, 1010,
        58, 2, 21, 954, 7, 14, 1015, 28, 64, 5, 18, 33, 26, 86, 5, 14, 10, 90, 53, 22, 2, 17,
        154, 51, 121, 25, 16, 5, 19, 12, 44, 124, 33, 1157, 9, 5, 1319, 300, 23, 35, 389, 8,
    ),
    "long_row": 2, "long_context": 2161,
    "long_row_runs": (
        (0, 53), (54, 10), (65, 25), (91, 11), (103, 42), (146, 12), (159, 65), (225, 7), (233, 3),
        (237, 40), (278, 1), (280, 12), (293, 13), (307, 8), (316, 1), (318, 5), (324, 4),
        (329, 3), (333, 3), (337, 21), (359, 14), (374, 1), (377, 1), (379, 24), (404, 110),
        (515, 13), (529, 20), (550, 6), (557, 41), (599, 16), (616, 14), (631, 15), (647, 10),
        (658, 6), (665, 24), (691, 11), (703, 15), (719, 10), (730, 21), (752, 21), (774, 26),
        (801, 28), (830, 7), (838, 11), (850, 1), (852, 12), (865, 18), (884, 5), (890, 1),
        (892, 1), (894, 9), (904, 11), (916, 10), (927, 12), (940, 4), (946, 23), (970, 7),
        (978, 6), (985, 29), (1015, 5), (1021, 22), (1045, 13), (1059, 37), (1097, 10), (1108, 42),
        (1151, 1), (1153, 30), (1184, 2), (1187, 31), (1219, 33), (1253, 8), (1262, 102),
        (1366, 54), (1421, 98), (1520, 19), (1540, 23), (1564, 7), (1572, 31), (1604, 35),
        (1640, 21), (1662, 4), (1668, 10), (1681, 4), (1688, 15), (1706, 4), (1711, 13), (1725, 3),
        (1729, 1), (1731, 3), (1736, 12), (1749, 47), (1798, 70), (1869, 108), (1978, 2),
        (1981, 9), (1992, 6), (1999, 31), (2031, 24), (2056, 105),
    ),
}
SMOKE = {
    "heads": 4, "ckv_dim": 32, "kpe_dim": 8, "page_size": 4, "topk": 16, "pages": 40,
    "sm_scale": 0.1352337788608801, "select_lens": (3, 16, 7, 1, 12, 5),
    "long_row": 1, "long_context": 21, "long_row_runs": ((0, 5), (6, 3), (10, 6), (18, 2)),
}
INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale")
OUTPUTS = ("output", "lse")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def _sparse_indices(g: torch.Generator, device: str, w: Workload) -> torch.Tensor:
    tokens = len(w.select_lens)
    contexts = [w.long_context if b == w.long_row else n for b, n in enumerate(w.select_lens)]
    pages_per_row = [-(-c // w.page_size) for c in contexts]
    perm = randperm(g, w.pages, device)[: sum(pages_per_row)]
    out = torch.full((tokens, w.topk), -1, dtype=torch.int32, device=device)
    cursor = 0
    for b, count in enumerate(w.select_lens):
        pages = perm[cursor : cursor + pages_per_row[b]]
        cursor += pages_per_row[b]
        if b == w.long_row:
            logical = torch.cat(
                [torch.arange(s, s + n, device=device) for s, n in w.long_row_runs]
            )
        else:
            logical = torch.arange(count, device=device)
        token = pages[logical // w.page_size] * w.page_size + logical % w.page_size
        out[b, :count] = token.sort().values.to(torch.int32)
    return out


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    tokens = len(w.select_lens)
    q_nope = randn(g, (tokens, w.heads, w.ckv_dim), torch.bfloat16, device)
    q_pe = randn(g, (tokens, w.heads, w.kpe_dim), torch.bfloat16, device)
    ckv = randn(g, (w.pages, w.page_size, w.ckv_dim), torch.bfloat16, device)
    kpe = randn(g, (w.pages, w.page_size, w.kpe_dim), torch.bfloat16, device)
    return [q_nope, q_pe, ckv, kpe, _sparse_indices(g, device, w), w.sm_scale]


def _gather(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices):
    dt = compute_dtype(q_nope, q_pe, ckv_cache, kpe_cache)
    invalid = sparse_indices < 0
    idx = sparse_indices.clamp(min=0).long()
    kc = ckv_cache.reshape(-1, ckv_cache.shape[-1])[idx].to(dt)  # [T, K, 512]
    kp = kpe_cache.reshape(-1, kpe_cache.shape[-1])[idx].to(dt)  # [T, K, 64]
    return dt, invalid, kc, kp, q_nope.to(dt), q_pe.to(dt)


def _finish(logits, invalid, kc, q_nope):
    logits = logits.masked_fill(invalid.unsqueeze(1), -math.inf)
    lse = torch.logsumexp(logits, dim=-1) / math.log(2.0)
    out = torch.softmax(logits, dim=-1) @ kc
    lse_dtype = torch.promote_types(q_nope.dtype, torch.float32)
    return out.to(q_nope.dtype), lse.to(lse_dtype)


def reference(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    dt, invalid, kc, kp, qn, qp = _gather(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices)
    logits = (qn @ kc.transpose(1, 2) + qp @ kp.transpose(1, 2)) * sm_scale
    return _finish(logits, invalid, kc, q_nope)


def dropped_term(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    """Mutant: forgets the rotary (q_pe · kpe) part of the logits."""
    dt, invalid, kc, kp, qn, qp = _gather(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices)
    logits = (qn @ kc.transpose(1, 2)) * sm_scale
    return _finish(logits, invalid, kc, q_nope)


def reordered(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    """Valid alternative: one concatenated 576-channel dot product, softmax numerator and
    denominator accumulated over two halves of the selection."""
    dt, invalid, kc, kp, qn, qp = _gather(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices)
    q = torch.cat((qn, qp), dim=-1) * sm_scale
    k = torch.cat((kc, kp), dim=-1)
    logits = (q @ k.transpose(1, 2)).masked_fill(invalid.unsqueeze(1), -math.inf)
    m = logits.amax(dim=-1, keepdim=True)
    half = logits.shape[-1] // 2
    num = torch.zeros_like(qn)
    den = torch.zeros_like(m)
    for sl in (slice(0, half), slice(half, None)):
        p = torch.exp(logits[..., sl] - m)
        num = num + p @ kc[:, sl]
        den = den + p.sum(-1, keepdim=True)
    lse = (m + torch.log(den)).squeeze(-1) / math.log(2.0)
    return (num / den).to(q_nope.dtype), lse.to(torch.promote_types(q_nope.dtype, torch.float32))


def cost(w: Workload) -> Cost:
    tokens = len(w.select_lens)
    selected = sum(w.select_lens)
    d_qk, d_v = w.ckv_dim + w.kpe_dim, w.ckv_dim
    flops = 2.0 * w.heads * selected * (d_qk + d_v)
    q_bytes = 2 * tokens * w.heads * d_qk
    kv_bytes = 2 * selected * d_qk  # each selected cache row read once
    out_bytes = 2 * tokens * w.heads * w.ckv_dim + 4 * tokens * w.heads
    idx_bytes = 4 * tokens * w.topk
    return Cost(flops={"bf16": flops, "fp32": 5.0 * w.heads * selected},
                bytes=float(q_bytes + kv_bytes + out_bytes + idx_bytes))
