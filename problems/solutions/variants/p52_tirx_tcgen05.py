"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in TIRx for Blackwell (sm_100a, the B200): activation quantization plus a block-scaled FP8
GEMM on tcgen05 tensor cores with the accumulator in tensor memory (TMEM). The Blackwell
counterpart of ``p52_tirx.py``, whose WGMMA does not exist on sm_100a. No eager math.

NOT RUN: no B200 was available; this file is verified by compiling it for sm_100a on a CPU
(``problems/solutions/compile_check.py --arch sm_100a``, apache-tvm 0.27.0.post1, NVRTC) and
by a torch emulation of its arithmetic (``tests/solutions/test_p52_tirx_tcgen05_emulation.py``).
Its speed is unknown.

Two kernels of one executable, two launches per call:

* ``quantize``: ``p52_tirx.py``'s kernel, unchanged: one warp per 1x128 group, IEEE divisions
  (``div.rn.f32``), codes bit-identical to the reference's, scales stored transposed into
  ``SX[K/128, M_pad]`` (M_pad: M rounded up to the 128-row tile; the padding is garbage and
  only feeds rows that are never stored).
* ``gemm``: one CTA per 128x128 output tile (M blocks fastest), 192 threads in three roles,
  the same as ``variants/p52_cute_tcgen05.py``:
  - warp 4 (one thread) loads, per K block of 128, the 128x128 E4M3 code tiles of x and of
    the weight with TMA (128-byte swizzle, rows past M zero-filled) into a 6-stage smem ring;
  - warp 5 allocates 256 TMEM columns (two 128-column fp32 accumulators) and one of its
    threads issues, per K block, four ``tcgen05.mma.cta_group::1.kind::f8f6f4`` (M=128,
    N=128, K=32 each, E4M3 x E4M3 -> f32, both operands K-major; smem descriptors advanced
    32 bytes per k32 step) into one accumulator, the first with ``enable_input_d`` off: a
    fresh block sum per K block. ``tcgen05.commit`` then frees the smem stage and hands the
    block sum to the promotion warps (mbarriers);
  - warps 0-3 (one warpgroup, so together they reach all 128 TMEM lanes) promote: thread
    ``t`` owns tile row ``t`` (TMEM lane ``t``); per K block it reads its row in four
    ``tcgen05.ld.sync.aligned.32x32b.x32`` (lane offset ``32 * warp``), each followed by
    ``tcgen05.wait::ld`` before its registers are read, and does one fp32 FMA per element,
    ``acc += block * (scale_x[row, kb] * scale_w[n_blk, kb])`` (DeepSeek-V3's per-128
    promotion), then frees the accumulator for the K block after next. Epilogue: ``+ bias``
    in fp32, bf16, 16-byte stores of the row's 128 outputs, rows >= M skipped; so any M >= 1
    works. K and N must be multiples of 128.
  Smem: 6 x 32 KiB stages (192 KiB) of the B200's 227 KiB; TMEM: 256 of 512 columns.

Call path: ``tvm.compile(IRModule, target=sm_100a, tir_pipeline="tirx")`` once; the
executable takes torch tensors directly (TVM-FFI). The TMA tensor maps are encoded on the host
side of the ``gemm`` PrimFunc (``runtime.cuTensorMapEncodeTiled``).
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_100a",)  # tcgen05 MMA and TMEM: Blackwell only (problems/targets.py)

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12

# quantization kernel
Q_WARPS = 8  # groups (warps) per CTA

# GEMM tiling
BM, BN, BK = 128, 128, 128  # CTA tile; one K block = one 128-wide scale block
MMA_K = 32  # K of one tcgen05.mma kind::f8f6f4
STAGES = 6
ACC_STAGES = 2  # TMEM accumulators: 2 x 128 fp32 columns
TMEM_COLS = ACC_STAGES * BN
CHUNK = 32  # columns per tcgen05.ld of the promotion (32x32b, 32 repetitions)
PROMOTE_WARPS = 4  # warps 0-3
TMA_WARP = 4
MMA_WARP = 5
THREADS = 32 * 6
A_STAGE_BYTES = BM * BK
B_STAGE_BYTES = BN * BK
OFF_B = STAGES * A_STAGE_BYTES
OFF_BAR = OFF_B + STAGES * B_STAGE_BYTES
# barriers: full[STAGES], empty[STAGES], acc_full[ACC_STAGES], acc_empty[ACC_STAGES]
BAR_FULL, BAR_EMPTY = 0, STAGES
BAR_ACC_FULL, BAR_ACC_EMPTY = 2 * STAGES, 2 * STAGES + ACC_STAGES
NUM_BARS = 2 * STAGES + 2 * ACC_STAGES
OFF_TMEM = OFF_BAR + NUM_BARS * 8  # the TMEM base address tcgen05.alloc writes
SMEM_BYTES = OFF_TMEM + 16
STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES

