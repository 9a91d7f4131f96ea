"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in CuTe DSL.

Hybrid: CuTe kernels do the quantization work, eager PyTorch the fp32 GEMM.

* activation: one warp per 1x128 group takes the group's absolute maximum (warp max), the
  decode scale ``max(amax / 448, 1e-12)``, rounds ``x / scale`` (clamped to +-448) to E4M3
  and writes the dequantized value ``code * scale`` as fp32: quantize + dequantize in one pass;
* weight: decode the E4M3 codes and multiply by their 128x128 block scale (fp32).

The GEMM and bias add then run exactly as the reference runs them (fp32, no TF32), so the
kernels replace the reference's chain of quantization temporaries, not its matmul.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12
WARPS_PER_CTA = 4
THREADS = 256


@cute.kernel
def _quant_dequant_kernel(mX: cute.Tensor, mOut: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    group_id = bidx * WARPS_PER_CTA + tidx // 32
    groups_per_row = mX.shape[1] // GROUP
    if group_id < mX.shape[0] * groups_per_row:
        row = group_id // groups_per_row
        col0 = (group_id - row * groups_per_row) * GROUP
        amax = cutlass.Float32(0.0)
        for j in cutlass.range(lane, GROUP, 32, unroll_full=True):
            amax = cute.arch.fmax(amax, cute.math.absf(mX[row, col0 + j].to(cutlass.Float32)))
        amax = cute.arch.warp_reduction_max(amax)
        scale = cute.arch.fmax(amax / cutlass.Float32(FP8_MAX), cutlass.Float32(MIN_SCALE))
        for j in cutlass.range(lane, GROUP, 32, unroll_full=True):
            v = mX[row, col0 + j].to(cutlass.Float32) / scale
            v = cute.arch.fmax(cute.arch.fmin(v, cutlass.Float32(FP8_MAX)), -FP8_MAX)
            code = v.to(cutlass.Float8E4M3FN)
            mOut[row, col0 + j] = code.to(cutlass.Float32) * scale


@cute.kernel
def _dequant_weight_kernel(mCodes: cute.Tensor, mScales: cute.Tensor, mOut: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    for c in cutlass.range(tidx, mCodes.shape[1], THREADS):
        scale = mScales[row // GROUP, c // GROUP]
        mOut[row, c] = mCodes[row, c].to(cutlass.Float32) * scale


@cute.jit
def _quant_dequant(mX: cute.Tensor, mOut: cute.Tensor):
    groups = mX.shape[0] * (mX.shape[1] // GROUP)
    ctas = (groups + WARPS_PER_CTA - 1) // WARPS_PER_CTA
    _quant_dequant_kernel(mX, mOut).launch(grid=[ctas, 1, 1], block=[32 * WARPS_PER_CTA, 1, 1])


@cute.jit
def _dequant_weight(mCodes: cute.Tensor, mScales: cute.Tensor, mOut: cute.Tensor):
    _dequant_weight_kernel(mCodes, mScales, mOut).launch(
        grid=[mCodes.shape[0], 1, 1], block=[THREADS, 1, 1]
    )


_CACHE: dict[tuple[object, ...], Any] = {}


def _launch(name: str, kernel: object, tensors: list[torch.Tensor]) -> None:
    """Compile ``kernel`` once per argument shapes, then launch it."""
    key = (name, *(tuple(t.shape) for t in tensors))
    fn = _CACHE.get(key)
    if fn is None:
        fn = cute.compile(kernel, *(from_dlpack(t) for t in tensors))
        _CACHE[key] = fn
    fn(*(from_dlpack(t) for t in tensors))


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    x = attn_output.contiguous()
    x_deq = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _launch("act", _quant_dequant, [x, x_deq])
    codes = o_proj_weight.contiguous()
    w_deq = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    _launch("weight", _dequant_weight, [codes, o_proj_weight_scale.float().contiguous(), w_deq])
    return (x_deq @ w_deq.t() + o_proj_bias.float()).to(attn_output.dtype)
