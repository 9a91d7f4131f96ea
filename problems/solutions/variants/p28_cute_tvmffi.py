"""p28 fused residual add + RMSNorm (bf16, hidden 4096) in CuTe DSL, called through TVM-FFI.

The kernel is first p28 CuTe solution's (2026-12-02), unchanged (one warp per row, four rows per 128-thread CTA, each
lane keeps its 128 values of ``s = x + r`` in fp32 registers, warp-shuffle sum of squares,
``s * rsqrt(mean + eps) * w`` written as bf16; one read of ``x``, ``r``, one write of ``y``).
Only the call path differs: compiled once per shape with ``options="--enable-tvm-ffi"`` and
then called with the torch tensors and a Python float, with no ``from_dlpack`` and no
``.contiguous()`` per call (TVM-FFI checks shape, strides, dtype and device of each tensor at
the call and raises on a mismatch, so a non-contiguous input fails loudly instead of being
misread). Per call: one ``torch.empty_like``, one dict lookup, one TVM-FFI call. Expected on
the H200: ~15 µs of host time (p36's kernel on this path: 15.5 µs) instead of 149 µs, device
time unchanged (~272 µs), so ~285 µs end to end instead of 415 µs. No eager glue. Measured on the H200 (2026-12-03, docs/solutions.md): 14.5 µs host, 257 µs device, 280 µs end to end (26.6 % of SOL).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

EPS = 1e-5
HIDDEN = 4096
PER_LANE = HIDDEN // 32
ROWS_PER_CTA = 4
THREADS = 32 * ROWS_PER_CTA


@cute.kernel
def _add_rmsnorm_kernel(
    mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    row = bidx * ROWS_PER_CTA + tidx // 32
    if row < mX.shape[0]:
        s = cute.make_rmem_tensor((PER_LANE,), cutlass.Float32)
        acc = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(PER_LANE):
            v = mX[row, lane + 32 * i].to(cutlass.Float32) + mR[row, lane + 32 * i].to(
                cutlass.Float32
            )
            s[i] = v
            acc = acc + v * v
        acc = cute.arch.warp_reduction_sum(acc)
        rstd = cute.math.rsqrt(acc / cutlass.Float32(HIDDEN) + eps)
        for i in cutlass.range_constexpr(PER_LANE):
            w = mW[lane + 32 * i].to(cutlass.Float32)
            mY[row, lane + 32 * i] = (s[i] * rstd * w).to(cutlass.BFloat16)


@cute.jit
def _add_rmsnorm(
    mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32
):
    ctas = (mX.shape[0] + ROWS_PER_CTA - 1) // ROWS_PER_CTA
    _add_rmsnorm_kernel(mX, mR, mW, mY, eps).launch(grid=[ctas, 1, 1], block=[THREADS, 1, 1])


_CACHE: dict[tuple[int, ...], Any] = {}


def _compile(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> Any:
    """The TVM-FFI launcher for this shape (compiled once per shape)."""
    if x.shape[-1] != HIDDEN:
        raise ValueError(f"this kernel is specialised to hidden size {HIDDEN}")
    fn = cute.compile(
        _add_rmsnorm,
        from_dlpack(x),
        from_dlpack(r),
        from_dlpack(w),
        from_dlpack(y),
        cutlass.Float32(EPS),
        options="--enable-tvm-ffi",
    )
    _CACHE[x.shape] = fn
    return fn


def solve(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    y = torch.empty_like(hidden_states)
    fn = _CACHE.get(hidden_states.shape)
    if fn is None:
        fn = _compile(hidden_states, residual, weight, y)
    fn(hidden_states, residual, weight, y, EPS)  # torch tensors and a Python float
    return y