# tcgen05 instruction descriptor (PTX ISA, "Instruction descriptor" for .kind::f8f6f4):
# bits 4-5 D format (1 = F32), 7-9 A format (0 = E4M3), 10-12 B format (0 = E4M3),
# 15/16 A/B major (0 = K-major), 17-22 N >> 3, 24-28 M >> 4; no negation, dense.
IDESC = (1 << 4) | (0 << 7) | (0 << 10) | ((BN >> 3) << 17) | ((BM >> 4) << 24)
# smem matrix descriptors: K-major, 128-byte swizzle (one 128-byte row per tile row), 8-row
# core-matrix groups 1024 bytes apart; offsets in 16-byte units
DESC_LBO, DESC_SBO, DESC_SWIZZLE_128B = 1, 1024 // 16, 3
DESC_K_STEP = MMA_K // 16  # start-address advance of one k32 step (32 bytes)

MMA = "tcgen05.mma.cta_group::1.kind::f8f6f4"
COMMIT = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64"
TMEM_LD = "tcgen05.ld.sync.aligned.32x32b.x32.b32"
TMA_2D = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
# cuTensorMapEncodeTiled enums
SWIZZLE_128B = 3
L2_PROMO_256B = 3


def _regs(buf, count):
    """The first ``count`` elements of a local buffer, as separate operands."""
    return [buf[i] for i in range(count)]


