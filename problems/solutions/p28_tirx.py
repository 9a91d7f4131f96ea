"""p28 fused residual add + RMSNorm (bf16, hidden 4096) in TIRx.

One warp per row, four rows per 128-thread CTA, a single pass over DRAM: each lane loads its
128 elements of ``x`` and ``r`` (stride 32, coalesced), keeps ``s = x + r`` in an fp32 local
array (registers after unrolling) while summing ``s * s``, reduces with a warp shuffle sum and
writes ``s * rsqrt(mean + eps) * w`` as bf16.
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

EPS = 1e-5
HIDDEN = 4096
PER_LANE = HIDDEN // 32
ROWS_PER_CTA = 4


@T.prim_func
def _add_rmsnorm(x_ptr: T.handle, r_ptr: T.handle, w_ptr: T.handle, y_ptr: T.handle):
    rows = T.int32()
    X = T.match_buffer(x_ptr, (rows, HIDDEN), "bfloat16")
    R = T.match_buffer(r_ptr, (rows, HIDDEN), "bfloat16")
    W = T.match_buffer(w_ptr, (HIDDEN,), "bfloat16")
    Y = T.match_buffer(y_ptr, (rows, HIDDEN), "bfloat16")
    T.device_entry()
    cta = T.cta_id([T.ceildiv(rows, ROWS_PER_CTA)])
    tx = T.thread_id([32 * ROWS_PER_CTA])
    lane = tx % 32
    row = cta * ROWS_PER_CTA + tx // 32
    s = T.alloc_local((PER_LANE,), "float32")
    acc = T.alloc_local((1,), "float32")
    if row < rows:
        acc[0] = T.float32(0)
        for i in T.unroll(PER_LANE):
            s[i] = T.Cast("float32", X[row, lane + 32 * i]) + T.Cast(
                "float32", R[row, lane + 32 * i]
            )
            acc[0] = acc[0] + s[i] * s[i]
        total = T.cuda.warp_sum(acc[0])
        rstd = T.rsqrt(total / T.float32(HIDDEN) + T.float32(EPS))
        for i in T.unroll(PER_LANE):
            Y[row, lane + 32 * i] = T.Cast(
                "bfloat16", s[i] * rstd * T.Cast("float32", W[lane + 32 * i])
            )


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
    r = residual.contiguous()
    w = weight.contiguous()
    y = torch.empty_like(x)
    _kernel()(x, r, w, y)
    return y
