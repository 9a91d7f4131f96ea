"""p02 GQA paged decode (5 query heads on 1 KV head, d 128, page size 1, bf16) in CuTe DSL,
called through TVM-FFI, with the merge of the partials in a second CuTe kernel.

Split-KV kernel: the first p02 CuTe solution's (2026-12-02), with the same arithmetic. Each sequence gets 32 warps (8 CTAs
of 4 warps); warp ``w`` walks the sequence's pages ``w, w + 32, ...``, loads each K/V row once
(4 values per lane) and updates five base-2 online softmaxes (scores pre-scaled by
``sm_scale * log2 e``), then writes its partial ``(acc, m, l)``. The only change: it reads
``k_cache``/``v_cache`` in their own ``[pages, 1, 1, 128]`` shape (``[page, 0, 0, d]``)
instead of a per-call ``.view(-1, 128)``.

Merge kernel (new; replaces the first p02 CuTe solution's (2026-12-02) eager merge, about ten PyTorch kernels): one warp
per (sequence, head), lane ``p`` holding partial ``p`` (32 partials = one warp):
``M = max_p m_p`` (warp max), ``w_p = 2^(m_p - M)``, ``L = sum_p w_p l_p`` (warp sum), and
for the lane's four output columns ``out[d] = (sum_p w_p acc[p, d]) / L`` (``w_p`` broadcast
by shuffle, ``p`` in order 0..31), written as bf16, and ``lse = M + log2 L`` (fp32). The
same formulas as the eager merge, in fp32; only the summation order can differ. Empty
partials (``m = -3e38``, ``l = 0``) get weight 0.

Both kernels are launched by one ``@cute.jit`` function, compiled once per shape with
``options="--enable-tvm-ffi"``: one TVM-FFI call per ``solve`` with the torch tensors and
the pre-scaled score factor as a Python float; the two launches are ordered on the same
stream. The 5 MB partial buffers are allocated once per (batch, device) and reused (each call
overwrites every partial before the merge reads it, in stream order); the outputs are fresh
tensors. No ``from_dlpack``, ``.contiguous()``, ``.to(int32)`` or ``.view`` per call:
TVM-FFI checks shape, strides, dtype (int32 indices) and device of every tensor.

No eager glue remains. Expected on the H200: ~15-20 µs of host time (two ``torch.empty``, one
TVM-FFI call) instead of 284 µs; device time: the split kernel (latency-bound on the longest
sequence, 5,668 pages over 32 warps) plus a ~3 µs merge instead of the eager merge's ten
kernels. Measured on the H200 (2026-12-03, docs/solutions.md): 26.3 µs host, 173 µs device, 239 µs end to end (0.9 % of SOL).
"""

from __future__ import annotations

import math
from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

HEADS = 5
DIM = 128
PER_LANE = DIM // 32
WARPS = 4
PARTS = 32  # partials per sequence: exactly one warp's lanes in the merge
NEG_BIG = -3.0e38
LOG2E = 1.0 / math.log(2.0)
MERGE_WARPS = 4


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
            kreg[i] = mK[page, 0, 0, lane + 32 * i].to(cutlass.Float32)
            vreg[i] = mV[page, 0, 0, lane + 32 * i].to(cutlass.Float32)
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


@cute.kernel
def _merge_kernel(
    mAcc: cute.Tensor, mM: cute.Tensor, mL: cute.Tensor, mOut: cute.Tensor, mLse: cute.Tensor
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    pair = bidx * MERGE_WARPS + tidx // 32  # one (sequence, head) per warp: warp-uniform
    if pair < mAcc.shape[0] * HEADS:
        seq = pair // HEADS
        h = pair - seq * HEADS
        m_p = mM[seq, h, lane]
        l_p = mL[seq, h, lane]
        m_max = cute.arch.warp_reduction_max(m_p)
        w_p = cute.math.exp2(m_p - m_max)
        total = cute.arch.warp_reduction_sum(w_p * l_p)
        out = cute.make_rmem_tensor((PER_LANE,), cutlass.Float32)
        for i in cutlass.range_constexpr(PER_LANE):
            out[i] = cutlass.Float32(0.0)
        for p in cutlass.range_constexpr(PARTS):
            w = cute.arch.shuffle_sync(w_p, p)
            for i in cutlass.range_constexpr(PER_LANE):
                out[i] = out[i] + w * mAcc[seq, h, p, lane + 32 * i]
        for i in cutlass.range_constexpr(PER_LANE):
            mOut[seq, h, lane + 32 * i] = (out[i] / total).to(cutlass.BFloat16)
        if lane == 0:
            mLse[seq, h] = m_max + cute.math.log2(total)


@cute.jit
def _decode(
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mIndptr: cute.Tensor,
    mIndices: cute.Tensor,
    mAcc: cute.Tensor,
    mM: cute.Tensor,
    mL: cute.Tensor,
    mOut: cute.Tensor,
    mLse: cute.Tensor,
    qscale: cutlass.Float32,
):
    batch = mQ.shape[0]
    _decode_partial_kernel(mQ, mK, mV, mIndptr, mIndices, mAcc, mM, mL, qscale).launch(
        grid=[batch, PARTS // WARPS, 1], block=[32 * WARPS, 1, 1]
    )
    merge_ctas = (batch * HEADS + MERGE_WARPS - 1) // MERGE_WARPS
    _merge_kernel(mAcc, mM, mL, mOut, mLse).launch(
        grid=[merge_ctas, 1, 1], block=[32 * MERGE_WARPS, 1, 1]
    )


_CACHE: dict[tuple[object, ...], Any] = {}
_SCRATCH: dict[tuple[object, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _scratch(batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The partial buffers (acc, m, l) for this batch size, allocated once."""
    key = (batch, device)
    bufs = _SCRATCH.get(key)
    if bufs is None:
        bufs = (
            torch.empty(batch, HEADS, PARTS, DIM, dtype=torch.float32, device=device),
            torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=device),
            torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=device),
        )
        _SCRATCH[key] = bufs
    return bufs


def _compile(tensors: list[torch.Tensor], key: tuple) -> Any:
    q, k_cache = tensors[0], tensors[1]
    if q.shape[1:] != (HEADS, DIM) or k_cache.shape[1:] != (1, 1, DIM):
        raise ValueError("this kernel is specialised to 5 query heads, 1 KV head, d 128, ps 1")
    fn = cute.compile(
        _decode,
        *(from_dlpack(t) for t in tensors),
        cutlass.Float32(1.0),
        options="--enable-tvm-ffi",
    )
    _CACHE[key] = fn
    return fn


def solve(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    acc, m, s_sum = _scratch(q.shape[0], q.device)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    key = (q.shape, k_cache.shape, kv_indices.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile([q, k_cache, v_cache, kv_indptr, kv_indices, acc, m, s_sum, out, lse], key)
    qscale = float(sm_scale) * LOG2E
    fn(q, k_cache, v_cache, kv_indptr, kv_indices, acc, m, s_sum, out, lse, qscale)
    return out, lse
