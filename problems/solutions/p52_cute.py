"""p52 FP8 attention output projection (Qwen3-VL, 1x128 activation / 128x128 weight blocks)
in CuTe DSL: activation quantization plus a block-scaled FP8 GEMM on Hopper tensor cores
(DeepSeek-V3 / DeepGEMM style), called through TVM-FFI. No eager math.

Two kernels, launched in order by one ``@cute.jit`` function:

* quantize: a warp handles one K block (128 columns) of 4 rows; each lane loads 4 contiguous
  bf16 per row (8-byte loads, all 4 rows issued first), the warp takes each group's absolute
  maximum (warp max), the decode scale is ``max(amax / 448, 1e-12)`` (fp32) and
  ``x / scale`` (IEEE fp32 division, clamped to +-448) is rounded to E4M3: the first p52 CuTe
  kernel's arithmetic, so the codes are bit-identical to the reference's. It writes the codes
  [M, K] and the scales transposed, ``sxT[K/128, M_pad]`` (M_pad: M rounded up to the GEMM's
  cluster of two 128-row tiles), so one K block's scales for consecutive rows are contiguous.
* GEMM, persistent and warp-specialized like CUTLASS's Hopper FP8 GEMM: 384 threads = one
  producer warpgroup (one warp issues the TMA loads of 128x128 code tiles of A and B into a
  6-stage smem ring guarded by a ``PipelineTmaAsync``; registers lowered to 40) and two
  consumer warpgroups (232 registers), each owning 64 rows of the 128x128 output tile. Per K
  block a consumer issues four ``wgmma.m64n128k32.f32.e4m3.e4m3`` (both operands from
  128B-swizzled smem) into a fresh block accumulator, waits, releases the stage and promotes
  ``acc += block_acc * (scale_x[row, kb] * scale_w[n_blk, kb])`` with one fp32 FMA per element
  (the per-128 promotion Hopper's reduced-precision FP8 accumulation needs). A thread's
  fragment covers 2 rows, so it loads 2 activation scales and the weight block's scale per K
  block, from L2, one K block ahead. The two consumer warpgroups drift out of phase, so one
  promotes while the other's WGMMAs run. Clusters of 2 CTAs along M multicast the weight tile;
  tiles are walked in bands of up to 12 N tiles (a divisor of the N tile count) for L2 reuse.
  Epilogue: ``+ bias`` (fp32), bf16, ``stmatrix`` to smem, TMA store per 128x32 subtile. TMA
  zero-fills the M tail on load and clips it on store, so any M >= 1 works; K and N must be
  multiples of 128. Smem: 6 x 32 KiB stages + 32 KiB epilogue = 225 KiB; 168 registers at
  launch, no spills (ptxas, sm_90a).

Call path: compiled once per (shapes, device) with ``options="--enable-tvm-ffi"`` (the
persistent grid is the device's ``get_max_active_clusters(2)``); ``solve`` allocates the bf16
output, reuses the code/scale scratch cached per (M, K, device), and makes one TVM-FFI call.

Measured on the H200 (2026-12-03, docs/solutions.md): right on the workload and at M >= 128;
with fewer than 128 tokens (the smoke shape, 48) the kernels gave wrong rows, so ``solve``
copies a token count that is not a multiple of 256 into zero-padded rows first (checked at 48
and 300 tokens) and the workload (16,384 tokens) takes the direct path. 2.10 ms end to end in a
plain process (918 TFLOPS of fp8 work, 46 % of the 1979 TFLOPS dense peak); through the
trusted grader 2.20 ms, 18.4x eager (2.04 ms of device time for both kernels, 0.144 ms of host
time). The hybrid it replaced (quantization kernels, eager fp32 GEMM) is
``variants/p52_cute_hybrid.py`` (38 ms, 1.06x).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a",)  # WGMMA: Hopper only (problems/targets.py)

GROUP = 128
FP8_MAX = 448.0
MIN_SCALE = 1e-12
Q_WARPS = 8  # quantize kernel: warps per CTA
Q_ROWS = 4  # quantize kernel: rows (1x128 groups of one K block) per warp
Q_VEC = 4  # quantize kernel: contiguous elements per lane

TILE_M, TILE_N, TILE_K = 128, 128, 128
CLUSTER_M, CLUSTER_N = 2, 1  # 2 CTAs along M share the weight tile (TMA multicast)
MAX_BAND = 12  # tiles are walked in bands of up to this many N tiles (L2 reuse)
EPI_TILE = (128, 32)
EPI_STAGES = 4
SMEM_BYTES = 232448  # sm_90: 227 KiB of shared memory per CTA


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


class _BlockScaledGemm:
    """Persistent warp-specialized block-scaled FP8 GEMM for sm_90a (see module docstring)."""

    def __init__(self, max_clusters: int, n_tiles: int):
        # One weight scale per (CTA tile, K tile), one promotion per K tile.
        assert TILE_N == GROUP and TILE_K == GROUP
        # Band width along N: a divisor of the N cluster count, so the scheduler pads nothing.
        n_clusters = -(-n_tiles // CLUSTER_N)
        self.band = max(d for d in range(1, MAX_BAND + 1) if n_clusters % d == 0)
        self.acc_dtype = cutlass.Float32
        self.tile_mnk = (TILE_M, TILE_N, TILE_K)
        self.cluster_mn = (CLUSTER_M, CLUSTER_N)
        self.atom_layout_mnk = (2, 1, 1)  # two consumer warpgroups, 64 rows each
        self.num_mma_wg = 2
        self.threads_per_wg = 128
        self.threads = (1 + self.num_mma_wg) * self.threads_per_wg
        self.load_warp = 0
        self.epi_store_warp = 4  # first warp of the first consumer warpgroup
        self.load_regs = 40
        self.mma_regs = 232
        self.max_active_clusters = max_clusters
        self.num_mcast_a = CLUSTER_N
        self.num_mcast_b = CLUSTER_M
        self.num_mma_threads = self.num_mma_wg * self.threads_per_wg
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)
        ab_bytes = (TILE_M + TILE_N) * TILE_K  # one byte per E4M3 code
        epi_bytes = EPI_TILE[0] * EPI_TILE[1] * 2 * EPI_STAGES
        self.ab_stages = (SMEM_BYTES - 1024 - epi_bytes) // ab_bytes

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
        self.ab_dtype = f8
        self.d_dtype = mD.element_type
        self.d_layout = utils.LayoutEnum.from_tensor(mD)
        a_layout = utils.LayoutEnum.from_tensor(mA)
        b_layout = utils.LayoutEnum.from_tensor(mB)
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            f8,
            mB.element_type,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, TILE_N),
        )
        a_smem = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, f8, self.ab_stages)
        b_smem = sm90_utils.make_smem_layout_b(
            b_layout, self.tile_mnk, mB.element_type, self.ab_stages
        )
        d_smem = sm90_utils.make_smem_layout_epi(self.d_dtype, self.d_layout, EPI_TILE, EPI_STAGES)

        a_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.num_mcast_a > 1):
            a_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        b_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.num_mcast_b > 1):
            b_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_a, tma_mA = cute.nvgpu.cpasync.make_tiled_tma_atom(
            a_op,
            mA,
            cute.slice_(a_smem, (None, None, 0)),
            (TILE_M, TILE_K),
            num_multicast=self.num_mcast_a,
        )
        tma_b, tma_mB = cute.nvgpu.cpasync.make_tiled_tma_atom(
            b_op,
            mB,
            cute.slice_(b_smem, (None, None, 0)),
            (TILE_N, TILE_K),
            num_multicast=self.num_mcast_b,
        )
        tma_d, tma_mD = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mD,
            cute.slice_(d_smem, (None, None, 0)),
            EPI_TILE,
        )

        tiles = cute.zipped_divide(mD, tiler=(TILE_M, TILE_N))
        sched_params = utils.PersistentTileSchedulerParams(
            tiles[(0, (None, None))].shape + (1,),
            (*self.cluster_mn, 1),
            self.band,
            True,
        )
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(
            sched_params, self.max_active_clusters
        )

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[f8, cute.cosize(a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[mB.element_type, cute.cosize(b_smem)], 1024]
            sD: cute.struct.Align[cute.struct.MemRange[mD.element_type, cute.cosize(d_smem)], 1024]

        self.shared_storage = SharedStorage

        self.kernel(
            tma_a,
            tma_mA,
            tma_b,
            tma_mB,
            tma_d,
            tma_mD,
            mSxT,
            mSw,
            mBias,
            tiled_mma,
            cute.make_layout((*self.cluster_mn, 1)),
            a_smem,
            b_smem,
            d_smem,
            sched_params,
        ).launch(
            grid=grid,
            block=[self.threads, 1, 1],
            cluster=(*self.cluster_mn, 1),
            min_blocks_per_mp=1,
        )

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_d: cute.CopyAtom,
        mD: cute.Tensor,
        mSxT: cute.Tensor,
        mSw: cute.Tensor,
        mBias: cute.Tensor,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        d_smem: cute.ComposedLayout,
        sched_params: utils.PersistentTileSchedulerParams,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_d)

        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cta_layout_mnk.get_flat_coord(cta_rank)
        a_mask = 0
        if cutlass.const_expr(self.num_mcast_a > 1):
            a_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=1)
        b_mask = 0
        if cutlass.const_expr(self.num_mcast_b > 1):
            b_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=0)

        a_stage = cute.slice_(a_smem, (None, None, 0))
        b_stage = cute.slice_(b_smem, (None, None, 0))
        tx_bytes = cute.size_in_bytes(self.ab_dtype, a_stage) + cute.size_in_bytes(
            self.ab_dtype, b_stage
        )

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # Empty barriers count one arrive per consumer warp of every CTA that reads the stage.
        mcast = self.num_mcast_a + self.num_mcast_b - 1
        ab_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=self.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, mcast * self.num_mma_wg * 4
            ),
            tx_count=tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(d_smem.outer, swizzle=d_smem.inner)

        # (bM, bK, RestM, RestK) / (bN, bK, RestN, RestK) / (bM, bN, RestM, RestN)
        gA = cute.local_tile(mA, (TILE_M, TILE_K), (None, None))
        gB = cute.local_tile(mB, (TILE_N, TILE_K), (None, None))
        gD = cute.local_tile(mD, (TILE_M, TILE_N), (None, None))

        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a,
            cluster_coord[1],
            cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b,
            cluster_coord[0],
            cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )

        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        mma_tid = tidx - self.threads_per_wg  # thread index among the consumer threads
        thr_mma = tiled_mma.get_slice(mma_tid)
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        # Tile coordinates (row, col) of each accumulator element of this thread.
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((TILE_M, TILE_N)))
        acc_shape = tCcC.shape
        k_tiles = cute.size(gA, mode=[3])

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(self.load_regs)
            # ------------------------------------------------------------- producer
            if warp_idx == self.load_warp:
                sched = utils.StaticPersistentTileScheduler.create(
                    sched_params, cute.arch.block_idx(), cute.arch.grid_dim()
                )
                work = sched.initial_work_tile_info()
                prod_state = pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Producer, self.ab_stages
                )
                while work.is_valid_tile:
                    tile = work.tile_idx
                    tAgA_t = tAgA[(None, tile[0], None)]
                    tBgB_t = tBgB[(None, tile[1], None)]
                    for kt in cutlass.range(k_tiles, unroll=1):
                        ab_pipe.producer_acquire(prod_state)
                        bar = ab_pipe.producer_get_barrier(prod_state)
                        cute.copy(
                            tma_a,
                            tAgA_t[(None, kt)],
                            tAsA[(None, prod_state.index)],
                            tma_bar_ptr=bar,
                            mcast_mask=a_mask,
                        )
                        cute.copy(
                            tma_b,
                            tBgB_t[(None, kt)],
                            tBsB[(None, prod_state.index)],
                            tma_bar_ptr=bar,
                            mcast_mask=b_mask,
                        )
                        ab_pipe.producer_commit(prod_state)
                        prod_state.advance()
                    sched.advance_to_next_work()
                    work = sched.get_current_work()
                ab_pipe.producer_tail(prod_state)

        if wg_idx > 0:
            cute.arch.setmaxregister_increase(self.mma_regs)
            # ------------------------------------------------------------- consumers
            sched = utils.StaticPersistentTileScheduler.create(
                sched_params, cute.arch.block_idx(), cute.arch.grid_dim()
            )
            work = sched.initial_work_tile_info()
            cons_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, self.ab_stages
            )
            acc = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
            blk = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
            k_blocks = cute.size(tCrA, mode=[2])
            # The m64nNk32 fragment: element i lies in row r0 when (i // 2) % 2 == 0, else
            # in row r0 + 8 (= row of element 2); columns come from the identity tensor.
            row_lo = tCcC[0][0]
            row_hi = tCcC[2][0]

            # Epilogue: registers -> smem (stmatrix) -> global (TMA), 128x32 subtiles.
            r2s_atom = sm90_utils.get_smem_store_op(self.d_layout, self.d_dtype, self.acc_dtype)
            stm_atom = cute.make_copy_atom(
                cute.nvgpu.warp.StMatrix8x8x16bOp(self.d_layout.is_m_major_c(), 4), self.d_dtype
            )
            r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, tiled_mma))
            thr_r2s = r2s.get_slice(mma_tid)
            tRS_sD = thr_r2s.partition_D(sD)
            tRS_acc = r2s.retile(acc)
            rD_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
            tRS_rD = cute.make_rmem_tensor(rD_shape, self.acc_dtype)
            tRS_rD_out = cute.make_rmem_tensor(rD_shape, self.d_dtype)
            rD_size = cute.size(tRS_rD)
            store_pipe = pipeline.PipelineTmaStore.create(
                num_stages=EPI_STAGES,
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.num_mma_threads
                ),
            )

            while work.is_valid_tile:
                tile = work.tile_idx
                m0 = tile[0] * TILE_M
                n_blk = tile[1]  # TILE_N == GROUP: one weight scale per K block
                r_lo = m0 + row_lo
                r_hi = m0 + row_hi
                acc.fill(0.0)
                sx_lo = mSxT[0, r_lo]
                sx_hi = mSxT[0, r_hi]
                sw = mSw[n_blk, 0]
                for kt in cutlass.range(k_tiles, unroll=1):
                    # Scales of the next K block (wraps to 0 on the last, unused).
                    kn = kt + 1
                    if kn == k_tiles:
                        kn = 0
                    nx_lo = mSxT[kn, r_lo]
                    nx_hi = mSxT[kn, r_hi]
                    nw = mSw[n_blk, kn]

                    ab_pipe.consumer_wait(cons_state)
                    cute.nvgpu.warpgroup.fence()
                    tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
                    for kb in cutlass.range_constexpr(k_blocks):
                        coord = (None, None, kb, cons_state.index)
                        cute.gemm(tiled_mma, blk, tCrA[coord], tCrB[coord], blk)
                        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                    cute.nvgpu.warpgroup.commit_group()
                    cute.nvgpu.warpgroup.wait_group(0)
                    ab_pipe.consumer_release(cons_state)
                    cons_state.advance()

                    s_lo = sx_lo * sw
                    s_hi = sx_hi * sw
                    for i in cutlass.range_constexpr(cute.size(acc)):
                        if cutlass.const_expr((i // 2) % 2 == 0):
                            acc[i] = acc[i] + blk[i] * s_lo
                        else:
                            acc[i] = acc[i] + blk[i] * s_hi
                    sx_lo = nx_lo
                    sx_hi = nx_hi
                    sw = nw

                # ---- epilogue: + bias, bf16, stmatrix, TMA store
                n0 = tile[1] * TILE_N
                for i in cutlass.range_constexpr(cute.size(acc)):
                    acc[i] = acc[i] + mBias[n0 + tCcC[i][1]].to(self.acc_dtype)

                gD_tile = cute.zipped_divide(gD[(None, None, tile[0], tile[1])], EPI_TILE)
                bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
                    tma_d,
                    0,
                    cute.make_layout(1),
                    cute.group_modes(sD, 0, 2),
                    gD_tile,
                )
                epi_shape = gD_tile.shape[1]
                epi_layout = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
                epi_count = cute.size(gD_tile, mode=[1])
                done = sched.num_tiles_executed * epi_count
                for e in cutlass.range_constexpr(epi_count):
                    for v in cutlass.range_constexpr(rD_size):
                        tRS_rD[v] = tRS_acc[e * rD_size + v]
                    tRS_rD_out.store(tRS_rD.load().to(self.d_dtype))
                    buf = (done + e) % EPI_STAGES
                    cute.copy(r2s, tRS_rD_out, tRS_sD[(None, None, None, buf)])
                    cute.arch.fence_proxy("async.shared", space="cta")
                    self.epi_barrier.arrive_and_wait()
                    if warp_idx == self.epi_store_warp:
                        cute.copy(
                            tma_d,
                            bSG_sD[(None, buf)],
                            bSG_gD[(None, epi_layout.get_hier_coord(e))],
                        )
                        store_pipe.producer_commit()
                        store_pipe.producer_acquire()
                    self.epi_barrier.arrive_and_wait()

                sched.advance_to_next_work()
                work = sched.get_current_work()

            store_pipe.producer_tail()


# --------------------------------------------------------------------------- host


class _Forward:
    def __init__(self, max_clusters: int, n_tiles: int):
        self.gemm = _BlockScaledGemm(max_clusters, n_tiles)

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
_PADDED: dict[tuple[object, ...], torch.Tensor] = {}


def _max_active_clusters(device: torch.device) -> int:
    """Clusters of the GEMM that fit on the device at once (the persistent grid)."""
    size = CLUSTER_M * CLUSTER_N
    if device.type != "cuda":
        return 132 // size  # H200: 132 SMs
    try:
        return max(1, utils.HardwareInfo(device.index or 0).get_max_active_clusters(size))
    except Exception:  # noqa: BLE001 - the occupancy query is an optimization
        return max(1, torch.cuda.get_device_properties(device).multi_processor_count // size)


def _scratch(m: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (m, k, device)
    bufs = _SCRATCH.get(key)
    if bufs is None:
        m_pad = -(-m // (TILE_M * CLUSTER_M)) * (TILE_M * CLUSTER_M)
        codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=device)
        scales_t = torch.empty((k // GROUP, m_pad), dtype=torch.float32, device=device)
        bufs = _SCRATCH[key] = (codes, scales_t)
    return bufs


def _compile(tensors: list[torch.Tensor], key: tuple, max_clusters: int) -> Any:
    x, w = tensors[0], tensors[1]
    if x.shape[-1] % GROUP or w.shape[0] % GROUP or w.shape[1] % GROUP:
        raise ValueError(f"dimensions must be multiples of the {GROUP}-element group")
    # 16-byte aligned (fresh allocations): TMA operands, vector-loaded activation, scratch.
    aligns = (16, 16, None, None, 16, 16, 16)  # x, w, w scales, bias, codes, sxT, out
    args = [from_dlpack(t, assumed_align=a) for t, a in zip(tensors, aligns)]
    fn = cute.compile(
        _Forward(max_clusters, w.shape[0] // TILE_N), *args, options="--enable-tvm-ffi"
    )
    _CACHE[key] = fn
    return fn


def _run(
    x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Both kernels on ``x`` as it is (one TVM-FFI call); a fresh bf16 output."""
    m, k = x.shape
    device = x.device
    codes, scales_t = _scratch(m, k, device)
    out = torch.empty((m, w.shape[0]), dtype=x.dtype, device=device)
    key = (x.shape, w.shape, device)
    args = [x, w, w_scale, bias, codes, scales_t, out]
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile(args, key, _max_active_clusters(device))
    fn(*args)
    return out


def _padded_rows(m_pad: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """A cached activation buffer of ``m_pad`` rows whose rows past the copied ones stay 0."""
    key = (m_pad, k, like.dtype, like.device)
    buf = _PADDED.get(key)
    if buf is None:
        buf = _PADDED[key] = torch.zeros((m_pad, k), dtype=like.dtype, device=like.device)
    return buf


def solve(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias):
    m, k = attn_output.shape
    rows = TILE_M * CLUSTER_M
    m_pad = -(-m // rows) * rows
    if m == m_pad:  # the workload (16,384 tokens): the kernels straight on the inputs
        return _run(attn_output, o_proj_weight, o_proj_weight_scale, o_proj_bias)
    # A token count that is not a multiple of the cluster's 256 rows: the first H200 run gave
    # wrong rows there (smoke shape, 48 tokens), so the activation is copied into zero-padded
    # rows and the output's first m rows are returned (a view of a fresh tensor).
    x = _padded_rows(m_pad, k, attn_output)
    x[:m].copy_(attn_output)
    return _run(x, o_proj_weight, o_proj_weight_scale, o_proj_bias)[:m]
