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

import ast
from pathlib import Path

import torch

from tests.solutions.p52_emulation import ACC_BITS, GROUP, K_STEP, SHAPES, check_emulation
from tests.solutions.p52_emulation import truncate as _truncate

KERNEL = Path(__file__).resolve().parents[2] / "problems/solutions/variants/p52_cute_tcgen05.py"
Q_ROWS = 4


def kernel_constants() -> dict[str, object]:
    """The module-level constants of the kernel file (literals and simple arithmetic)."""
    values: dict[str, object] = {}
    for node in ast.parse(KERNEL.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                try:
                    value = eval(compile(ast.Expression(node.value), "k", "eval"), {}, values)
                except Exception:  # noqa: BLE001 - not a constant
                    continue
                parts = value if isinstance(target, ast.Tuple) else [value]
                for name, part in zip(names, parts):
                    if isinstance(name, ast.Name):
                        values[name.id] = part
    return values


K = kernel_constants()
TILE = int(K["TILE_M"])  # type: ignore[arg-type]
CHUNK = int(K["CHUNK"])  # type: ignore[arg-type]


def test_the_emulation_models_this_kernel() -> None:
    assert K["ARCHS"] == ("sm_100a",)
    assert K["TILE_M"] == K["TILE_N"] == K["TILE_K"] == GROUP == 128
    assert (K["PROMOTE_WARPS"], K["THREADS"]) == (4, 192)  # one warpgroup: lanes 0..127
    assert TILE % CHUNK == 0 and K["TMEM_COLS"] == K["ACC_STAGES"] * TILE  # type: ignore[operator]
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


def block_sums(a: torch.Tensor, b: torch.Tensor, acc_bits: int | None) -> torch.Tensor:
    """fp32 block sums [K/128, 128, 128] of two code tiles [128, K] (float64 codes), each
    the sum of its four k32 MMA steps in order."""
    kb = a.shape[1] // GROUP
    steps = GROUP // K_STEP
    parts = torch.einsum(
        "mbsk,nbsk->bsmn",
        a.view(TILE, kb, steps, K_STEP),
        b.view(TILE, kb, steps, K_STEP),
    )
    blk = torch.zeros(kb, TILE, TILE, dtype=torch.float32)
    for step in range(steps):
        blk = _truncate((blk.double() + parts[:, step]).float(), acc_bits)
    return blk


def emulate(x, w_codes, w_scales, bias, acc_bits=None):
    m, k = x.shape
    n = w_codes.shape[0]
    codes, sxT = quantize(x)
    m_pad = sxT.shape[1]
    cx = torch.zeros(m_pad, k, dtype=torch.float64)
    cx[:m] = codes.double()  # TMA zero-fills rows past M
    cw = w_codes.double()
    lane = torch.arange(TILE)  # promotion thread t = warp t // 32, lane t % 32 = TMEM lane t
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    for m0 in range(0, m_pad, TILE):
        for n_blk in range(n // TILE):
            n0 = n_blk * TILE
            blks = block_sums(cx[m0 : m0 + TILE], cw[n0 : n0 + TILE], acc_bits)
            acc = torch.zeros(TILE, TILE, dtype=torch.float32)  # [thread, column]
            for kb in range(k // GROUP):
                s = sxT[kb, m0 + lane] * w_scales[n_blk, kb]  # fp32 multiply, one per thread
                # tcgen05.ld 32x32b.x32: thread t gets TMEM lane t, 32 columns per load;
                # then one FFMA per element (chunks change nothing elementwise)
                acc = (acc.double() + blks[kb][lane].double() * s[:, None].double()).float()
            y = (acc + bias[n0 : n0 + TILE].float()[None, :]).to(torch.bfloat16)
            rows = m0 + lane
            keep = rows < m  # the row guard of the epilogue's stores
            out[rows[keep], n0 : n0 + TILE] = y[keep]
    return codes, sxT[:, :m].T.contiguous(), out


def test_every_output_is_written_once() -> None:
    x = torch.randn(130, 256, dtype=torch.bfloat16)
    w = (torch.randn(256, 256) * 8).to(torch.float8_e4m3fn)
    _, _, out = emulate(x, w, torch.ones(2, 2), torch.zeros(256, dtype=torch.bfloat16))
    assert not torch.isnan(out.float()).any()  # 130 rows: two M tiles, the second mostly padding


@SHAPES
@ACC_BITS
def test_emulation_matches_reference(shape, acc_bits):
    check_emulation(emulate, shape, acc_bits)
