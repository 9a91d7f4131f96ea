"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in TIRx.

The first solution of this problem, kept as a variant: ``p52_tirx.py`` replaced it on 2026-12-03.

Hybrid: TIRx kernels do the quantization work, eager PyTorch the fp32 GEMM.

* activation: one warp per 1x128 group takes the group's absolute maximum (warp max), the
  decode scale ``max(amax / 448, 1e-12)``, rounds ``x / scale`` (clamped to +-448) to E4M3
  and writes the dequantized value ``code * scale`` as fp32: quantize + dequantize in one pass;
* weight: decode the E4M3 codes and multiply by their 128x128 block scale (fp32).

The GEMM and bias add then run exactly as the reference runs them (fp32, no TF32), so the
kernels replace the reference's chain of quantization temporaries, not its matmul.
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12
WARPS_PER_CTA = 4
THREADS = 256


@T.prim_func
def quant_dequant(x_ptr: T.handle, out_ptr: T.handle):
    rows = T.int32()
    cols = T.int32()
    X = T.match_buffer(x_ptr, (rows, cols), "bfloat16")
    Out = T.match_buffer(out_ptr, (rows, cols), "float32")
    T.device_entry()
    cta = T.cta_id([T.ceildiv(rows * (cols // GROUP), WARPS_PER_CTA)])
    tx = T.thread_id([32 * WARPS_PER_CTA])
    lane = tx % 32
    group_id = cta * WARPS_PER_CTA + tx // 32
    amax = T.alloc_local((1,), "float32")
    if group_id < rows * (cols // GROUP):
        row = group_id // (cols // GROUP)
        col0 = group_id % (cols // GROUP) * GROUP
        amax[0] = T.float32(0)
        for t in T.serial(GROUP // 32):
            amax[0] = T.max(amax[0], T.abs(T.Cast("float32", X[row, col0 + t * 32 + lane])))
        total = T.cuda.warp_max(amax[0])
        scale = T.max(total / T.float32(FP8_MAX), T.float32(MIN_SCALE))
        for t in T.serial(GROUP // 32):
            v = T.Cast("float32", X[row, col0 + t * 32 + lane]) / scale
            v_clamped = T.max(T.min(v, T.float32(FP8_MAX)), T.float32(-FP8_MAX))
            code = T.Cast("float8_e4m3fn", v_clamped)
            Out[row, col0 + t * 32 + lane] = T.Cast("float32", code) * scale


@T.prim_func
def dequant_weight(codes_ptr: T.handle, scales_ptr: T.handle, out_ptr: T.handle):
    rows = T.int32()
    cols = T.int32()
    Codes = T.match_buffer(codes_ptr, (rows, cols), "float8_e4m3fn")
    Scales = T.match_buffer(scales_ptr, (T.ceildiv(rows, GROUP), T.ceildiv(cols, GROUP)), "float32")
    Out = T.match_buffer(out_ptr, (rows, cols), "float32")
    T.device_entry()
    row = T.cta_id([rows])
    tx = T.thread_id([THREADS])
    for t in T.serial(T.ceildiv(cols, THREADS)):
        c = t * THREADS + tx
        if c < cols:
            Out[row, c] = T.Cast("float32", Codes[row, c]) * Scales[row // GROUP, c // GROUP]


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_90a on an H200; sm_90a when no GPU is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_90a"}


_EXE: list[object] = []
_FNS: dict[str, Any] = {}


def _kernels() -> dict[str, object]:
    """The two device functions, built once (NVRTC compiles them at their first call)."""
    if not _FNS:
        exe = tvm.compile(
            tvm.IRModule({"quant_dequant": quant_dequant, "dequant_weight": dequant_weight}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        for name in ("quant_dequant", "dequant_weight"):
            _FNS[name] = exe[name]
    return _FNS


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    fns = _kernels()
    x = attn_output.contiguous()
    x_deq = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    fns["quant_dequant"](x, x_deq)
    codes = o_proj_weight.contiguous()
    w_deq = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    fns["dequant_weight"](codes, o_proj_weight_scale.float().contiguous(), w_deq)
    return (x_deq @ w_deq.t() + o_proj_bias.float()).to(attn_output.dtype)
