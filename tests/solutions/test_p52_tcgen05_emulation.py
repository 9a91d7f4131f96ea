"""CPU emulation of problems/solutions/variants/p52_cute_tcgen05.py's arithmetic and indexing
(the Blackwell p52 kernel; the DSL is not imported: running it needs a B200, which we do not
have, so this emulation and the sm_100a compile are all the checking it gets).

Quantization as the quantize kernel does it (``p52_cute.py``'s kernel: warp tasks of 4 rows
of one K block, IEEE division, scales stored transposed into ``sxT[K/128, M_pad]``, here with
M padded to the 128-row tile and garbage in the padding). GEMM as the kernel does it: one CTA
per 128x128 tile; per K block four k32 ``tcgen05.mma`` steps sum raw codes into a fresh fp32
TMEM block accumulator (also modelled with only 13 mantissa bits kept after each step, as
for Hopper); the promotion thread of tile row ``r`` (TMEM lane ``r``, warp ``r // 32``) reads
its row in 32-column chunks and does one FMA per element with the fp32 product
``sxT[kb, m0 + r] * w_scale[n_blk, kb]``; then ``+ bias`` in fp32, bf16, and only rows < M
are stored (row-masked 16-byte stores). Checked against the problem's reference with the
judge's rule; the kernel's constants are read from its source so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.solutions.p52_emulation import (
    ACC_BITS,
    GROUP,
    SHAPES,
    check_emulation,
    emulate_tcgen05,
    kernel_constants,
)

KERNEL = Path(__file__).resolve().parents[2] / "problems/solutions/variants/p52_cute_tcgen05.py"
Q_ROWS = 4
K = kernel_constants(KERNEL)
TILE = int(K["TILE_M"])
CHUNK = int(K["CHUNK"])


def test_the_emulation_models_this_kernel() -> None:
    assert K["ARCHS"] == ("sm_100a",)
    assert K["TILE_M"] == K["TILE_N"] == K["TILE_K"] == GROUP == 128
    assert (K["PROMOTE_WARPS"], K["THREADS"]) == (4, 192)  # one warpgroup: lanes 0..127
    assert TILE % CHUNK == 0 and K["TMEM_COLS"] == K["ACC_STAGES"] * TILE
    assert (K["Q_ROWS"], K["Q_VEC"], K["FP8_MAX"], K["MIN_SCALE"]) == (Q_ROWS, 4, 448.0, 1e-12)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, k = x.shape
    m_pad = -(-m // TILE) * TILE
    rows = torch.arange(-(-m // Q_ROWS) * Q_ROWS).clamp(max=m - 1)
    g = x[rows].float().view(len(rows), k // GROUP, GROUP)
    scale = torch.clamp(g.abs().amax(-1) / 448.0, min=1e-12)  # warp max, div.rn, fmax
    codes = (g / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    sxT = torch.full((k // GROUP, m_pad), float("nan"))  # torch.empty: padding is garbage
    sxT[:, :m] = scale[:m].T
    return codes.view(len(rows), k)[:m], sxT


def emulate(x, w_codes, w_scales, bias, acc_bits=None):
    return emulate_tcgen05(quantize, TILE, x, w_codes, w_scales, bias, acc_bits)


def test_every_output_is_written_once() -> None:
    x = torch.randn(130, 256, dtype=torch.bfloat16)
    w = (torch.randn(256, 256) * 8).to(torch.float8_e4m3fn)
    _, _, out = emulate(x, w, torch.ones(2, 2), torch.zeros(256, dtype=torch.bfloat16))
    assert not torch.isnan(out.float()).any()  # 130 rows: two M tiles, the second mostly padding


@SHAPES
@ACC_BITS
def test_emulation_matches_reference(shape, acc_bits):
    check_emulation(emulate, shape, acc_bits)
