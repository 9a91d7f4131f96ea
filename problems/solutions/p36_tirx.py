"""p36 RMSNorm over 128 channels (bf16, 520,128 rows) in TIRx, 16-byte vector accesses.

Eight lanes per row, four rows per warp, 32 rows per 256-thread CTA. Lane ``l`` of a row owns
the 16-byte chunks ``l`` and ``l + 8`` (8 bf16 each), so every warp-wide access covers whole
contiguous 128-byte segments. Each lane loads its two chunks of ``x`` once (``uint4``), sums
the squares in fp32, reduces over its 8 lanes with shuffles (xor 4, 2, 1), and stores
``(x * rsqrt(mean + eps)) * w`` as bf16 with two ``uint4`` stores: one read of ``x``, one write
of ``y`` (4 bytes per element). Rows past the end of a partial last CTA read the last row (so
every lane takes part in the shuffles) and store nothing.

Measured on the H200 (session 6, docs/solutions.md): 14.5 µs host, 65.2 µs device,
83.7 µs end to end (66.3 % of SOL).
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

EPS = 1e-6
HIDDEN = 128
LANES_PER_ROW = 8  # 8 lanes x 2 chunks x 8 bf16 = 128 channels
ROWS_PER_CTA = 32  # 256 threads
THREADS = LANES_PER_ROW * ROWS_PER_CTA


@T.prim_func
def _rmsnorm(x_ptr: T.handle, w_ptr: T.handle, y_ptr: T.handle):
    rows = T.int32()
    X = T.match_buffer(x_ptr, (rows, HIDDEN), "bfloat16")
    W = T.match_buffer(w_ptr, (HIDDEN,), "bfloat16")
    Y = T.match_buffer(y_ptr, (rows, HIDDEN), "bfloat16")
    T.device_entry()
    cta = T.cta_id([T.ceildiv(rows, ROWS_PER_CTA)])
    tx = T.thread_id([THREADS])
    sub = tx % LANES_PER_ROW
    row = cta * ROWS_PER_CTA + tx // LANES_PER_ROW
    src = T.min(row, rows - 1)
    xv = T.alloc_local((16,), "bfloat16")
    wv = T.alloc_local((16,), "bfloat16")
    f = T.alloc_local((16,), "float32")
    acc = T.alloc_local((1,), "float32")
    for j in T.unroll(2):
        for i in T.vectorized(8):
            xv[j * 8 + i] = X[src, (j * LANES_PER_ROW + sub) * 8 + i]
    for j in T.unroll(2):
        for i in T.vectorized(8):
            wv[j * 8 + i] = W[(j * LANES_PER_ROW + sub) * 8 + i]
    acc[0] = T.float32(0)
    for i in T.unroll(16):
        f[i] = T.Cast("float32", xv[i])
        acc[0] = acc[0] + f[i] * f[i]
    total = T.cuda.warp_sum(acc[0], LANES_PER_ROW)
    rstd = T.rsqrt(total / T.float32(HIDDEN) + T.float32(EPS))
    for i in T.unroll(16):
        xv[i] = T.Cast("bfloat16", f[i] * rstd * T.Cast("float32", wv[i]))
    if row < rows:
        for j in T.unroll(2):
            for i in T.vectorized(8):
                Y[row, (j * LANES_PER_ROW + sub) * 8 + i] = xv[j * 8 + i]


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
            tvm.IRModule({"main": _rmsnorm}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        _FN.append(exe["main"])
    return _FN[0]


def solve(hidden_states: torch.Tensor, weight: torch.Tensor):
    if hidden_states.shape[-1] != HIDDEN:
        raise ValueError(f"this kernel is specialised to hidden size {HIDDEN}")
    x = hidden_states.contiguous()
    y = torch.empty_like(x)
    _kernel()(x, weight.contiguous(), y)
    return y
