"""Batched copy of KV-cache pages under a block remap (vLLM swap_blocks / copy_blocks
semantics): for every row (src, dst) of an int64 mapping, the whole page ``src`` of the source
K cache and of the source V cache is copied to page ``dst`` of the destination K and V caches.
Caches are uint8 byte pages of shape [num_blocks, block_size, num_heads, head_dim] (so fp8 or
any packed format copies bit-exactly); destination pages not named in the mapping keep their
contents. The destination caches are updated in place and returned; the comparison is exact."""

from __future__ import annotations

import torch

from problems.common import generator, randint, randperm
from problems.spec import Cost, Workload

ID = "p25"
SLUG = "batched_kv_cache_block_copy_remap_uint8"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = (
    "vllm-project/vllm@b9b6306e: tests/kernels/attention/test_cache.py::test_swap_blocks; "
    "csrc/cache_kernels.cu::swap_blocks"
)
LICENSE = "Apache-2.0"
NOTES = (
    "K and V are copied under one shared mapping in a single call; sources and destinations "
    "are disjoint pages (as in the upstream test), so the result does not depend on copy order. "
    "Mapping and page contents are re-drawn per seed."
)
WORKLOAD = {"num_blocks": 1024, "block_size": 32, "num_heads": 8, "head_dim": 256, "mappings": 256}
SMOKE = {"num_blocks": 64, "block_size": 4, "num_heads": 2, "head_dim": 32, "mappings": 16}
INPUTS = ("src_k", "src_v", "dst_k", "dst_v", "block_mapping")
OUTPUTS = ("dst_k", "dst_v")
INPLACE = {"dst_k": "dst_k", "dst_v": "dst_v"}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    shape = (w.num_blocks, w.block_size, w.num_heads, w.head_dim)
    caches = [randint(g, 0, 256, shape, device, torch.uint8) for _ in range(4)]
    perm = randperm(g, w.num_blocks, device)
    mapping = torch.stack((perm[: w.mappings], perm[w.mappings : 2 * w.mappings]), dim=1)
    return [*caches, mapping.contiguous()]


def reference(src_k, src_v, dst_k, dst_v, block_mapping):
    src = block_mapping[:, 0]
    dst = block_mapping[:, 1]
    dst_k.index_copy_(0, dst, src_k.index_select(0, src))
    dst_v.index_copy_(0, dst, src_v.index_select(0, src))
    return dst_k, dst_v


def dropped_term(src_k, src_v, dst_k, dst_v, block_mapping):
    """Mutant: copies the K pages but forgets the V pages."""
    dst_k.index_copy_(0, block_mapping[:, 1], src_k.index_select(0, block_mapping[:, 0]))
    return dst_k, dst_v


def reordered(src_k, src_v, dst_k, dst_v, block_mapping):
    """Valid alternative: one page at a time, in reverse mapping order."""
    for i in range(block_mapping.shape[0] - 1, -1, -1):
        s, d = int(block_mapping[i, 0]), int(block_mapping[i, 1])
        dst_k[d].copy_(src_k[s])
        dst_v[d].copy_(src_v[s])
    return dst_k, dst_v


def cost(w: Workload) -> Cost:
    page = w.block_size * w.num_heads * w.head_dim
    moved = 2 * w.mappings * page  # K and V pages, one byte per element
    return Cost(flops={}, bytes=2.0 * moved + 16.0 * w.mappings)
