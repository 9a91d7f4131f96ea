"""p25 batched KV-cache page copy under a block remap (uint8 pages) in TIRx.

The byte caches are reinterpreted (no copy) as 8-byte words, [num_blocks, page_words]. One
kernel copies K and V together: CTA (i, c) reads mapping row i and copies chunk c of page
``src`` to page ``dst`` in both caches, 256 threads striding the chunk with coalesced 8-byte
loads and stores. The destination caches are written in place and returned.
"""

from __future__ import annotations

from typing import Any

import torch
import tvm
from tvm.script import tirx as T

THREADS = 256
WORDS_PER_THREAD = 8
CHUNK = THREADS * WORDS_PER_THREAD


@T.prim_func
def _copy_pages(
    src_k_ptr: T.handle,
    src_v_ptr: T.handle,
    dst_k_ptr: T.handle,
    dst_v_ptr: T.handle,
    map_ptr: T.handle,
):
    src_blocks = T.int32()
    dst_blocks = T.int32()
    words = T.int32()
    pairs = T.int32()
    SK = T.match_buffer(src_k_ptr, (src_blocks, words), "int64")
    SV = T.match_buffer(src_v_ptr, (src_blocks, words), "int64")
    DK = T.match_buffer(dst_k_ptr, (dst_blocks, words), "int64")
    DV = T.match_buffer(dst_v_ptr, (dst_blocks, words), "int64")
    M = T.match_buffer(map_ptr, (pairs, 2), "int64")
    T.device_entry()
    pair, chunk = T.cta_id([pairs, T.ceildiv(words, 2048)])
    tx = T.thread_id([256])
    src = T.Cast("int32", M[pair, 0])
    dst = T.Cast("int32", M[pair, 1])
    for k in T.unroll(8):
        j = chunk * 2048 + k * 256 + tx
        if j < words:
            DK[dst, j] = SK[src, j]
            DV[dst, j] = SV[src, j]


def _target() -> dict[str, str]:
    """The CUDA target of the current GPU (sm_90a on an H200; sm_90a when no GPU is visible)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"kind": "cuda", "arch": f"sm_{major}{minor}{'a' if major >= 9 else ''}"}
    return {"kind": "cuda", "arch": "sm_90a"}


_EXE: list[Any] = []


def _compile() -> Any:
    """The compiled executable (shape-generic)."""
    if not _EXE:
        _EXE.append(
            tvm.compile(
                tvm.IRModule({"main": _copy_pages}),
                target=tvm.target.Target(_target()),
                tir_pipeline="tirx",
            )
        )
    return _EXE[0]


_FN: list[Any] = []


def _kernel() -> Any:
    """The device function, fetched once (NVRTC compiles it at its first call)."""
    if not _FN:
        _FN.append(_compile()["main"])
    return _FN[0]


def _as_words(cache: torch.Tensor) -> torch.Tensor:
    """A [num_blocks, page_words] int64 view of the same memory (writes reach the cache)."""
    return cache.view(cache.shape[0], -1).view(torch.int64)


def solve(src_k, src_v, dst_k, dst_v, block_mapping):
    page_bytes = src_k[0].numel() * src_k.element_size()
    if page_bytes % 8:
        raise ValueError("pages must be a multiple of 8 bytes")
    views = [_as_words(t) for t in (src_k, src_v, dst_k, dst_v)]
    _kernel()(*views, block_mapping.contiguous())
    return dst_k, dst_v
