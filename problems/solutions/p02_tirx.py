"""p02 GQA paged decode (5 query heads on 1 KV head, d 128, page size 1, bf16) in TIRx.

Split-KV flash decoding. The kernel gives each sequence 32 warps (8 CTAs of 4 warps); warp
``w`` walks the sequence's pages ``w, w + 32, ...``. All five query heads share the KV head,
so a warp loads each K/V row once (4 values per lane) and updates five online softmaxes in
base 2 (scores pre-scaled by ``sm_scale * log2 e``): per head a warp-summed dot product,
running max ``m``, running sum ``l`` and an unnormalised accumulator, all in registers. Each
warp writes its partial (acc, m, l); eager PyTorch merges the 32 partials per head into the
output and the base-2 log-sum-exp.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import tvm
from tvm.script import tirx as T

HEADS = 5
DIM = 128
PER_LANE = DIM // 32
WARPS = 4
PARTS = 32
NEG_BIG = -3.0e38
LOG2E = 1.0 / math.log(2.0)


@T.prim_func
def _decode_partial(
    q_ptr: T.handle,
    k_ptr: T.handle,
    v_ptr: T.handle,
    indptr_ptr: T.handle,
    indices_ptr: T.handle,
    acc_ptr: T.handle,
    m_ptr: T.handle,
    l_ptr: T.handle,
    qscale: T.float32,
):
    batch = T.int32()
    pages = T.int32()
    tokens = T.int32()
    Q = T.match_buffer(q_ptr, (batch, HEADS, DIM), "bfloat16")
    K = T.match_buffer(k_ptr, (pages, DIM), "bfloat16")
    V = T.match_buffer(v_ptr, (pages, DIM), "bfloat16")
    Indptr = T.match_buffer(indptr_ptr, (batch + 1,), "int32")
    Indices = T.match_buffer(indices_ptr, (tokens,), "int32")
    Acc = T.match_buffer(acc_ptr, (batch, HEADS, PARTS, DIM), "float32")
    M = T.match_buffer(m_ptr, (batch, HEADS, PARTS), "float32")
    L = T.match_buffer(l_ptr, (batch, HEADS, PARTS), "float32")
    T.device_entry()
    seq, blk = T.cta_id([batch, PARTS // WARPS])
    tx = T.thread_id([32 * WARPS])
    lane = tx % 32
    part = blk * WARPS + tx // 32
    q = T.alloc_local((HEADS * PER_LANE,), "float32")
    acc = T.alloc_local((HEADS * PER_LANE,), "float32")
    m = T.alloc_local((HEADS,), "float32")
    s_sum = T.alloc_local((HEADS,), "float32")
    kreg = T.alloc_local((PER_LANE,), "float32")
    vreg = T.alloc_local((PER_LANE,), "float32")
    dot = T.alloc_local((1,), "float32")
    for h in T.unroll(HEADS):
        m[h] = T.float32(NEG_BIG)
        s_sum[h] = T.float32(0)
        for i in T.unroll(PER_LANE):
            q[h * PER_LANE + i] = T.Cast("float32", Q[seq, h, lane + 32 * i]) * qscale
            acc[h * PER_LANE + i] = T.float32(0)
    start = Indptr[seq]
    count = Indptr[seq + 1] - start
    for t in T.serial(T.ceildiv(count, PARTS)):
        pos = t * PARTS + part
        if pos < count:
            page = Indices[start + pos]
            for i in T.unroll(PER_LANE):
                kreg[i] = T.Cast("float32", K[page, lane + 32 * i])
                vreg[i] = T.Cast("float32", V[page, lane + 32 * i])
            for h in T.unroll(HEADS):
                dot[0] = T.float32(0)
                for i in T.unroll(PER_LANE):
                    dot[0] = dot[0] + q[h * PER_LANE + i] * kreg[i]
                score = T.cuda.warp_sum(dot[0])
                m_new = T.max(m[h], score)
                corr = T.exp2(m[h] - m_new)
                p = T.exp2(score - m_new)
                s_sum[h] = s_sum[h] * corr + p
                for i in T.unroll(PER_LANE):
                    acc[h * PER_LANE + i] = acc[h * PER_LANE + i] * corr + p * vreg[i]
                m[h] = m_new
    for h in T.unroll(HEADS):
        for i in T.unroll(PER_LANE):
            Acc[seq, h, part, lane + 32 * i] = acc[h * PER_LANE + i]
        if lane == 0:
            M[seq, h, part] = m[h]
            L[seq, h, part] = s_sum[h]


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_90a on an H200; sm_90a when no GPU is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_90a"}


_EXE: list[Any] = []
_FN: list[Any] = []


def _kernel() -> Any:
    """The device function, built once (NVRTC compiles it at its first call)."""
    if not _FN:
        exe = tvm.compile(
            tvm.IRModule({"main": _decode_partial}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        _FN.append(exe["main"])
    return _FN[0]


def solve(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale: float):
    batch, heads, dim = q.shape
    if heads != HEADS or dim != DIM or k_cache.shape[1] != 1 or k_cache.shape[2] != 1:
        raise ValueError("this kernel is specialised to 5 query heads, 1 KV head, d 128, ps 1")
    dev = q.device
    acc = torch.empty(batch, HEADS, PARTS, DIM, dtype=torch.float32, device=dev)
    m = torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=dev)
    s_sum = torch.empty(batch, HEADS, PARTS, dtype=torch.float32, device=dev)
    _kernel()(
        q.contiguous(),
        k_cache.contiguous().view(-1, DIM),
        v_cache.contiguous().view(-1, DIM),
        kv_indptr.to(torch.int32).contiguous(),
        kv_indices.to(torch.int32).contiguous(),
        acc,
        m,
        s_sum,
        float(sm_scale) * LOG2E,
    )
    m_max = m.amax(dim=-1, keepdim=True)
    weight = torch.exp2(m - m_max)
    total = (weight * s_sum).sum(dim=-1)
    out = (weight.unsqueeze(-1) * acc).sum(dim=-2) / total.unsqueeze(-1)
    lse = m_max.squeeze(-1) + torch.log2(total)
    return out.to(q.dtype), lse
