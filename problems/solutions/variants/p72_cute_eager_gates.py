"""p72 gated delta-net decode step (Qwen3-Next: 8 q/k heads, 16 v heads, d 128) in CuTe DSL,
called through TVM-FFI, with the gates in PyTorch (the first p72 CuTe file until 2026-12-04;
``p72_cute.py`` now computes them in the kernel: 55 µs end to end against 144-198 µs here).

The kernel is the first p72 CuTe solution's (2026-12-02), with the same arithmetic in the same order: each warp owns one
row ``v`` of one head's k-last state ``S[v, :]`` (128 fp32); with ``gS = g * S[v, :]`` it
computes ``v_old = gS . k`` (warp reduction), ``S'[v, :] = gS + beta * (v[v] - v_old) * k``
(written to the new state) and ``out[v] = scale * S'[v, :] . q`` (second reduction). The
row is read twice; the second read hits L1.

What changed is the call path. The function is compiled once per shape with
``options="--enable-tvm-ffi"`` and called with the torch tensors in their own shapes
(``state``/``new_state [B, Hv, d, d]``, ``q``/``k [B, 1, Hk, d]``, ``v``/``out
[B, 1, Hv, d]``, ``g``/``beta [B, 1, Hv]``) and ``scale`` as a Python float: the kernel
indexes the 4-D/3-D tensors directly (``batch, head, v`` decoded from the warp's row, q/k
head ``head // (Hv / Hk)``, as the first p72 CuTe solution's (2026-12-02) flattened indices did), so the eight
``.contiguous().view(...)`` calls and eight ``from_dlpack`` wrappers per call are gone, and
the head counts come from the compiled static shapes instead of scalar arguments. TVM-FFI
checks shape, strides, dtype and device of every tensor at the call.

Eager glue that remains: the gates ``g = exp(-exp(A_log) * softplus(a + dt_bias))`` and
``beta = sigmoid(b)`` (1,024 scalars each, ~9 small PyTorch kernels), computed with the
reference's own ops so that ``g``, which multiplies the whole state, is bit-identical to the
reference's. Moving them into the kernel would save those launches (~40 µs of host time) but
would change ``g`` by an ulp or two (the DSL's ``exp``/``log1p`` are not PyTorch's), which
cannot be checked against the tolerance without a GPU. Expected on the H200: ~60 µs of host
time (gates ~45 µs, two ``empty_like``, one TVM-FFI call) instead of 291 µs, device time as
before (~57 µs), so ~110 µs end to end instead of 330 µs. Measured on the H200 (2026-12-03, docs/solutions.md): 127 µs host, 57.0 µs device, 175 µs end to end (16.1 % of SOL).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
import torch.nn.functional as F
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

ROWS_PER_CTA = 4
THREADS = 32 * ROWS_PER_CTA


@cute.kernel
def _gdn_decode_kernel(
    mS: cute.Tensor,
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mG: cute.Tensor,
    mBeta: cute.Tensor,
    mSout: cute.Tensor,
    mOut: cute.Tensor,
    scale: cutlass.Float32,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    row = bidx * ROWS_PER_CTA + tidx // 32
    heads_v = mS.shape[1]
    dim = mS.shape[3]
    group = heads_v // mQ.shape[2]
    if row < mS.shape[0] * heads_v * dim:
        bh = row // dim
        vrow = row - bh * dim
        batch = bh // heads_v
        head = bh - batch * heads_v
        qk = head // group
        gate = mG[batch, 0, head]
        beta = mBeta[batch, 0, head]
        acc = cutlass.Float32(0.0)
        for j in cutlass.range(lane, dim, 32, unroll_full=True):
            acc = acc + (gate * mS[batch, head, vrow, j]) * mK[batch, 0, qk, j].to(cutlass.Float32)
        v_old = cute.arch.warp_reduction_sum(acc)
        delta = beta * (mV[batch, 0, head, vrow].to(cutlass.Float32) - v_old)
        acc2 = cutlass.Float32(0.0)
        for j in cutlass.range(lane, dim, 32, unroll_full=True):
            s = gate * mS[batch, head, vrow, j] + delta * mK[batch, 0, qk, j].to(cutlass.Float32)
            mSout[batch, head, vrow, j] = s
            acc2 = acc2 + s * mQ[batch, 0, qk, j].to(cutlass.Float32)
        o = cute.arch.warp_reduction_sum(acc2)
        if lane == 0:
            mOut[batch, 0, head, vrow] = (scale * o).to(cutlass.BFloat16)


@cute.jit
def _gdn_decode(
    mS: cute.Tensor,
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mG: cute.Tensor,
    mBeta: cute.Tensor,
    mSout: cute.Tensor,
    mOut: cute.Tensor,
    scale: cutlass.Float32,
):
    rows = mS.shape[0] * mS.shape[1] * mS.shape[2]
    ctas = (rows + ROWS_PER_CTA - 1) // ROWS_PER_CTA
    _gdn_decode_kernel(mS, mQ, mK, mV, mG, mBeta, mSout, mOut, scale).launch(
        grid=[ctas, 1, 1], block=[THREADS, 1, 1]
    )


_CACHE: dict[tuple[object, ...], Any] = {}


def _compile(tensors: list[torch.Tensor], scale: float, key: tuple) -> Any:
    state, q = tensors[0], tensors[1]
    if state.shape[2] != state.shape[3] or state.shape[1] % q.shape[2] != 0:
        raise ValueError("expects a square k-last state and Hv a multiple of Hk")
    fn = cute.compile(
        _gdn_decode,
        *(from_dlpack(t) for t in tensors),
        cutlass.Float32(scale),
        options="--enable-tvm-ffi",
    )
    _CACHE[key] = fn
    return fn


def solve(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    # The gates, with the reference's own ops (bit-identical g and beta), [B, 1, Hv] fp32.
    g = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    beta = torch.sigmoid(b.float())
    new_state = torch.empty_like(state)
    out = torch.empty_like(v)
    key = (state.shape, q.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile([state, q, k, v, g, beta, new_state, out], scale, key)
    fn(state, q, k, v, g, beta, new_state, out, scale)
    return out, new_state
