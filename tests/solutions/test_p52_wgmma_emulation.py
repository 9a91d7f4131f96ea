"""CPU emulation of problems/solutions/p52_cute.py's arithmetic and indexing (the
DSL is not imported; running the kernels needs a GPU).

Quantization as the quantize kernel does it (warp tasks of 4 rows of one K block, rows past the
end re-read the last row and are not stored, IEEE division, scales stored transposed into
``sxT[K/128, M_pad]`` whose padding rows hold garbage). GEMM as the consumer warpgroups do it:
the output is walked in 128x128 tiles, M padded to the cluster of 2 M tiles (codes of the M tail
zero-filled as TMA does); per K block four k32 wgmma steps sum raw codes into a fresh fp32 block
accumulator, then each thread promotes its 64 accumulator elements with one FMA each, using the
scale of row ``r_lo`` (identity-tensor row of element 0) or ``r_hi`` (element 2) chosen by
``(i // 2) % 2``, times the weight block's scale; then ``+ bias``, bf16, and only rows < M are
stored. The fragment map is the one CuTe prints for the 2x(m64n128k32) tiled MMA,
``((2,2,16),1,1):((1@1,8@0,8@1),0,0)`` plus the wgmma D-fragment thread offsets; the test checks
that it covers the tile exactly once. Checked against the problem's reference with the judge's
rule, also with a block accumulator that keeps only 13 mantissa bits after each k32 step
(Hopper's FP8 tensor-core accumulation is narrower than fp32)."""

from __future__ import annotations

import pytest
import torch

from tests.solutions.p52_emulation import ACC_BITS, GROUP, K_STEP, SHAPES, check_emulation
from tests.solutions.p52_emulation import truncate as _truncate

TILE = 128
CLUSTER_M = 2
Q_ROWS = 4


def fragment() -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) in the 128x128 tile of accumulator element i of consumer thread t: [256, 64]."""
    t = torch.arange(256)
    wg, warp, lane = t // 128, (t % 128) // 32, t % 32
    base_r = wg * 64 + warp * 16 + lane // 4
    base_c = (lane % 4) * 2
    i = torch.arange(64)
    v0, v1, v2 = i % 2, (i // 2) % 2, i // 4  # layout (2,2,16):(1@1, 8@0, 8@1)
    return base_r[:, None] + 8 * v1[None, :], base_c[:, None] + v0[None, :] + 8 * v2[None, :]


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, k = x.shape
    m_pad = -(-m // (TILE * CLUSTER_M)) * (TILE * CLUSTER_M)
    rows = torch.arange(-(-m // Q_ROWS) * Q_ROWS).clamp(max=m - 1)
    g = x[rows].float().view(len(rows), k // GROUP, GROUP)
    scale = torch.clamp(g.abs().amax(-1) / 448.0, min=1e-12)  # warp max, div.rn, fmax
    codes = (g / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    sxT = torch.full((k // GROUP, m_pad), float("nan"))  # torch.empty: padding is garbage
    sxT[:, :m] = scale[:m].T
    return codes.view(len(rows), k)[:m], sxT


def emulate(x, w_codes, w_scales, bias, acc_bits=None):
    m, k = x.shape
    n = w_codes.shape[0]
    codes, sxT = quantize(x)
    m_pad = sxT.shape[1]
    cx = torch.zeros(m_pad, k, dtype=torch.float64)
    cx[:m] = codes.double()  # TMA zero-fills the M tail
    cw = w_codes.double()
    rows, cols = fragment()
    r_lo, r_hi = rows[:, 0], rows[:, 2]
    hi = ((torch.arange(64) // 2) % 2 == 1)[None, :]
    out = torch.empty(m, n, dtype=torch.bfloat16)
    for m0 in range(0, m_pad, TILE):
        for n0 in range(0, n, TILE):
            acc = torch.zeros(256, 64, dtype=torch.float32)
            for kb in range(k // GROUP):
                blk = torch.zeros(TILE, TILE, dtype=torch.float32)
                for lo in range(kb * GROUP, (kb + 1) * GROUP, K_STEP):
                    part = (
                        cx[m0 : m0 + TILE, lo : lo + K_STEP]
                        @ cw[n0 : n0 + TILE, lo : lo + K_STEP].T
                    )
                    blk = _truncate((blk.double() + part).float(), acc_bits)
                sw = w_scales[n0 // TILE, kb]
                s_lo = sxT[kb, m0 + r_lo] * sw  # fp32 multiplies
                s_hi = sxT[kb, m0 + r_hi] * sw
                s = torch.where(hi, s_hi[:, None], s_lo[:, None])
                acc = (acc.double() + blk[rows, cols].double() * s.double()).float()  # FFMA
            y = (acc + bias[n0 + cols].float()).to(torch.bfloat16)
            keep = m0 + rows < m  # TMA store clips rows >= M
            out[(m0 + rows)[keep], (n0 + cols)[keep]] = y[keep]
    return codes, sxT[:, :m].T.contiguous(), out


def test_fragment_covers_the_tile_once() -> None:
    rows, cols = fragment()
    flat = (rows * TILE + cols).flatten()
    assert torch.equal(flat.sort().values, torch.arange(TILE * TILE))
    i = torch.arange(64)
    assert torch.equal(rows, torch.where(((i // 2) % 2 == 1)[None], rows[:, 2:3], rows[:, 0:1]))


@pytest.mark.slow
@SHAPES
@ACC_BITS
def test_emulation_matches_reference(shape, acc_bits):
    check_emulation(emulate, shape, acc_bits)
