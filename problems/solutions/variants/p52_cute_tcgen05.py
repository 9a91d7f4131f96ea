"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in CuTe DSL for Blackwell (sm_100a, the B200): activation quantization plus a block-scaled FP8
GEMM on tcgen05 tensor cores with the accumulator in tensor memory (TMEM). The Blackwell
counterpart of ``p52_cute.py``, whose WGMMA does not exist on sm_100a. No eager math.

NOT RUN: no B200 was available; this file is verified by compiling it for sm_100a on a CPU
(``problems/solutions/compile_check.py --arch sm_100a``) and by a torch emulation of its
arithmetic (``tests/solutions/test_p52_tcgen05_emulation.py``). Its speed is unknown.

Two kernels, launched in order by one ``@cute.jit`` function:

* quantize: ``p52_cute.py``'s quantize kernel, unchanged (plain CuTe, no tensor cores): a warp
  per K block of 4 rows, warp max, scale ``max(amax / 448, 1e-12)``, ``x / scale`` clamped and
  rounded to E4M3 (bit-identical to the reference's codes); codes [M, K] and scales
  transposed, ``sxT[K/128, M_pad]`` (M_pad: M rounded up to the 128-row tile).
* GEMM: one CTA per 128x128 output tile, 192 threads in three roles:
  - warp 4 loads the 128x128 code tiles of A and B per K block with TMA into a 6-stage smem
    ring (``PipelineTmaUmma``; TMA zero-fills rows past M);
  - warp 5 issues, per K block, four ``tcgen05.mma`` (kind::f8f6f4, 128x128x32, E4M3 x E4M3,
    fp32) into one of two 128-column TMEM accumulators, the first with accumulate off: a
    fresh block sum per K block; ``tcgen05.commit`` frees the smem stage and hands the
    accumulator over (``PipelineUmmaAsync``);
  - warps 0-3 (one warpgroup, so together they reach all 128 TMEM lanes) promote: each
    thread owns one row of the tile; per K block it reads the block sum in 4 loads of 32
    columns (``tcgen05.ld`` 32x32b, each followed by ``tcgen05.wait::ld``: the registers are
    undefined before it) and does ``acc += block * (scale_x[row, kb] *
    scale_w[n_blk, kb])``, one fp32 FMA per element into 128 registers, then frees the TMEM
    buffer for the K block after next. Two TMEM buffers let the MMAs of one K block run
    while the previous one is promoted. Epilogue: ``+ bias`` (fp32), bf16, 16-byte stores of
    the row's 128 outputs, rows >= M skipped; so any M >= 1 works. K and N must be multiples
    of 128.
  Smem: 6 x 32 KiB stages (192 KiB) of the B200's 228 KiB; TMEM: 256 of 512 columns.

Call path as ``p52_cute.py``: compiled once per (shapes, device) with
``options="--enable-tvm-ffi"``; ``solve`` allocates the bf16 output, reuses the code/scale
scratch cached per (M, K, device), and makes one TVM-FFI call.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
import torch
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.cute.runtime import from_dlpack
from cutlass.memory import TmemAllocator

ARCHS = ("sm_100a",)  # tcgen05 MMA and TMEM: Blackwell only (problems/targets.py)

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12
Q_WARPS = 8  # quantize kernel: warps per CTA
Q_ROWS = 4  # quantize kernel: rows (1x128 groups of one K block) per warp
Q_VEC = 4  # quantize kernel: contiguous elements per lane

TILE_M, TILE_N, TILE_K = 128, 128, 128  # one K tile = one 128-wide scale block
AB_STAGES = 6
ACC_STAGES = 2  # TMEM accumulators: 2 x 128 fp32 columns
TMEM_COLS = 256
CHUNK = 32  # columns per tcgen05.ld of the promotion (32x32b, 32 repetitions)
PROMOTE_WARPS = 4  # warps 0-3
TMA_WARP = 4
MMA_WARP = 5
THREADS = 32 * 6


# --------------------------------------------------------------------------- quantize


@cute.kernel
def _quantize_kernel(mX: cute.Tensor, mQ: cute.Tensor, mSxT: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    rows = mX.shape[0]
    groups_per_row = mX.shape[1] // GROUP
    task = bidx * Q_WARPS + tidx // 32
    if task < (rows + Q_ROWS - 1) // Q_ROWS * groups_per_row:
        rb = task // groups_per_row  # K blocks fastest: a CTA reads 2 KB runs of 4 rows
        kb = task - rb * groups_per_row
        row0 = rb * Q_ROWS
        vec = kb * (GROUP // Q_VEC) + lane
        # All Q_ROWS loads first (8 bytes per lane each; rows past the end re-read the last).
        xs = []
        for r in cutlass.range_constexpr(Q_ROWS):
            row = cutlass.min(row0 + r, rows - 1)
            xr = cute.make_rmem_tensor((Q_VEC,), cutlass.Float32)
            xr.store(cute.local_tile(mX[row, None], (Q_VEC,), (vec,)).load().to(cutlass.Float32))
            xs.append(xr)
        for r in cutlass.range_constexpr(Q_ROWS):
            xr = xs[r]
            amax = cutlass.Float32(0.0)
            for j in cutlass.range_constexpr(Q_VEC):
                amax = cute.arch.fmax(amax, cute.math.absf(xr[j]))
            amax = cute.arch.warp_reduction_max(amax)
            scale = cute.arch.fmax(amax / cutlass.Float32(FP8_MAX), cutlass.Float32(MIN_SCALE))
            qr = cute.make_rmem_tensor((Q_VEC,), cutlass.Float8E4M3FN)
            for j in cutlass.range_constexpr(Q_VEC):
                v = xr[j] / scale
                v = cute.arch.fmax(cute.arch.fmin(v, cutlass.Float32(FP8_MAX)), -FP8_MAX)
                qr[j] = v.to(cutlass.Float8E4M3FN)
            if row0 + r < rows:
                cute.local_tile(mQ[row0 + r, None], (Q_VEC,), (vec,)).store(qr.load())
                if lane == 0:
                    mSxT[kb, row0 + r] = scale


# --------------------------------------------------------------------------- GEMM


class _Sm100BlockScaledGemm:
    """One CTA per 128x128 tile: TMA warp, tcgen05 MMA warp, promotion warpgroup."""

    def __init__(self) -> None:
        assert TILE_N == GROUP and TILE_K == GROUP  # one weight scale per (tile, K tile)
        self.acc_dtype = cutlass.Float32
        self.mma_tiler = (TILE_M, TILE_N, TILE_K)
        self.cta_group = tcgen05.CtaGroup.ONE

    @cute.jit
    def launch(
        self,
        mA: cute.Tensor,  # E4M3 activation codes [M, K]
        mB: cute.Tensor,  # E4M3 weight codes [N, K]
        mSxT: cute.Tensor,  # fp32 activation scales [K/128, M_pad]
        mSw: cute.Tensor,  # fp32 weight scales [N/128, K/128]
        mBias: cute.Tensor,  # bf16 [N]
        mD: cute.Tensor,  # bf16 output [M, N]
    ):
        f8 = mA.element_type
        tiled_mma = sm100_utils.make_trivial_tiled_mma(
            f8,
            mB.element_type,
            utils.LayoutEnum.from_tensor(mA).mma_major_mode(),
            utils.LayoutEnum.from_tensor(mB).mma_major_mode(),
            self.acc_dtype,
            self.cta_group,
            self.mma_tiler[:2],
        )
        a_smem = sm100_utils.make_smem_layout_a(tiled_mma, self.mma_tiler, f8, AB_STAGES)
        b_smem = sm100_utils.make_smem_layout_b(
            tiled_mma, self.mma_tiler, mB.element_type, AB_STAGES
        )
        cluster_vmnk = cute.tiled_divide(cute.make_layout((1, 1, 1)), (tiled_mma.thr_id.shape,))
        a_stage = cute.slice_(a_smem, (None, None, None, 0))
        b_stage = cute.slice_(b_smem, (None, None, None, 0))
        tma_a, tma_mA = cute.nvgpu.make_tiled_tma_atom_A(
            cpasync.CopyBulkTensorTileG2SOp(self.cta_group),
            mA,
            a_stage,
            self.mma_tiler,
            tiled_mma,
            cluster_vmnk.shape,
        )
        tma_b, tma_mB = cute.nvgpu.make_tiled_tma_atom_B(
            cpasync.CopyBulkTensorTileG2SOp(self.cta_group),
            mB,
            b_stage,
            self.mma_tiler,
            tiled_mma,
            cluster_vmnk.shape,
        )
        self.tx_bytes = cute.size_in_bytes(f8, a_stage) + cute.size_in_bytes(
            mB.element_type, b_stage
        )

        @cute.struct
        class SharedStorage:
            ab_mbar: cute.struct.MemRange[cutlass.Int64, AB_STAGES * 2]
            acc_mbar: cute.struct.MemRange[cutlass.Int64, ACC_STAGES * 2]
            tmem_ptr: cutlass.Int32
            sA: cute.struct.Align[cute.struct.MemRange[f8, cute.cosize(a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[mB.element_type, cute.cosize(b_smem)], 1024]

        self.shared_storage = SharedStorage
        grid = (cute.ceil_div(mD.shape[0], TILE_M), mD.shape[1] // TILE_N, 1)
        self.kernel(
            tiled_mma,
            tma_a,
            tma_mA,
            tma_b,
            tma_mB,
            mSxT,
            mSw,
            mBias,
            mD,
            cluster_vmnk,
            a_smem,
            b_smem,
        ).launch(grid=grid, block=[THREADS, 1, 1], cluster=(1, 1, 1))

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        mSxT: cute.Tensor,
        mSw: cute.Tensor,
        mBias: cute.Tensor,
        mD: cute.Tensor,
        cluster_vmnk: cute.Layout,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        m_blk, n_blk, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == TMA_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ab_pipe = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_mbar.data_ptr(),
            num_stages=AB_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            tx_count=self.tx_bytes,
            cta_layout_vmnk=cluster_vmnk,
        )
        acc_pipe = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_mbar.data_ptr(),
            num_stages=ACC_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32 * PROMOTE_WARPS),
            cta_layout_vmnk=cluster_vmnk,
        )
        tmem = TmemAllocator(
            storage.tmem_ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=1, num_threads=THREADS),
            allocator_warp_id=MMA_WARP,
        )

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        tAsA, tAgA = self.tma_tiles(tiled_mma, tma_a, mA, sA, m_blk, True)
        tBsB, tBgB = self.tma_tiles(tiled_mma, tma_b, mB, sB, n_blk, False)
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        acc_layout = tiled_mma.make_fragment_C(cute.append(acc_shape, ACC_STAGES)).layout
        k_tiles = cute.size(tAgA, mode=[1])

        tmem.allocate(TMEM_COLS)
        tmem.wait_for_alloc()
        tCtAcc = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), acc_layout)

        if warp == TMA_WARP:
            self.load(ab_pipe, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k_tiles)
        if warp == MMA_WARP:
            self.mma(ab_pipe, acc_pipe, tiled_mma, tCtAcc, tCrA, tCrB, k_tiles)
        if warp < PROMOTE_WARPS:
            self.promote(acc_pipe, tCtAcc, mSxT, mSw, mBias, mD, m_blk, n_blk, k_tiles, tidx)

        tmem.relinquish_alloc_permit()
        pipeline.NamedBarrier(barrier_id=2, num_threads=THREADS).arrive_and_wait()
        tmem.free(tCtAcc.iterator)

    def tma_tiles(self, tiled_mma, tma, mX, sX, blk, is_a):
        """(smem stages, this tile's K blocks in global) of one operand, partitioned for TMA."""
        gX = cute.local_tile(mX, (TILE_M, TILE_K), (None, None))  # (128, 128, RestMN, RestK)
        thr_mma = tiled_mma.get_slice(0)
        tCgX = thr_mma.partition_A(gX) if is_a else thr_mma.partition_B(gX)
        tXsX, tXgX = cpasync.tma_partition(
            tma,
            0,
            cute.make_layout(1),
            cute.group_modes(sX, 0, 3),
            cute.group_modes(tCgX, 0, 3),
        )
        return tXsX, tXgX[(None, blk, None)]

    @cute.jit
    def load(self, ab_pipe, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k_tiles):
        """TMA warp: one K block of A and B codes per smem stage."""
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, AB_STAGES)
        for kt in cutlass.range(k_tiles, unroll=1):
            ab_pipe.producer_acquire(state)
            bar = ab_pipe.producer_get_barrier(state)
            cute.copy(tma_a, tAgA[(None, kt)], tAsA[(None, state.index)], tma_bar_ptr=bar)
            cute.copy(tma_b, tBgB[(None, kt)], tBsB[(None, state.index)], tma_bar_ptr=bar)
            ab_pipe.producer_commit(state)
            state.advance()
        ab_pipe.producer_tail(state)

    @cute.jit
    def mma(self, ab_pipe, acc_pipe, tiled_mma, tCtAcc, tCrA, tCrB, k_tiles):
        """MMA warp: a fresh TMEM block sum per K block (accumulate off for its first MMA)."""
        ab_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, AB_STAGES)
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, ACC_STAGES)
        k_blocks = cute.size(tCrA, mode=[2])
        for _kt in cutlass.range(k_tiles, unroll=1):
            acc_pipe.producer_acquire(acc_state)
            ab_pipe.consumer_wait(ab_state)
            acc = tCtAcc[(None, None, None, acc_state.index)]
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for kb in cutlass.range_constexpr(k_blocks):
                coord = (None, None, kb, ab_state.index)
                cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
            ab_pipe.consumer_release(ab_state)  # the stage is free once these MMAs finish
            acc_pipe.producer_commit(acc_state)  # and the block sum is ready then
            ab_state.advance()
            acc_state.advance()
        acc_pipe.producer_tail(acc_state)

    @cute.jit
    def promote(self, acc_pipe, tCtAcc, mSxT, mSw, mBias, mD, m_blk, n_blk, k_tiles, tidx):
        """Promotion warpgroup: acc += block * scale per K block, then the epilogue."""
        t2r_atom = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), self.acc_dtype)
        tile0 = cute.flat_divide(tCtAcc[((None, None), 0, 0, 0)], (TILE_M, CHUNK))
        t2r = tcgen05.make_tmem_copy(t2r_atom, tile0[(None, None, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        # tile coordinates (row, col) of each register, per 32-column chunk
        coords = cute.flat_divide(cute.make_identity_tensor((TILE_M, TILE_N)), (TILE_M, CHUNK))
        tTR_c = thr_t2r.partition_D(coords)
        chunks = TILE_N // CHUNK
        blk = cute.make_rmem_tensor(tTR_c[(None, None, None, 0, 0)].shape, self.acc_dtype)
        acc = cute.make_rmem_tensor((chunks, cute.size(blk)), self.acc_dtype)
        acc.fill(0.0)
        row = m_blk * TILE_M + tTR_c[(0, 0, 0, 0, 0)][0]  # one TMEM lane (tile row) per thread

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, ACC_STAGES)
        for kt in cutlass.range(k_tiles, unroll=1):
            s = mSxT[kt, row] * mSw[n_blk, kt]
            acc_pipe.consumer_wait(state)
            stage = cute.flat_divide(tCtAcc[((None, None), 0, 0, state.index)], (TILE_M, CHUNK))
            tTR_t = thr_t2r.partition_S(stage)
            for c in cutlass.range_constexpr(chunks):
                cute.copy(t2r, tTR_t[(None, None, None, 0, c)], blk)
                cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: blk is valid now
                for j in cutlass.range_constexpr(cute.size(blk)):
                    acc[c, j] = acc[c, j] + blk[j] * s
            acc_pipe.consumer_release(state)
            state.advance()

        if row < mD.shape[0]:
            out = cute.make_rmem_tensor((cute.size(blk),), mD.element_type)
            for c in cutlass.range_constexpr(chunks):
                part = n_blk * chunks + c
                bias = cute.local_tile(mBias, (CHUNK,), (part,)).load().to(self.acc_dtype)
                for j in cutlass.range_constexpr(cute.size(blk)):
                    out[j] = (acc[c, j] + bias[j]).to(mD.element_type)
                cute.local_tile(mD[row, None], (CHUNK,), (part,)).store(out.load())


# --------------------------------------------------------------------------- host


class _Forward:
    def __init__(self) -> None:
        self.gemm = _Sm100BlockScaledGemm()

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,
        mW: cute.Tensor,
        mSw: cute.Tensor,
        mBias: cute.Tensor,
        mQ: cute.Tensor,
        mSxT: cute.Tensor,
        mOut: cute.Tensor,
    ):
        tasks = (mX.shape[0] + Q_ROWS - 1) // Q_ROWS * (mX.shape[1] // GROUP)
        _quantize_kernel(mX, mQ, mSxT).launch(
            grid=[(tasks + Q_WARPS - 1) // Q_WARPS, 1, 1], block=[32 * Q_WARPS, 1, 1]
        )
        self.gemm.launch(mQ, mW, mSxT, mSw, mBias, mOut)


_CACHE: dict[tuple[object, ...], Any] = {}
_SCRATCH: dict[tuple[object, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def _scratch(m: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (m, k, device)
    bufs = _SCRATCH.get(key)
    if bufs is None:
        m_pad = -(-m // TILE_M) * TILE_M  # every tile row reads an in-bounds scale
        codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=device)
        scales_t = torch.empty((k // GROUP, m_pad), dtype=torch.float32, device=device)
        bufs = _SCRATCH[key] = (codes, scales_t)
    return bufs


def _compile(tensors: list[torch.Tensor], key: tuple) -> Any:
    x, w = tensors[0], tensors[1]
    if x.shape[-1] % GROUP or w.shape[0] % GROUP or w.shape[1] % GROUP:
        raise ValueError(f"dimensions must be multiples of the {GROUP}-element group")
    # 16-byte aligned (fresh allocations): TMA operands, vector loads and stores, scratch.
    aligns = (16, 16, None, 16, 16, 16, 16)  # x, w, w scales, bias, codes, sxT, out
    args = [from_dlpack(t, assumed_align=a) for t, a in zip(tensors, aligns)]
    fn = cute.compile(_Forward(), *args, options="--enable-tvm-ffi")
    _CACHE[key] = fn
    return fn


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    m, k = attn_output.shape
    device = attn_output.device
    codes, scales_t = _scratch(m, k, device)
    out = torch.empty((m, o_proj_weight.shape[0]), dtype=attn_output.dtype, device=device)
    key = (attn_output.shape, o_proj_weight.shape, device)
    args = [attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias, codes, scales_t, out]
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile(args, key)
    fn(*args)
    return out