@T.prim_func
def quantize(x_ptr: T.handle, codes_ptr: T.handle, sx_ptr: T.handle):
    m = T.int32()
    k = T.int32()
    m_pad = T.int32()
    X = T.match_buffer(x_ptr, (m, k), "bfloat16", align=16)
    Codes = T.match_buffer(codes_ptr, (m, k // 4), "uint32", align=16)
    SX = T.match_buffer(sx_ptr, (k // GROUP, m_pad), "float32", align=16)
    T.device_entry()
    cta = T.cta_id([T.ceildiv(m * (k // GROUP), Q_WARPS)])
    tx = T.thread_id([32 * Q_WARPS])
    lane = tx % 32
    group_id = cta * Q_WARPS + tx // 32
    x_words = T.decl_buffer((m, k // 2), "uint32", data=X.data)  # bf16 pairs
    xw = T.alloc_local((2,), "uint32")
    xb = xw.view("bfloat16")
    vals = T.alloc_local((4,), "float32")
    q = T.alloc_local((4,), "float8_e4m3fn")
    amax = T.alloc_local((1,), "float32")
    scale = T.alloc_local((1,), "float32")
    t = T.alloc_local((1,), "float32")
    if group_id < m * (k // GROUP):
        row = group_id // (k // GROUP)
        kb = group_id % (k // GROUP)
        col = kb * GROUP + lane * 4
        xw.vstore([0], x_words.vload([row, col // 2], dtype="uint32x2"))  # 4 consecutive values
        amax[0] = T.float32(0)
        for j in T.unroll(4):
            vals[j] = T.Cast("float32", xb[j])
            amax[0] = T.max(amax[0], T.abs(vals[j]))
        total = T.cuda.warp_max(amax[0])
        T.ptx.div.rn.f32(scale[0], total, T.float32(FP8_MAX))
        scale[0] = T.max(scale[0], T.float32(MIN_SCALE))
        for j in T.unroll(4):
            T.ptx.div.rn.f32(t[0], vals[j], scale[0])
            q[j] = T.Cast(
                "float8_e4m3fn", T.max(T.min(t[0], T.float32(FP8_MAX)), T.float32(-FP8_MAX))
            )
        words = q.view("uint32")
        Codes[row, col // 4] = words[0]
        if lane == 0:
            SX[kb, row] = scale[0]


@T.prim_func
def gemm(
    a_ptr: T.handle,
    b_ptr: T.handle,
    sx_ptr: T.handle,
    sw_ptr: T.handle,
    bias_ptr: T.handle,
    out_ptr: T.handle,
):
    m = T.int32()
    n = T.int32()
    k = T.int32()
    m_pad = T.int32()
    A = T.match_buffer(a_ptr, (m, k), "float8_e4m3fn", align=16)
    B = T.match_buffer(b_ptr, (n, k), "float8_e4m3fn", align=16)
    SX = T.match_buffer(sx_ptr, (k // BK, m_pad), "float32", align=16)
    SW = T.match_buffer(sw_ptr, (n // BN, k // BK), "float32", align=16)
    Bias = T.match_buffer(bias_ptr, (n,), "bfloat16", align=16)
    Out = T.match_buffer(out_ptr, (m, n), "bfloat16", align=16)

    # host side: TMA descriptors (dims and box are innermost first)
    a_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
    T.call_packed(
        "runtime.cuTensorMapEncodeTiled",
        a_map,
        "float8_e4m3fn",
        2,
        A.data,
        k,
        m,
        k,
        BK,
        BM,
        1,
        1,
        0,
        SWIZZLE_128B,
        L2_PROMO_256B,
        0,
    )
    b_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
    T.call_packed(
        "runtime.cuTensorMapEncodeTiled",
        b_map,
        "float8_e4m3fn",
        2,
        B.data,
        k,
        n,
        k,
        BK,
        BN,
        1,
        1,
        0,
        SWIZZLE_128B,
        L2_PROMO_256B,
        0,
    )

    T.device_entry()
    cta = T.cta_id([T.ceildiv(m, BM) * (n // BN)])
    tx = T.thread_id([THREADS])

    smem = T.alloc_buffer((SMEM_BYTES,), "uint8", scope="shared.dyn", align=1024)
    a_s = T.decl_buffer((STAGES, BM, BK), "float8_e4m3fn", data=smem.data, scope="shared.dyn")
    b_s = T.decl_buffer(
        (STAGES, BN, BK), "float8_e4m3fn", data=smem.data, elem_offset=OFF_B, scope="shared.dyn"
    )
    bars = T.decl_buffer(
        (NUM_BARS,), "uint64", data=smem.data, elem_offset=OFF_BAR // 8, scope="shared.dyn"
    )
    tmem_slot = T.decl_buffer(
        (1,), "uint32", data=smem.data, elem_offset=OFF_TMEM // 4, scope="shared.dyn"
    )

    warp = tx // 32
    num_mb = T.ceildiv(m, BM)
    mb = cta % num_mb
    nb = cta // num_mb
    num_kb = k // BK

    if tx == 0:
        for s in T.unroll(NUM_BARS):
            # one arrive each (TMA producer + tx bytes, tcgen05.commit), except acc_empty:
            # one arrive per promotion thread
            T.ptx.mbarrier.init.shared.b64(
                bars.ptr_to([s]),
                T.if_then_else(s >= BAR_ACC_EMPTY, T.uint32(32 * PROMOTE_WARPS), T.uint32(1)),
            )
        T.ptx.fence.mbarrier_init.release.cluster()
    if warp == MMA_WARP:
        T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
            tmem_slot.ptr_to([0]), T.uint32(TMEM_COLS)
        )
        T.ptx["tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned"]()
    T.ptx["tcgen05.fence::before_thread_sync"]()
    T.cuda.cta_sync()
    T.ptx["tcgen05.fence::after_thread_sync"]()
    tmem = tmem_slot[0]

    if warp == TMA_WARP:
        if tx == 32 * TMA_WARP:
            for kb in T.serial(num_kb):
                s = kb % STAGES
                T.cuda.mbarrier_wait(bars.ptr_to([BAR_EMPTY + s]), ((kb // STAGES) % 2) ^ 1)
                T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                    bars.ptr_to([BAR_FULL + s]), T.uint32(STAGE_TX_BYTES)
                )
                T.ptx[TMA_2D](
                    a_s.ptr_to([s, 0, 0]),
                    T.address_of(a_map),
                    kb * BK,
                    mb * BM,
                    bars.ptr_to([BAR_FULL + s]),
                )
                T.ptx[TMA_2D](
                    b_s.ptr_to([s, 0, 0]),
                    T.address_of(b_map),
                    kb * BK,
                    nb * BN,
                    bars.ptr_to([BAR_FULL + s]),
                )
            # tail: wait until every stage is released (the last tcgen05.commit arrivals land
            # before the CTA exits)
            for kb in T.serial(num_kb, num_kb + STAGES):
                T.cuda.mbarrier_wait(
                    bars.ptr_to([BAR_EMPTY + kb % STAGES]), ((kb // STAGES) % 2) ^ 1
                )
    elif warp == MMA_WARP:
        if tx == 32 * MMA_WARP:
            desc_a: T.uint64 = T.uint64(0)
            desc_b: T.uint64 = T.uint64(0)
            for kb in T.serial(num_kb):
                s = kb % STAGES
                acc_buf = kb % ACC_STAGES
                # the accumulator is free once the promotion of K block kb - 2 has read it
                T.cuda.mbarrier_wait(
                    bars.ptr_to([BAR_ACC_EMPTY + acc_buf]), ((kb // ACC_STAGES) % 2) ^ 1
                )
                T.cuda.mbarrier_wait(bars.ptr_to([BAR_FULL + s]), (kb // STAGES) % 2)
                T.ptx["tcgen05.fence::after_thread_sync"]()
                T.cuda.tcgen05.encode_matrix_descriptor(
                    T.address_of(desc_a),
                    a_s.ptr_to([s, 0, 0]),
                    DESC_LBO,
                    DESC_SBO,
                    DESC_SWIZZLE_128B,
                )
                T.cuda.tcgen05.encode_matrix_descriptor(
                    T.address_of(desc_b),
                    b_s.ptr_to([s, 0, 0]),
                    DESC_LBO,
                    DESC_SBO,
                    DESC_SWIZZLE_128B,
                )
                for kk in T.unroll(BK // MMA_K):
                    T.ptx[MMA](
                        T.cuda.get_tmem_addr(tmem, 0, acc_buf * BN),
                        desc_a + T.uint64(kk * DESC_K_STEP),
                        desc_b + T.uint64(kk * DESC_K_STEP),
                        T.uint32(IDESC),
                        T.uint32(0),
                        T.uint32(0),
                        T.uint32(0),
                        T.uint32(0),
                        kk > 0,  # enable_input_d: a fresh block sum per K block
                    )
                T.ptx[COMMIT](bars.ptr_to([BAR_EMPTY + s]))  # the stage, once the MMAs end
                T.ptx[COMMIT](bars.ptr_to([BAR_ACC_FULL + acc_buf]))  # and the block sum
    else:
        acc = T.alloc_local((BN,), "float32")
        blk = T.alloc_local((CHUNK,), "float32")
        sc: T.float32
        row = mb * BM + tx  # tile row tx = TMEM lane tx (warp w reads lanes 32w..32w+31)
        for i in T.unroll(BN):
            acc[i] = T.float32(0)
        for kb in T.serial(num_kb):
            acc_buf = kb % ACC_STAGES
            sc = SX[kb, row] * SW[nb, kb]
            T.cuda.mbarrier_wait(bars.ptr_to([BAR_ACC_FULL + acc_buf]), (kb // ACC_STAGES) % 2)
            T.ptx["tcgen05.fence::after_thread_sync"]()
            for c in T.unroll(BN // CHUNK):
                T.ptx[TMEM_LD](
                    *_regs(blk, CHUNK),
                    T.cuda.get_tmem_addr(tmem, warp * 32, acc_buf * BN + c * CHUNK),
                )
                T.ptx["tcgen05.wait::ld.sync.aligned"]()  # blk is valid only after this
                for j in T.unroll(CHUNK):
                    acc[c * CHUNK + j] = acc[c * CHUNK + j] + blk[j] * sc
            T.ptx["tcgen05.fence::before_thread_sync"]()
            T.ptx.mbarrier.arrive.shared.b64(bars.ptr_to([BAR_ACC_EMPTY + acc_buf]))
        out8 = T.alloc_local((8,), "bfloat16")
        out_words = T.decl_buffer((m, n // 2), "uint32", data=Out.data)  # bf16 pairs
        if row < m:
            for v in T.unroll(BN // 8):
                for j in T.unroll(8):
                    out8[j] = T.Cast(
                        "bfloat16", acc[v * 8 + j] + T.Cast("float32", Bias[nb * BN + v * 8 + j])
                    )
                out_words.vstore(
                    [row, (nb * BN + v * 8) // 2], out8.view("uint32").vload([0], dtype="uint32x4")
                )

    T.ptx["tcgen05.fence::before_thread_sync"]()
    T.cuda.cta_sync()
    if warp == MMA_WARP:
        T.ptx["tcgen05.fence::after_thread_sync"]()
        T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem, T.uint32(TMEM_COLS))


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_100a on a B200; sm_100a when none is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_100a"}


_EXE: list[object] = []
_FNS: dict[str, Any] = {}


def _kernels() -> dict[str, Any]:
    """Both device functions, built once (shape-generic; NVRTC compiles at the first call)."""
    if not _FNS:
        exe = tvm.compile(
            tvm.IRModule({"quantize": quantize, "gemm": gemm}),
            target=tvm.target.Target(_target()),
            tir_pipeline="tirx",
        )
        _EXE.append(exe)
        for name in ("quantize", "gemm"):
            _FNS[name] = exe[name]
    return _FNS


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    fns = _kernels()
    x = attn_output.contiguous()
    m, k = x.shape
    n = o_proj_weight.shape[0]
    if k % GROUP or n % BN:
        raise ValueError(f"in_features and out_features must be multiples of {GROUP}")
    m_pad = (m + BM - 1) // BM * BM
    codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    sx = torch.empty((k // GROUP, m_pad), dtype=torch.float32, device=x.device)
    fns["quantize"](x, codes.view(torch.uint32), sx)  # 4 codes per 32-bit word
    out = torch.empty((m, n), dtype=attn_output.dtype, device=x.device)
    fns["gemm"](
        codes,
        o_proj_weight.contiguous(),
        sx,
        o_proj_weight_scale.float().contiguous(),
        o_proj_bias.contiguous(),
        out,
    )
    return out
