"""p28 fused residual add + RMSNorm (bf16, hidden 4096) in TIRx, 16-byte vector accesses.

One CTA of 256 threads per row. Thread ``t`` owns the 16-byte chunks ``t`` and ``t + 256`` of
the row (8 bf16 each), so every warp-wide access covers 512 contiguous bytes. Each thread
loads its two chunks of ``x``, ``r`` (and ``w``) once as ``uint4``, keeps ``s = x + r`` in 16
fp32 registers while summing ``s * s``, the CTA reduces with warp shuffles plus an 8-entry
shared-memory step (``T.cuda.cta_sum``), and the thread stores ``(s * rsqrt(mean + eps)) * w``
as bf16 with two ``uint4`` stores: one read of ``x`` and ``r``, one write of ``y`` (6 bytes
per element), 14,509 CTAs of low register use so that many rows are in flight per SM.

Measured on the H200 (2026-12-03, docs/solutions.md): 14.4 µs host, 81.7 µs device,
103 µs end to end (72.0 % of SOL).
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

EPS = 1e-5
HIDDEN = 4096
THREADS = 256
WARPS = THREADS // 32
CHUNKS = HIDDEN // (8 * THREADS)  # 16-byte chunks per thread (2)
PER_THREAD = 8 * CHUNKS  # elements per thread (16)


@T.prim_func
def _add_rmsnorm(x_ptr: T.handle, r_ptr: T.handle, w_ptr: T.handle, y_ptr: T.handle):
    rows = T.int32()
    X = T.match_buffer(x_ptr, (rows, HIDDEN), "bfloat16")
    R = T.match_buffer(r_ptr, (rows, HIDDEN), "bfloat16")
    W = T.match_buffer(w_ptr, (HIDDEN,), "bfloat16")
    Y = T.match_buffer(y_ptr, (rows, HIDDEN), "bfloat16")
    T.device_entry()
    row = T.cta_id([rows])
    tx = T.thread_id([THREADS])
    scratch = T.alloc_shared((WARPS,), "float32")
    xv = T.alloc_local((PER_THREAD,), "bfloat16")
    rv = T.alloc_local((PER_THREAD,), "bfloat16")
    wv = T.alloc_local((PER_THREAD,), "bfloat16")
    s = T.alloc_local((PER_THREAD,), "float32")
    acc = T.alloc_local((1,), "float32")
    for j in T.unroll(CHUNKS):
        for i in T.vectorized(8):
            xv[j * 8 + i] = X[row, (j * THREADS + tx) * 8 + i]
    for j in T.unroll(CHUNKS):
        for i in T.vectorized(8):
            rv[j * 8 + i] = R[row, (j * THREADS + tx) * 8 + i]
    for j in T.unroll(CHUNKS):
        for i in T.vectorized(8):
            wv[j * 8 + i] = W[(j * THREADS + tx) * 8 + i]
    acc[0] = T.float32(0)
    for i in T.unroll(PER_THREAD):
        s[i] = T.Cast("float32", xv[i]) + T.Cast("float32", rv[i])
        acc[0] = acc[0] + s[i] * s[i]
    total = T.cuda.cta_sum(acc[0], WARPS, scratch.data)
    rstd = T.rsqrt(total / T.float32(HIDDEN) + T.float32(EPS))
    for i in T.unroll(PER_THREAD):
        xv[i] = T.Cast("bfloat16", s[i] * rstd * T.Cast("float32", wv[i]))
    for j in T.unroll(CHUNKS):
        for i in T.vectorized(8):
            Y[row, (j * THREADS + tx) * 8 + i] = xv[j * 8 + i]


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
            tvm.IRModule({"main": _add_rmsnorm}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        _FN.append(exe["main"])
    return _FN[0]


def solve(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    if hidden_states.shape[-1] != HIDDEN:
        raise ValueError(f"this kernel is specialised to hidden size {HIDDEN}")
    x = hidden_states.contiguous()
    y = torch.empty_like(x)
    _kernel()(x, residual.contiguous(), weight.contiguous(), y)
    return y
