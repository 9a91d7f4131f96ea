"""p72 gated delta-net decode step (Qwen3-Next: 8 q/k heads, 16 v heads, d 128) in TIRx.

The first solution of this problem, kept as a variant: ``p72_tirx.py`` replaced it on 2026-12-03.

Hybrid: the per-(batch, head) gates ``g = exp(-exp(A_log) * softplus(a + dt_bias))`` and
``beta = sigmoid(b)`` are 1,024 scalars, computed in eager PyTorch. The kernel does the
state work in one pass: each warp owns one row ``v`` of one head's k-last state ``S[v, :]``
(128 fp32), so with ``gS = g * S[v, :]`` it computes ``v_old = gS . k`` (warp sum),
``S'[v, :] = gS + beta * (v[v] - v_old) * k`` (written to the new state) and
``out[v] = scale * S'[v, :] . q`` (second warp sum).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

ROWS_PER_CTA = 4


@T.prim_func
def _gdn_decode(
    s_ptr: T.handle,
    q_ptr: T.handle,
    k_ptr: T.handle,
    v_ptr: T.handle,
    g_ptr: T.handle,
    beta_ptr: T.handle,
    s_out_ptr: T.handle,
    out_ptr: T.handle,
    heads_v: T.int32,
    group: T.int32,
    scale: T.float32,
):
    rows = T.int32()
    dim = T.int32()
    qk_rows = T.int32()
    heads = T.int32()
    S = T.match_buffer(s_ptr, (rows, dim), "float32")
    Q = T.match_buffer(q_ptr, (qk_rows, dim), "bfloat16")
    K = T.match_buffer(k_ptr, (qk_rows, dim), "bfloat16")
    V = T.match_buffer(v_ptr, (rows,), "bfloat16")
    G = T.match_buffer(g_ptr, (heads,), "float32")
    Beta = T.match_buffer(beta_ptr, (heads,), "float32")
    S_out = T.match_buffer(s_out_ptr, (rows, dim), "float32")
    Out = T.match_buffer(out_ptr, (rows,), "bfloat16")
    T.device_entry()
    cta = T.cta_id([T.ceildiv(rows, ROWS_PER_CTA)])
    tx = T.thread_id([32 * ROWS_PER_CTA])
    lane = tx % 32
    row = cta * ROWS_PER_CTA + tx // 32
    acc = T.alloc_local((1,), "float32")
    acc2 = T.alloc_local((1,), "float32")
    if row < rows:
        bh = row // dim
        batch = bh // heads_v
        head = bh % heads_v
        qk = batch * (heads_v // group) + head // group
        gate = G[bh]
        acc[0] = T.float32(0)
        for t in T.serial(T.ceildiv(dim, 32)):
            j = t * 32 + lane
            if j < dim:
                acc[0] = acc[0] + (gate * S[row, j]) * T.Cast("float32", K[qk, j])
        v_old = T.cuda.warp_sum(acc[0])
        delta = Beta[bh] * (T.Cast("float32", V[row]) - v_old)
        acc2[0] = T.float32(0)
        for t in T.serial(T.ceildiv(dim, 32)):
            j = t * 32 + lane
            if j < dim:
                s_new = gate * S[row, j] + delta * T.Cast("float32", K[qk, j])
                S_out[row, j] = s_new
                acc2[0] = acc2[0] + s_new * T.Cast("float32", Q[qk, j])
        o = T.cuda.warp_sum(acc2[0])
        if lane == 0:
            Out[row] = T.Cast("bfloat16", scale * o)


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
            tvm.IRModule({"main": _gdn_decode}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        _FN.append(exe["main"])
    return _FN[0]


def solve(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    dim = q.shape[-1]
    heads_qk = q.shape[2]
    heads_v = v.shape[2]
    g = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    beta = torch.sigmoid(b.float())
    new_state = torch.empty_like(state)
    out = torch.empty_like(v)
    _kernel()(
        state.contiguous().view(-1, dim),
        q.contiguous().view(-1, dim),
        k.contiguous().view(-1, dim),
        v.contiguous().view(-1),
        g.contiguous().view(-1),
        beta.contiguous().view(-1),
        new_state.view(-1, dim),
        out.view(-1),
        heads_v,
        heads_v // heads_qk,
        float(scale),
    )
    return out, new_state
