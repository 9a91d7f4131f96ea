"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in TIRx, with the block-scaled GEMM on Hopper tensor cores (``wgmma`` fed by TMA).

Two kernels of one executable, two launches per call, no eager math:

* ``quantize``: one warp per 1x128 activation group. Each lane owns 4 consecutive values;
  warp max of ``|x|`` gives the decode scale ``max(amax / 448, 1e-12)`` and each value becomes
  ``E4M3(clamp(x / scale, -448, 448))``. Both divisions are IEEE ``div.rn.f32`` (NVRTC builds
  TVM kernels with ``--use_fast_math``, under which ``/`` is approximate), so codes and scales
  are bit-identical to the reference's. The 4 codes of a lane are stored as one 32-bit word;
  the scale goes to a transposed, row-padded grid ``SX[K/128, M_pad]`` (one contiguous run of
  128 scales per M tile and K block, which is what the GEMM's TMA reads).
* ``gemm``: a persistent, warp-specialized DeepGEMM-style kernel, one CTA per SM, 384 threads.
  Warpgroup 0 is the producer (one thread issues TMA, registers dropped with ``setmaxnreg``);
  warpgroups 1 and 2 are consumers, each owning 64 rows of the 128x128 output tile.
  Per K block of 128 the producer loads, into one of 6 smem stages (32.5 KB each, 128B
  swizzle), the 128x128 E4M3 tiles of x codes and weight codes plus the 128 x scales
  (``mbarrier::complete_tx`` on a full barrier; OOB rows beyond M are zero-filled by TMA).
  A consumer waits on the stage's full barrier, issues four
  ``wgmma.mma_async.m64n128k32.f32.e4m3.e4m3`` (K-major smem descriptors, start address
  advanced 32 bytes per k32 step) into a fresh block accumulator, waits, frees the stage
  (empty barrier, one arrive per warp) and promotes in fp32:
  ``acc += block * (scale_x[row, kb] * scale_w[n_blk, kb])``, DeepSeek-V3's per-128 promotion
  (the tensor core's fp8 accumulation is narrower than fp32). The epilogue adds the bias,
  rounds to bf16 and stores rows < M. Tiles go round-robin over CTAs in groups of 12 N blocks
  (all M blocks of a group before the next) so one wave's operands stay in L2.

Call path: ``tvm.compile(IRModule, target=sm_90a, tir_pipeline="tirx")`` once; the executable
takes torch tensors directly (TVM-FFI). The TMA tensor maps are encoded on the host side of the
``gemm`` PrimFunc (``runtime.cuTensorMapEncodeTiled``) and passed as ``__grid_constant__``.

Measured on the H200 (2026-12-03, docs/solutions.md): right at every shape tried on the first
run (smoke 48x512x384, 300x1024x512, 48x7680x7680, the workload); 2.24 ms end to end in a plain
process (862 TFLOPS of fp8 work, 44 % of the 1979 TFLOPS dense peak); through the trusted
grader 2.20-2.26 ms, 17.9-18.4x eager (2.11 ms of device time for both kernels, 0.145 ms of
host time). The hybrid it replaced (quantization kernels, eager fp32 GEMM) is
``variants/p52_tirx_hybrid.py`` (38 ms, 1.06x).
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

ARCHS = ("sm_90a",)  # WGMMA: Hopper only (problems/targets.py)

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12

# quantization kernel
Q_WARPS = 8  # groups (warps) per CTA

# GEMM tiling
BM = 128  # CTA tile rows (2 consumer warpgroups x 64)
BN = 128  # CTA tile columns (= weight scale block)
BK = 128  # K block (= scale block; 128 bytes of E4M3 = one 128B swizzle row)
STAGES = 6
GROUP_N = 12  # N blocks per raster group
THREADS = 384  # producer warpgroup + 2 consumer warpgroups
ACC = BN // 2  # fp32 accumulator registers per thread of an m64n128 wgmma
A_STAGE_BYTES = BM * BK
B_STAGE_BYTES = BN * BK
SX_STAGE_BYTES = BM * 4
OFF_B = STAGES * A_STAGE_BYTES
OFF_SX = OFF_B + STAGES * B_STAGE_BYTES
OFF_BAR = OFF_SX + STAGES * SX_STAGE_BYTES
SMEM_BYTES = OFF_BAR + 2 * STAGES * 8
STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES + SX_STAGE_BYTES
WGMMA = "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
TMA_2D = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
# cuTensorMapEncodeTiled enums
SWIZZLE_NONE = 0
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
    num_ctas: T.int32,
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
    sx_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
    T.call_packed(
        "runtime.cuTensorMapEncodeTiled",
        sx_map,
        "float32",
        2,
        SX.data,
        m_pad,
        k // BK,
        m_pad * 4,
        BM,
        1,
        1,
        1,
        0,
        SWIZZLE_NONE,
        0,
        0,
    )

    T.device_entry()
    cta = T.cta_id([num_ctas])
    tx = T.thread_id([THREADS])

    smem = T.alloc_buffer((SMEM_BYTES,), "uint8", scope="shared.dyn", align=1024)
    a_s = T.decl_buffer((STAGES, BM, BK), "float8_e4m3fn", data=smem.data, scope="shared.dyn")
    b_s = T.decl_buffer(
        (STAGES, BN, BK), "float8_e4m3fn", data=smem.data, elem_offset=OFF_B, scope="shared.dyn"
    )
    sx_s = T.decl_buffer(
        (STAGES, BM), "float32", data=smem.data, elem_offset=OFF_SX // 4, scope="shared.dyn"
    )
    bars = T.decl_buffer(
        (2 * STAGES,), "uint64", data=smem.data, elem_offset=OFF_BAR // 8, scope="shared.dyn"
    )

    wg = tx // 128
    warp = (tx % 128) // 32
    lane = tx % 32
    num_kb = k // BK
    num_mb = T.ceildiv(m, BM)
    num_nb = n // BN
    num_tiles = num_mb * num_nb
    my_tiles = T.ceildiv(num_tiles - cta, num_ctas)

    if tx == 0:
        for s in T.unroll(2 * STAGES):
            # full barriers: one arrive (producer) + tx bytes; empty: one arrive per warp
            T.ptx.mbarrier.init.shared.b64(
                bars.ptr_to([s]), T.if_then_else(s < STAGES, T.uint32(1), T.uint32(8))
            )
        T.ptx.fence.mbarrier_init.release.cluster()
    T.cuda.cta_sync()

    it: T.int32 = 0
    if wg == 0:
        T.ptx.setmaxnreg.dec.sync.aligned.u32(40)
        if tx == 0:
            for ti in T.serial(my_tiles):
                tile = cta + ti * num_ctas
                grp = tile // (GROUP_N * num_mb)
                rem = tile - grp * (GROUP_N * num_mb)
                gsz = T.min(GROUP_N, num_nb - grp * GROUP_N)
                mb = rem // gsz
                nb = grp * GROUP_N + rem % gsz
                for kb in T.serial(num_kb):
                    s = it % STAGES
                    T.cuda.mbarrier_wait(bars.ptr_to([STAGES + s]), ((it // STAGES) % 2) ^ 1)
                    T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                        bars.ptr_to([s]), T.uint32(STAGE_TX_BYTES)
                    )
                    T.ptx[TMA_2D](
                        a_s.ptr_to([s, 0, 0]),
                        T.address_of(a_map),
                        kb * BK,
                        mb * BM,
                        bars.ptr_to([s]),
                    )
                    T.ptx[TMA_2D](
                        b_s.ptr_to([s, 0, 0]),
                        T.address_of(b_map),
                        kb * BK,
                        nb * BN,
                        bars.ptr_to([s]),
                    )
                    T.ptx[TMA_2D](
                        sx_s.ptr_to([s, 0]), T.address_of(sx_map), mb * BM, kb, bars.ptr_to([s])
                    )
                    it = it + 1
    else:
        T.ptx.setmaxnreg.inc.sync.aligned.u32(232)
        cw = wg - 1  # consumer warpgroup: rows cw*64 .. cw*64+63 of the tile
        row_in = cw * 64 + warp * 16 + lane // 4  # and row_in + 8
        acc = T.alloc_local((ACC,), "float32")
        blk = T.alloc_local((ACC,), "float32")
        desc_a: T.uint64 = T.uint64(0)
        desc_b: T.uint64 = T.uint64(0)
        sw: T.float32
        pair = T.alloc_local((2,), "bfloat16")
        pair_word = pair.view("uint32")
        out_words = T.decl_buffer((m, n // 2), "uint32", data=Out.data)  # bf16 pairs
        f0: T.float32
        f1: T.float32
        for i in T.unroll(ACC):
            blk[i] = T.float32(0)
        for ti in T.serial(my_tiles):
            tile = cta + ti * num_ctas
            grp = tile // (GROUP_N * num_mb)
            rem = tile - grp * (GROUP_N * num_mb)
            gsz = T.min(GROUP_N, num_nb - grp * GROUP_N)
            mb = rem // gsz
            nb = grp * GROUP_N + rem % gsz
            for i in T.unroll(ACC):
                acc[i] = T.float32(0)
            for kb in T.serial(num_kb):
                s = it % STAGES
                sw = SW[nb, kb]
                T.cuda.mbarrier_wait(bars.ptr_to([s]), (it // STAGES) % 2)
                f0 = sx_s[s, row_in] * sw
                f1 = sx_s[s, row_in + 8] * sw
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_a), a_s.ptr_to([s, cw * 64, 0]), 1, 64, 3
                )
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_b), b_s.ptr_to([s, 0, 0]), 1, 64, 3
                )
                T.ptx.wgmma.fence.sync.aligned()
                for kk in T.unroll(BK // 32):
                    T.ptx[WGMMA](
                        *_regs(blk, ACC),
                        desc_a + T.uint64(kk * 2),
                        desc_b + T.uint64(kk * 2),
                        kk > 0,
                        1,
                        1,
                    )
                T.ptx.wgmma.commit_group.sync.aligned()
                T.ptx.wgmma.wait_group.sync.aligned(0)
                if lane == 0:
                    T.ptx.mbarrier.arrive.shared.b64(bars.ptr_to([STAGES + s]))
                for i in T.unroll(ACC // 4):
                    acc[4 * i] = acc[4 * i] + blk[4 * i] * f0
                    acc[4 * i + 1] = acc[4 * i + 1] + blk[4 * i + 1] * f0
                    acc[4 * i + 2] = acc[4 * i + 2] + blk[4 * i + 2] * f1
                    acc[4 * i + 3] = acc[4 * i + 3] + blk[4 * i + 3] * f1
                it = it + 1
            row0 = mb * BM + row_in
            for i in T.unroll(ACC // 4):
                col = nb * BN + i * 8 + (lane % 4) * 2
                b0 = T.Cast("float32", Bias[col])
                b1 = T.Cast("float32", Bias[col + 1])
                pair[0] = T.Cast("bfloat16", acc[4 * i] + b0)
                pair[1] = T.Cast("bfloat16", acc[4 * i + 1] + b1)
                if row0 < m:
                    out_words[row0, col // 2] = pair_word[0]
                pair[0] = T.Cast("bfloat16", acc[4 * i + 2] + b0)
                pair[1] = T.Cast("bfloat16", acc[4 * i + 3] + b1)
                if row0 + 8 < m:
                    out_words[row0 + 8, col // 2] = pair_word[0]


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_90a on an H200; sm_90a when no GPU is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_90a"}


def _num_sms() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132


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
        _FNS["sms"] = _num_sms()
    return _FNS


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    fns = _kernels()
    x = attn_output.contiguous()
    m, k = x.shape
    n = o_proj_weight.shape[0]
    m_pad = (m + BM - 1) // BM * BM
    codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    sx = torch.empty((k // GROUP, m_pad), dtype=torch.float32, device=x.device)
    fns["quantize"](x, codes.view(torch.uint32), sx)  # 4 codes per 32-bit word
    out = torch.empty((m, n), dtype=attn_output.dtype, device=x.device)
    tiles = m_pad // BM * (n // BN)
    fns["gemm"](
        codes,
        o_proj_weight.contiguous(),
        sx,
        o_proj_weight_scale.float().contiguous(),
        o_proj_bias.contiguous(),
        out,
        min(fns["sms"], tiles),
    )
    return out
