"""p36 RMSNorm over 128 channels (bf16, 520,128 rows) in CuTe DSL, called through TVM-FFI.

The kernel is p36_cute_dlpack.py's (one warp per row, eight rows per 256-thread CTA, fp32 warp-sum,
one read and one write of the tensor). Only the call path differs: the function is compiled
once per shape with ``options="--enable-tvm-ffi"`` and then called with the torch tensors
themselves, with no ``from_dlpack`` wrapper per call. On the H200 that call path took 15.5 µs
of host time instead of 71.5 µs (101 µs end to end instead of 155 µs). Measured on the H200 (2026-12-03, docs/solutions.md): 14.6 µs host, 84.3 µs device, 100 µs end to end (55.4 % of SOL).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

EPS = 1e-6
ROWS_PER_CTA = 8
THREADS = 32 * ROWS_PER_CTA


@cute.kernel
def _rmsnorm_kernel(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    row = bidx * ROWS_PER_CTA + tidx // 32
    num_rows = mX.shape[0]
    hidden = mX.shape[1]
    if row < num_rows:
        acc = cutlass.Float32(0.0)
        for j in cutlass.range(lane, hidden, 32, unroll_full=True):
            s = mX[row, j].to(cutlass.Float32)
            acc = acc + s * s
        acc = cute.arch.warp_reduction_sum(acc)
        rstd = cute.math.rsqrt(acc / cutlass.Float32(hidden) + eps)
        for j in cutlass.range(lane, hidden, 32, unroll_full=True):
            s = mX[row, j].to(cutlass.Float32)
            mY[row, j] = (s * rstd * mW[j].to(cutlass.Float32)).to(cutlass.BFloat16)


@cute.jit
def _rmsnorm(mX: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32):
    ctas = (mX.shape[0] + ROWS_PER_CTA - 1) // ROWS_PER_CTA
    _rmsnorm_kernel(mX, mW, mY, eps).launch(grid=[ctas, 1, 1], block=[THREADS, 1, 1])


_CACHE: dict[tuple[int, ...], Any] = {}


def _compile(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> Any:
    """The TVM-FFI launcher for these shapes (compiled once per shape; TVM-FFI checks the
    shapes and dtypes of the torch tensors at every call)."""
    key = (*x.shape,)
    fn = _CACHE.get(key)
    if fn is None:
        fn = cute.compile(
            _rmsnorm,
            from_dlpack(x),
            from_dlpack(w),
            from_dlpack(y),
            cutlass.Float32(EPS),
            options="--enable-tvm-ffi",
        )
        _CACHE[key] = fn
    return fn


def solve(hidden_states: torch.Tensor, weight: torch.Tensor):
    x = hidden_states.contiguous()
    w = weight.contiguous()
    y = torch.empty_like(x)
    fn = _compile(x, w, y)
    fn(x, w, y, EPS)  # torch tensors and a Python float, straight through TVM-FFI
    return y
