"""p25 batched KV-cache page copy under a block remap (uint8 pages) in CuTe DSL, called
through TVM-FFI.

The kernel is the first p25 CuTe solution's (2026-12-02), unchanged: CTA (i, c) reads mapping row i and copies chunk c of
page ``src`` to page ``dst`` in both caches, 256 threads striding the chunk with coalesced
8-byte word loads and stores; the destination caches are written in place and returned.

Only the call path differs. The function is compiled once per shape with
``options="--enable-tvm-ffi"`` and then called with the five torch tensors as they come
(uint8 caches ``[num_blocks, block_size, heads, head_dim]``, int64 mapping): no
``from_dlpack``, no ``.view``/``.contiguous`` per call. The reinterpretation as words, which
the first p25 solution did in torch on every call (two views per cache), happens once inside the
``@cute.jit`` function: the cache pointer (declared 16-byte aligned, which TVM-FFI checks at
each call together with shape, contiguous strides, dtype and device) is recast to the word
type and given the static layout ``(num_blocks, page_words):(page_words, 1)``. Per call: one
dict lookup and one TVM-FFI call. Expected on the H200: ~10-15 µs of host time instead of
123 µs, device time unchanged (~20 µs), so ~30-35 µs end to end instead of 143 µs. No eager
glue. Measured on the H200 (2026-12-03, docs/solutions.md): 11.2 µs host, 18.9 µs device, 36.3 µs end to end (38.5 % of SOL).
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

ARCHS = ("sm_90a", "sm_100a")  # architectures it is written for (problems/targets.py)

THREADS = 256
WORDS_PER_THREAD = 8
CHUNK = THREADS * WORDS_PER_THREAD


@cute.kernel
def _copy_pages_kernel(
    mSrcK: cute.Tensor,
    mSrcV: cute.Tensor,
    mDstK: cute.Tensor,
    mDstV: cute.Tensor,
    mMap: cute.Tensor,
):
    tidx, _, _ = cute.arch.thread_idx()
    pair, chunk, _ = cute.arch.block_idx()
    page_words = mSrcK.shape[1]
    src = mMap[pair, 0].to(cutlass.Int32)
    dst = mMap[pair, 1].to(cutlass.Int32)
    base = chunk * CHUNK + tidx
    for k in cutlass.range(WORDS_PER_THREAD, unroll_full=True):
        j = base + k * THREADS
        if j < page_words:
            mDstK[dst, j] = mSrcK[src, j]
            mDstV[dst, j] = mSrcV[src, j]


def _word_type(page_bytes: int) -> Any:
    """The widest integer word that tiles a page exactly."""
    for word, size in ((cutlass.Int64, 8), (cutlass.Int32, 4), (cutlass.Int16, 2)):
        if page_bytes % size == 0:
            return word
    return cutlass.Uint8


def _pages_as_words(cache: cute.Tensor) -> cute.Tensor:
    """A ``[num_blocks, page_words]`` word view of a contiguous byte cache (trace time: the
    shape is static, so the word type and the layout are compile-time constants)."""
    page_bytes = 1
    for extent in cache.shape[1:]:
        page_bytes *= extent
    word = _word_type(page_bytes)
    page_words = page_bytes // (word.width // 8)
    layout = cute.make_layout((cache.shape[0], page_words), stride=(page_words, 1))
    return cute.make_tensor(cute.recast_ptr(cache.iterator, dtype=word), layout)


@cute.jit
def _copy_pages(
    mSrcK: cute.Tensor,
    mSrcV: cute.Tensor,
    mDstK: cute.Tensor,
    mDstV: cute.Tensor,
    mMap: cute.Tensor,
):
    src_k = _pages_as_words(mSrcK)
    src_v = _pages_as_words(mSrcV)
    dst_k = _pages_as_words(mDstK)
    dst_v = _pages_as_words(mDstV)
    chunks = (src_k.shape[1] + CHUNK - 1) // CHUNK
    _copy_pages_kernel(src_k, src_v, dst_k, dst_v, mMap).launch(
        grid=[mMap.shape[0], chunks, 1], block=[THREADS, 1, 1]
    )


_CACHE: dict[tuple[object, ...], Any] = {}


def _compile(caches: tuple[torch.Tensor, ...], mapping: torch.Tensor, key: tuple) -> Any:
    if any(t.element_size() != 1 for t in caches):
        raise ValueError("this kernel copies byte (uint8) caches")
    fn = cute.compile(
        _copy_pages,
        *(from_dlpack(t, assumed_align=16) for t in caches),
        from_dlpack(mapping),
        options="--enable-tvm-ffi",
    )
    _CACHE[key] = fn
    return fn


def solve(src_k, src_v, dst_k, dst_v, block_mapping):
    key = (src_k.shape, dst_k.shape, block_mapping.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = _compile((src_k, src_v, dst_k, dst_v), block_mapping, key)
    fn(src_k, src_v, dst_k, dst_v, block_mapping)  # torch tensors straight through TVM-FFI
    return dst_k, dst_v
