"""p02 GQA paged decode (5 query heads on 1 KV head, d 128, page size 1, bf16) in CuTe DSL.

Split-KV flash decoding. The kernel gives each sequence 32 warps (8 CTAs of 4 warps); warp
``w`` walks the sequence's pages ``w, w + 32, ...``. All five query heads share the KV head,
so a warp loads each K/V row once (4 values per lane) and updates five online softmaxes in
base 2 (scores pre-scaled by ``sm_scale * log2 e``): per head a warp-reduced dot product,
running max ``m``, running sum ``l`` and an unnormalised accumulator. Each warp writes its
partial (acc, m, l); eager PyTorch merges the 32 partials per head (a few small ops on 5 MB)
into the output and the base-2 log-sum-exp.
"""

from __future__ import annotations

import math
from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

HEADS = 5
DIM = 128
PER_LANE = DIM // 32
WARPS = 4
PARTS = 32
NEG_BIG = -3.0e38
LOG2E = 1.0 / math.log(2.0)


@cute.kernel
def _decode_partial_kernel(
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mIndptr: cute.Tensor,
    mIndices: cute.Tensor,
    mAcc: cute.Tensor,
    mM: cute.Tensor,
    mL: cute.Tensor,
    qscale: cutlass.Float32,
):
    tidx, _, _ = cute.arch.thread_idx()
    seq, blk, _ = cute.arch.block_idx()
    lane = tidx % 32
    part = blk * WARPS + tidx // 32
    q = cute.make_rmem_tensor((HEADS, PER_LANE), cutlass.Float32)
    acc = cute.make_rmem_tensor((HEADS, PER_LANE), cutlass.Float32)
    m = cute.make_rmem_tensor((HEADS,), cutlass.Float32)
    s_sum = cute.make_rmem_tensor((HEADS,), cutlass.Float32)
    kreg = cute.make_rmem_tensor((PER_LANE,), cutlass.Float32)
    vreg = cute.make_rmem_tensor((PER_LANE,), cutlass.Float32)
    for h in cutlass.range_constexpr(HEADS):
        m[h] = cutlass.Float32(NEG_BIG)
        s_sum[h] = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(PER_LANE):
            q[h, i] = mQ[seq, h, lane + 32 * i].to(cutlass.Float32) * qscale
            acc[h, i] = cutlass.Float32(0.0)
    start = mIndptr[seq]
    end = mIndptr[seq + 1]
    for t in cutlass.range(start + part, end, PARTS):
        page = mIndices[t]
        for i in cutlass.range_constexpr(PER_LANE):
            kreg[i] = mK[page, lane + 32 * i].to(cutlass.Float32)
            vreg[i] = mV[page, lane + 32 * i].to(cutlass.Float32)
        for h in cutlass.range_constexpr(HEADS):
            dot = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(PER_LANE):
                dot = dot + q[h, i] * kreg[i]
            score = cute.arch.warp_reduction_sum(dot)
            m_new = cute.arch.fmax(m[h], score)
            corr = cute.math.exp2(m[h] - m_new)
            p = cute.math.exp2(score - m_new)
            s_sum[h] = s_sum[h] * corr + p
            for i in cutlass.range_constexpr(PER_LANE):
                acc[h, i] = acc[h, i] * corr + p * vreg[i]
            m[h] = m_new
    for h in cutlass.range_constexpr(HEADS):
        for i in cutlass.range_constexpr(PER_LANE):
            mAcc[seq, h, part, lane + 32 * i] = acc[h, i]
        if lane == 0:
            mM[seq, h, part] = m[h]
            mL[seq, h, part] = s_sum[h]


@cute.jit
def _decode_partial(
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mIndptr: cute.Tensor,
    mIndices: cute.Tensor,
    mAcc: cute.Tensor,
    mM: cute.Tensor,
    mL: cute.Tensor,
    qscale: cutlass.Float32,
):
    _decode_partial_kernel(mQ, mK, mV, mIndptr, mIndices, mAcc, mM, mL, qscale).launch(
        grid=[mQ.shape[0], PARTS // WARPS, 1], block=[32 * WARPS, 1, 1]
    )


_CACHE: dict[tuple[int, ...], Any] = {}


def solve(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    batch, heads, dim = q.shape
    if heads != HEADS or dim != DIM or k_cache.shape[1] != 1 or k_cache.shape[2] != 1:
        raise ValueError("this kernel is specialised to 5 query heads, 1 KV head, d 128, ps 1")
    dev = q.device
    acc = torch.empty(batch, HEADS, PARTS, DIM, dtype=torch.float32, device=dev)
    m = torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=dev)
    s_sum = torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=dev)
    tensors = [
        q.contiguous(),
        k_cache.contiguous().view(-1, DIM),
        v_cache.contiguous().view(-1, DIM),
        kv_indptr.to(torch.int32).contiguous(),
        kv_indices.to(torch.int32).contiguous(),
        acc,
        m,
        s_sum,
    ]
    key = tuple(n for t in tensors for n in t.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = cute.compile(_decode_partial, *(from_dlpack(t) for t in tensors), cutlass.Float32(1.0))
        _CACHE[key] = fn
    fn(*(from_dlpack(t) for t in tensors), float(sm_scale) * LOG2E)
    m_max = m.amax(dim=-1, keepdim=True)
    weight = torch.exp2(m - m_max)
    total = (weight * s_sum).sum(dim=-1)
    out = (weight.unsqueeze(-1) * acc).sum(dim=-2) / total.unsqueeze(-1)
    lse = m_max.squeeze(-1) + torch.log2(total)
    return out.to(q.dtype), lse
