"""p25 batched KV-cache page copy under a block remap (uint8 pages) in CuTe DSL.

The byte caches are reinterpreted (no copy) as 8-byte words, [num_blocks, page_words]. One
kernel copies K and V together: CTA (i, c) reads mapping row i and copies chunk c of page
``src`` to page ``dst`` in both caches, 256 threads striding the chunk with coalesced 8-byte
loads and stores. The destination caches are written in place and returned.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

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


@cute.jit
def _copy_pages(
    mSrcK: cute.Tensor,
    mSrcV: cute.Tensor,
    mDstK: cute.Tensor,
    mDstV: cute.Tensor,
    mMap: cute.Tensor,
):
    chunks = (mSrcK.shape[1] + CHUNK - 1) // CHUNK
    _copy_pages_kernel(mSrcK, mSrcV, mDstK, mDstV, mMap).launch(
        grid=[mMap.shape[0], chunks, 1], block=[THREADS, 1, 1]
    )


def _word_dtype(page_bytes: int) -> torch.dtype:
    """The widest integer word that tiles a page exactly."""
    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if page_bytes % size == 0:
            return dtype
    return torch.uint8


def _as_words(cache: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A [num_blocks, page_words] view of the same memory (writes reach the cache)."""
    return cache.view(cache.shape[0], -1).view(dtype)


_CACHE: dict[tuple[object, ...], Any] = {}


def _compile(views: list[torch.Tensor], mapping: torch.Tensor) -> object:
    key = (views[0].dtype, *views[0].shape, *views[2].shape, *mapping.shape)
    fn = _CACHE.get(key)
    if fn is None:
        fn = cute.compile(_copy_pages, *(from_dlpack(t) for t in (*views, mapping)))
        _CACHE[key] = fn
    return fn


def solve(src_k, src_v, dst_k, dst_v, block_mapping):
    page_bytes = src_k[0].numel() * src_k.element_size()
    dtype = _word_dtype(page_bytes)
    views = [_as_words(t, dtype) for t in (src_k, src_v, dst_k, dst_v)]
    mapping = block_mapping.contiguous()
    fn = _compile(views, mapping)
    fn(*(from_dlpack(t) for t in (*views, mapping)))
    return dst_k, dst_v
