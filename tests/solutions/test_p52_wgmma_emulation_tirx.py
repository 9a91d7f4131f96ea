"""CPU emulation of problems/solutions/p52_tirx.py's arithmetic (the DSL is not
imported; the GPU is needed to run it): quantization with IEEE divisions, per-128 raw-code block
sums (k32 wgmma steps into a fresh fp32 block accumulator), fp32 FMA promotion with
``scale_x * scale_w``, bias add and bf16 rounding. Checked against the problem's reference with
the judge's rule, including a pessimistic variant whose block accumulator keeps only 13 mantissa
bits after each k32 step (Hopper's FP8 tensor-core accumulation is narrower than fp32)."""

from __future__ import annotations

import pytest
import torch

from tests.solutions.p52_emulation import ACC_BITS, GROUP, K_STEP, SHAPES, check_emulation
from tests.solutions.p52_emulation import truncate as _truncate


def emulate(x, w_codes, w_scales, bias, acc_bits=None):
    m, k = x.shape
    n = w_codes.shape[0]
    groups = x.float().view(m, k // GROUP, GROUP)
    scale = torch.clamp(groups.abs().amax(-1) / 448.0, min=1e-12)  # div.rn, then max
    codes = (groups / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    codes = codes.view(m, k)
    cx, cw = codes.double(), w_codes.double()
    sw = w_scales.float().repeat_interleave(GROUP, dim=0)  # [n, k/128]
    acc = torch.zeros(m, n, dtype=torch.float32)
    for kb in range(k // GROUP):
        blk = torch.zeros(m, n, dtype=torch.float32)
        for kk in range(GROUP // K_STEP):
            lo = kb * GROUP + kk * K_STEP
            part = cx[:, lo : lo + K_STEP] @ cw[:, lo : lo + K_STEP].T  # exact in float64
            blk = _truncate((blk.double() + part).float(), acc_bits)
        f = scale[:, kb][:, None] * sw[:, kb][None, :]  # fp32 multiply
        acc = (acc.double() + blk.double() * f.double()).float()  # one FFMA
    out = (acc + bias.float()).to(torch.bfloat16)
    return codes, scale, out


@pytest.mark.slow
@SHAPES
@ACC_BITS
def test_emulation_matches_reference(shape, acc_bits):
    check_emulation(emulate, shape, acc_bits)


def _tile_coords(tile, num_mb, num_nb, group_n=12):
    """The kernel's raster: groups of ``group_n`` N blocks, all M blocks of a group in turn."""
    grp = tile // (group_n * num_mb)
    rem = tile - grp * group_n * num_mb
    gsz = min(group_n, num_nb - grp * group_n)
    return rem // gsz, grp * group_n + rem % gsz


@pytest.mark.parametrize("m,n", [(48, 384), (300, 512), (16384, 7680), (1, 1664)])
def test_schedule_and_fragments_cover_output_once(m, n):
    bm = bn = 128
    num_mb, num_nb = -(-m // bm), n // bn
    tiles = num_mb * num_nb
    ctas = min(132, tiles)
    seen = [
        _tile_coords(cta + ti * ctas, num_mb, num_nb)
        for cta in range(ctas)
        for ti in range(-(-(tiles - cta) // ctas))
    ]
    assert sorted(seen) == [(a, b) for a in range(num_mb) for b in range(num_nb)]
    # wgmma m64n128 D fragment as the epilogue indexes it: consumer cw, warp, lane, pair i
    cw, warp, lane, i = torch.meshgrid(
        torch.arange(2), torch.arange(4), torch.arange(32), torch.arange(bn // 8), indexing="ij"
    )
    row = cw * 64 + warp * 16 + lane // 4
    col = i * 8 + (lane % 4) * 2
    rows = torch.stack([row, row, row + 8, row + 8]).reshape(-1)
    cols = torch.stack([col, col + 1, col, col + 1]).reshape(-1)
    hits = torch.zeros(bm, bn, dtype=torch.int64)
    hits.index_put_((rows, cols), torch.ones_like(rows), accumulate=True)
    assert bool((hits == 1).all())
