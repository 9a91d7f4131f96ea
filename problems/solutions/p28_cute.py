"""p28 fused residual add + RMSNorm (bf16, hidden 4096) in CuTe DSL.

One warp per row, four rows per 128-thread CTA, a single pass over DRAM: each lane loads its
128 elements of ``x`` and ``r`` (stride 32, coalesced), keeps ``s = x + r`` in fp32 registers
while summing ``s * s``, reduces the sum with warp shuffles, and writes
``s * rsqrt(mean + eps) * w`` as bf16 from the registers. Eager PyTorch instead runs a chain
of about ten kernels through fp32 temporaries.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

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
    """The compiled launcher for these shapes (compiled once per shape)."""
    key = (*x.shape,)
    fn = _CACHE.get(key)
    if fn is None:
        fn = cute.compile(
            _add_rmsnorm,
            from_dlpack(x),
            from_dlpack(r),
            from_dlpack(w),
            from_dlpack(y),
            cutlass.Float32(EPS),
        )
        _CACHE[key] = fn
    return fn


def solve(hidden_states: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    if hidden_states.shape[-1] != HIDDEN:
        raise ValueError(f"this kernel is specialised to hidden size {HIDDEN}")
    x = hidden_states.contiguous()
    r = residual.contiguous()
    w = weight.contiguous()
    y = torch.empty_like(x)
    fn = _compile(x, r, w, y)
    fn(from_dlpack(x), from_dlpack(r), from_dlpack(w), from_dlpack(y), EPS)
    return y
