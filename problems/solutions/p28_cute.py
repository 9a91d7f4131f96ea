"""p28 fused residual add + RMSNorm (bf16, hidden 4096) in CuTe DSL: one CTA per row, 16-byte
vector loads and stores, called through TVM-FFI.

Layout: ``x``, ``r``, ``y`` are row-major ``[rows, 4096]`` bf16 (a row is 8 KB = 512 vectors
of 8 bf16), ``w`` is ``[4096]``. CTA ``b`` owns row ``b``; its 256 threads each own two
8-element chunks, ``t`` and ``t + 256`` (columns ``[8t, 8t + 8)`` and
``[2048 + 8t, 2048 + 8t + 8)``), so every warp instruction reads 512 contiguous bytes. Each
thread issues its four 16-byte loads of ``x`` and ``r`` first (``ld.global.v4.b32``;
``cute.autovec_copy`` of a ``(8):(1)`` global slice into a register fragment, alignment 16
declared with ``from_dlpack(..., assumed_align=16)`` and checked by TVM-FFI at each call),
forms ``s = x + r`` in fp32 (16 values per thread, kept in registers), sums ``s * s``,
reduces over the warp with shuffles and over the eight warps through 8 floats of shared
memory (one barrier; every thread adds the eight partials in the same order, so all get the
same ``rstd``), then writes ``(s * rsqrt(mean + eps)) * w`` as bf16 with two 16-byte
stores. The weight chunks (8 KB per row, shared by all rows) come from L1/L2.

Numerics: the reference's rounding points exactly: ``x`` and ``r`` widened to fp32 and added
in fp32 (``s`` is not rounded to bf16), fp32 sum of squares, ``rsqrt`` of ``mean + eps``,
``(s * inv) * w`` in fp32, one rounding to bf16. Only the summation order differs (and
``rsqrt.approx``, as in the first p28 solution).

Traffic: 6 bytes per element (read ``x`` and ``r``, write ``y``), each once: 357 MB at full
scale (14,509 rows), SOL 74.3 µs at 4.8 TB/s. Expected: about 85-95 µs on the device (~80-85 %
of peak HBM bandwidth) and ~15 µs of host time (one TVM-FFI call, one ``torch.empty_like``), so
about 100-110 µs end to end, ~70 % of SOL, against 415 µs for the first p28 solution (one warp per row,
2-byte loads, 165 registers). Registers: 32 per thread, no spills (ptxas -v, sm_90a), 32 bytes
of shared memory, so 8 CTAs (2,048 threads) per SM, each with 16 KB of loads in flight (128 KB
per SM). Grid: 14,509 CTAs. Measured on the H200 (2026-12-03, docs/solutions.md): 14.8 µs host, 83.1 µs device, 102 µs end to end (72.5 % of SOL).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack
from cutlass.memory import SmemAllocator

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

EPS = 1e-5
HIDDEN = 4096
VEC = 8  # bf16 elements per 16-byte vector
THREADS = 256
WARPS = THREADS // 32
CHUNKS = HIDDEN // (VEC * THREADS)  # 2 vectors per thread


@cute.kernel
def _add_rmsnorm_kernel(
    mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32
):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    warp = tidx // 32
    smem = SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout((WARPS,)), byte_alignment=16)

    x_raw = [cute.make_rmem_tensor((VEC,), cutlass.BFloat16) for _ in range(CHUNKS)]
    r_raw = [cute.make_rmem_tensor((VEC,), cutlass.BFloat16) for _ in range(CHUNKS)]
    for c in cutlass.range_constexpr(CHUNKS):
        chunk = tidx + c * THREADS
        cute.autovec_copy(cute.local_tile(mX, (1, VEC), (row, chunk))[0, None], x_raw[c])
        cute.autovec_copy(cute.local_tile(mR, (1, VEC), (row, chunk))[0, None], r_raw[c])

    s = []
    ss = cutlass.Float32(0.0)
    for c in cutlass.range_constexpr(CHUNKS):
        v = x_raw[c].load().to(cutlass.Float32) + r_raw[c].load().to(cutlass.Float32)
        s.append(v)
        ss = ss + (v * v).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
    ss = cute.arch.warp_reduction_sum(ss)
    if lane == 0:
        partial[warp] = ss
    cute.arch.sync_threads()
    total = partial[0]
    for i in cutlass.range_constexpr(1, WARPS):
        total = total + partial[i]
    rstd = cute.math.rsqrt(total / cutlass.Float32(HIDDEN) + eps)

    for c in cutlass.range_constexpr(CHUNKS):
        chunk = tidx + c * THREADS
        w_raw = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
        cute.autovec_copy(cute.local_tile(mW, (VEC,), (chunk,)), w_raw)
        y_raw = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
        y_raw.store((s[c] * rstd * w_raw.load().to(cutlass.Float32)).to(cutlass.BFloat16))
        cute.autovec_copy(y_raw, cute.local_tile(mY, (1, VEC), (row, chunk))[0, None])


@cute.jit
def _add_rmsnorm(
    mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, eps: cutlass.Float32
):
    _add_rmsnorm_kernel(mX, mR, mW, mY, eps).launch(grid=[mX.shape[0], 1, 1], block=[THREADS, 1, 1])


_CACHE: dict[tuple[int, ...], Any] = {}


def _compile(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> Any:
    """The TVM-FFI launcher for this shape (static shapes and 16-byte alignment compiled in;
    TVM-FFI checks shape, strides, dtype, device and alignment of each torch tensor)."""
    if x.shape[-1] != HIDDEN:
        raise ValueError(f"this kernel is specialised to hidden size {HIDDEN}")
    fn = cute.compile(
        _add_rmsnorm,
        from_dlpack(x, assumed_align=16),
        from_dlpack(r, assumed_align=16),
        from_dlpack(w, assumed_align=16),
        from_dlpack(y, assumed_align=16),
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
    fn(hidden_states, residual, weight, y, EPS)
    return y
