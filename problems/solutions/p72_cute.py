"""p72 gated delta-net decode step (Qwen3-Next: 8 q/k heads, 16 v heads, d 128) in CuTe DSL,
gates in the kernel, called through TVM-FFI.

A port of ``p72_tirx.py`` (design and arithmetic order) to CuTe DSL. One ``solve()`` is two
``torch.empty_like`` and one TVM-FFI call of one compiled kernel; the ~9 eager PyTorch ops
that the first file (``variants/p72_cute_eager_gates.py``) spends on the gates are gone.

Layout: a CTA of 256 threads (8 warps) owns 32 rows of one (batch, value head) k-last state
``S[v, :]`` (grid ``B * Hv * 4``); each warp owns 4 consecutive rows and lane ``l`` the
columns ``4l .. 4l+3`` of each, so a row is one 16-byte access per lane
(``cute.autovec_copy`` of a ``(4):(1)`` slice, alignment 16 declared with
``from_dlpack(..., assumed_align=16)`` and checked by TVM-FFI at each call) and a warp
instruction covers one contiguous 512-byte row. Per thread:

* the 4 state rows first (four 16-byte loads issued together: the DRAM traffic), then its 4
  values of ``k`` and ``q`` (one 8-byte load each) and the 4 values ``v[row0 .. row0+3]``;
* the gates of its (batch, head), computed in float64 from the raw inputs and rounded once
  to float32: warp 0 computes ``g = exp(-exp(A_log) * softplus(a + dt_bias))`` (softplus with
  PyTorch's threshold 20: ``x`` if ``x > 20``, else ``log1p(exp(x))``) and warp 1
  ``beta = 1 / (1 + exp(-b))``; lane 0 of each puts its gate in 8 bytes of shared memory,
  one barrier, every thread reads both. ``cute.math.exp`` / ``log1p`` work on
  ``cutlass.Float64``: with ``fastmath`` off they lower to libdevice's double-precision
  ``exp`` / ``log1p`` (the sm_90a PTX has ``fma.rn.f64`` polynomials there, no
  ``ex2.approx`` / ``lg2.approx``), accurate to about 1 ulp of float64, so after the single
  rounding to float32 ``g`` and ``beta`` are the correctly rounded float32 values of the
  anchor's (float64) gates, bar a near-tie (~1e-16 relative). LLVM turns the softplus branch
  into a select and ``1 / (1 + e)`` into ``rcp.rn.f64`` (the same correctly rounded value)
  and leaves ``beta`` to lane 0 of warp 1 alone. Float32 gates with PyTorch's own ops (one
  rounding per op, as the eager reference) would still pass, with less margin: on the smoke
  inputs the emulated state error is 7.6e-9 against an allowance of 4.1e-8, 1.2e-8 with
  float32 gates;
* per row, in the reference's order: ``gS = g * S``, ``v_old = sum(gS * k)`` (4 products
  summed in column order within the lane, then ``cute.arch.warp_reduction_sum``: butterfly
  shuffles with offsets 16, 8, 4, 2, 1, so every lane holds the same value),
  ``delta = beta * (v - v_old)``, ``S' = gS + delta * k`` (stored as one 16-byte vector) and
  ``out = scale * sum(S' * q)`` (same reduction), rounded to bf16; lane 0 stores the 4
  outputs of its warp as one 8-byte vector. The multiply-adds are contracted to FMAs
  (``fma(gS, k, acc)``, ``fma(delta, k, gS)``, ``fma(S', q, acc2)``: ``fma.rn.f32`` in the
  sm_90a PTX); ``tests/solutions/test_p72_cute_emulation.py`` emulates exactly this
  arithmetic on the CPU and checks it against the problem's reference and anchor.

The state is read once and written once (8 bytes per element, 134 MB at full size); q, k, v
and the gate inputs are a few hundred KB, served from L2. ``A_log``, ``a``, ``dt_bias`` and
``b`` are read as scalars (no alignment assumed). Resources (cuobjdump of the sm_90a cubin): 54
registers, no local memory, 1 KB of shared memory, so 4 CTAs (32 warps) per SM with 64 KB of
state loads in flight; grid 4,096 CTAs at full size.

Measured on the H200 (2026-12-04, docs/solutions.md): 15.7-15.9 µs host, 35.3-35.8 µs device,
54.7-55.6 µs end to end (50.6-51.4 % of SOL) in a plain process, against 135-154 µs host and
180-198 µs end to end for the eager-gates file in the same runs; through the trusted grader it
passes (one launch per call, bypass ``outputs_failed``, kernel audit ``confirmed``) at 5.86x.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack
from cutlass.memory import SmemAllocator

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

DIM = 128
VEC = 4  # fp32 state columns per lane: one 16-byte vector
ROWS_PER_WARP = 4
WARPS = 8
THREADS = 32 * WARPS
ROWS_PER_CTA = ROWS_PER_WARP * WARPS  # 32
BLOCKS_PER_HEAD = DIM // ROWS_PER_CTA  # 4
SOFTPLUS_THRESHOLD = 20.0  # torch.nn.functional.softplus default (beta 1)


@cute.kernel
def _gdn_decode_kernel(
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mS: cute.Tensor,
    mAlog: cute.Tensor,
    mA: cute.Tensor,
    mDtb: cute.Tensor,
    mB: cute.Tensor,
    mSout: cute.Tensor,
    mOut: cute.Tensor,
    scale: cutlass.Float32,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    warp = tidx // 32
    heads_v = mS.shape[1]
    bh = bidx // BLOCKS_PER_HEAD
    bi = bh // heads_v
    h = bh - bi * heads_v
    kh = h // (heads_v // mQ.shape[2])
    row0 = (bidx % BLOCKS_PER_HEAD) * ROWS_PER_CTA + warp * ROWS_PER_WARP

    smem = SmemAllocator()
    gate_s = smem.allocate_tensor(cutlass.Float32, cute.make_layout((2,)), byte_alignment=16)

    # state rows first: the DRAM traffic
    sv = [cute.make_rmem_tensor((VEC,), cutlass.Float32) for _ in range(ROWS_PER_WARP)]
    for r in cutlass.range_constexpr(ROWS_PER_WARP):
        cute.autovec_copy(cute.local_tile(mS[bi, h, row0 + r, None], (VEC,), (lane,)), sv[r])
    kv = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
    qv = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
    vv = cute.make_rmem_tensor((ROWS_PER_WARP,), cutlass.BFloat16)
    cute.autovec_copy(cute.local_tile(mK[bi, 0, kh, None], (VEC,), (lane,)), kv)
    cute.autovec_copy(cute.local_tile(mQ[bi, 0, kh, None], (VEC,), (lane,)), qv)
    cute.autovec_copy(
        cute.local_tile(mV[bi, 0, h, None], (ROWS_PER_WARP,), (row0 // ROWS_PER_WARP,)), vv
    )

    # gates in float64, rounded once to float32: warp 0 computes g, warp 1 beta, for the
    # whole CTA (one (batch, head)); the state loads above are already in flight meanwhile
    if warp == 0:
        x = mA[bi, 0, h].to(cutlass.Float64) + mDtb[h].to(cutlass.Float64)
        sp = x
        if x <= cutlass.Float64(SOFTPLUS_THRESHOLD):
            sp = cute.math.log1p(cute.math.exp(x))
        g64 = cute.math.exp(-(cute.math.exp(mAlog[h].to(cutlass.Float64)) * sp))
        if lane == 0:
            gate_s[0] = g64.to(cutlass.Float32)
    if warp == 1:
        e = cute.math.exp(-mB[bi, 0, h].to(cutlass.Float64))
        if lane == 0:
            gate_s[1] = (cutlass.Float64(1.0) / (cutlass.Float64(1.0) + e)).to(cutlass.Float32)
    cute.arch.sync_threads()
    gate = gate_s[0]
    beta = gate_s[1]

    kf = kv.load().to(cutlass.Float32)
    qf = qv.load().to(cutlass.Float32)
    vf = vv.load().to(cutlass.Float32)
    ov = cute.make_rmem_tensor((ROWS_PER_WARP,), cutlass.BFloat16)
    for r in cutlass.range_constexpr(ROWS_PER_WARP):
        gs = []
        acc = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(VEC):
            gs.append(gate * sv[r][i])
            acc = acc + gs[i] * kf[i]
        v_old = cute.arch.warp_reduction_sum(acc)
        delta = beta * (vf[r] - v_old)
        sn = cute.make_rmem_tensor((VEC,), cutlass.Float32)
        acc2 = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(VEC):
            s = gs[i] + delta * kf[i]
            sn[i] = s
            acc2 = acc2 + s * qf[i]
        cute.autovec_copy(sn, cute.local_tile(mSout[bi, h, row0 + r, None], (VEC,), (lane,)))
        o = cute.arch.warp_reduction_sum(acc2)
        ov[r] = (scale * o).to(cutlass.BFloat16)
    if lane == 0:
        cute.autovec_copy(
            ov,
            cute.local_tile(mOut[bi, 0, h, None], (ROWS_PER_WARP,), (row0 // ROWS_PER_WARP,)),
        )


@cute.jit
def _gdn_decode(
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mS: cute.Tensor,
    mAlog: cute.Tensor,
    mA: cute.Tensor,
    mDtb: cute.Tensor,
    mB: cute.Tensor,
    mSout: cute.Tensor,
    mOut: cute.Tensor,
    scale: cutlass.Float32,
):
    ctas = mS.shape[0] * mS.shape[1] * BLOCKS_PER_HEAD
    _gdn_decode_kernel(mQ, mK, mV, mS, mAlog, mA, mDtb, mB, mSout, mOut, scale).launch(
        grid=[ctas, 1, 1], block=[THREADS, 1, 1]
    )


_CACHE: dict[tuple[object, ...], Any] = {}

# tensors read or written as 16-byte (state) or 8-byte (q, k, v, out) vectors
_ALIGNED = (True, True, True, True, False, False, False, False, True, True)


def _compile(tensors: list[torch.Tensor], scale: float, key: tuple[object, ...]) -> Any:
    """The TVM-FFI launcher for this shape (static shapes, 16-byte alignment of the vector
    operands compiled in; TVM-FFI checks shape, strides, dtype, device and alignment)."""
    q, state = tensors[0], tensors[3]
    if q.shape[-1] != DIM or state.shape[-1] != DIM or state.shape[-2] != DIM:
        raise ValueError(f"this kernel is specialised to head size {DIM}")
    if state.shape[1] % q.shape[2] != 0:
        raise ValueError("expects Hv a multiple of Hk")
    fn = cute.compile(
        _gdn_decode,
        *(
            from_dlpack(t, assumed_align=16) if aligned else from_dlpack(t)
            for t, aligned in zip(tensors, _ALIGNED, strict=True)
        ),
        cutlass.Float32(scale),
        options="--enable-tvm-ffi",
    )
    _CACHE[key] = fn
    return fn


def solve(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    new_state = torch.empty_like(state)
    out = torch.empty_like(v)
    key = (state.shape, q.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile([q, k, v, state, A_log, a, dt_bias, b, new_state, out], scale, key)
    fn(q, k, v, state, A_log, a, dt_bias, b, new_state, out, float(scale))
    return out, new_state
