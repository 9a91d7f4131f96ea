"""CPU emulation of problems/solutions/variants/p52_tirx_tcgen05.py's arithmetic and indexing
(the TIRx Blackwell p52 kernel; running it needs a B200, which we do not have, so this
emulation and the sm_100a compile are all the checking it gets).

Quantization as ``p52_tirx.py``'s quantize kernel does it (one warp per 1x128 group, IEEE
division, scales stored transposed into ``sxT[K/128, M_pad]`` with garbage in the padding).
The GEMM is the one ``variants/p52_cute_tcgen05.py`` implements, so the two tests share
``emulate_tcgen05``: per K block four k32 ``tcgen05.mma`` steps into a fresh TMEM block sum
(also with a 13-bit accumulator), one FMA per element with ``sxT[kb, row] * w_scale[n_blk,
kb]`` by the thread owning TMEM lane ``row % 128``, ``+ bias`` in fp32, bf16, rows < M stored.
The kernel's constants (tile, chunk, warps, TMEM columns, smem offsets, the tcgen05
instruction descriptor) are read from its source.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from tests.solutions.p52_emulation import (
    ACC_BITS,
    GROUP,
    K_STEP,
    SHAPES,
    check_emulation,
    emulate_tcgen05,
    kernel_constants,
)

KERNEL = Path(__file__).resolve().parents[2] / "problems/solutions/variants/p52_tirx_tcgen05.py"
K = kernel_constants(KERNEL)
TILE = int(K["BM"])
CHUNK = int(K["CHUNK"])
B200_SMEM_PER_BLOCK = 232448  # 227 KiB of opt-in dynamic shared memory per CTA on sm_100


def _int(name: str) -> int:
    return int(K[name])


def test_the_emulation_models_this_kernel() -> None:
    assert K["ARCHS"] == ("sm_100a",)
    assert K["BM"] == K["BN"] == K["BK"] == GROUP == TILE == 128
    assert K["MMA_K"] == K_STEP == 32  # f8f6f4: K = 32 bytes of E4M3 per tcgen05.mma
    assert (K["PROMOTE_WARPS"], K["TMA_WARP"], K["MMA_WARP"], K["THREADS"]) == (4, 4, 5, 192)
    assert (K["FP8_MAX"], K["MIN_SCALE"]) == (448.0, 1e-12)
    assert K["MMA"] == "tcgen05.mma.cta_group::1.kind::f8f6f4"
    assert K["TMEM_LD"] == f"tcgen05.ld.sync.aligned.32x32b.x{CHUNK}.b32"


def test_instruction_descriptor_says_m128_n128_e4m3_f32_k_major() -> None:
    idesc = _int("IDESC")
    field = lambda lo, bits: (idesc >> lo) & ((1 << bits) - 1)  # noqa: E731
    assert field(0, 4) == 0  # dense, no saturate
    assert field(4, 2) == 1  # D: F32
    assert (field(7, 3), field(10, 3)) == (0, 0)  # A, B: E4M3
    assert (field(13, 1), field(14, 1)) == (0, 0)  # no negation
    assert (field(15, 1), field(16, 1)) == (0, 0)  # both K-major
    assert field(17, 6) << 3 == 128 and field(24, 5) << 4 == 128  # N, M
    assert idesc >> 29 == 0


@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="TVM is not installed")
def test_instruction_descriptor_is_tvms_encoding() -> None:
    from tvm.backend.cuda.cpp.descriptors import encode_instr_descriptor_dense_uint32 as encode

    e4m3 = "float8_e4m3fn"
    assert _int("IDESC") == encode(128, 128, K_STEP, "float32", e4m3, e4m3, False, False)


def test_smem_and_tmem_layout() -> None:
    stages, acc_stages = _int("STAGES"), _int("ACC_STAGES")
    # 128-byte swizzle: every TMA destination / descriptor base on a 1024-byte boundary
    assert _int("A_STAGE_BYTES") % 1024 == 0 and _int("OFF_B") % 1024 == 0
    assert _int("OFF_B") == stages * TILE * TILE and _int("OFF_BAR") % 8 == 0
    assert _int("NUM_BARS") == 2 * stages + 2 * acc_stages
    assert _int("OFF_TMEM") == _int("OFF_BAR") + 8 * _int("NUM_BARS")
    assert _int("SMEM_BYTES") <= B200_SMEM_PER_BLOCK
    assert _int("DESC_SBO") * 16 == 8 * TILE  # 8 rows of 128 bytes between core-matrix groups
    assert _int("DESC_K_STEP") * 16 == K_STEP  # one k32 step of E4M3 = 32 bytes
    cols = _int("TMEM_COLS")
    assert cols == acc_stages * TILE and cols >= 32 and cols & (cols - 1) == 0 and cols <= 512
    # promotion: warp w reads lanes 32w..32w+31, columns buf*128 + c*32 .. +32 per tcgen05.ld
    hits = torch.zeros(TILE, cols, dtype=torch.int64)
    for buf in range(acc_stages):
        for warp in range(_int("PROMOTE_WARPS")):
            for c in range(TILE // CHUNK):
                col = buf * TILE + c * CHUNK
                hits[32 * warp : 32 * warp + 32, col : col + CHUNK] += 1
    assert bool((hits == 1).all())


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, k = x.shape
    m_pad = -(-m // TILE) * TILE
    g = x.float().view(m, k // GROUP, GROUP)
    scale = torch.clamp(g.abs().amax(-1) / 448.0, min=1e-12)  # warp max, div.rn, max
    codes = (g / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)  # div.rn
    sxT = torch.full((k // GROUP, m_pad), float("nan"))  # torch.empty: padding is garbage
    sxT[:, :m] = scale.T
    return codes.view(m, k), sxT


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
