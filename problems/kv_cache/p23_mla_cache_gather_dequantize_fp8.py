"""Gather of a paged FP8 MLA cache into a compact float32 buffer with dequantisation
(gather_and_maybe_dequant_cache): the cache holds e4m3 bit patterns as uint8, [num_blocks,
block_size, 576] (512 latent + 64 rotary channels per token). For request r with length
seq_lens[r], its token i lives in physical block block_table[r, i // block_size] at offset
i % block_size. The output stacks the tokens of all requests in order (request 0's tokens
first), each entry decoded from e4m3 and multiplied by the single float32 scale, giving
[Σ seq_lens, 576] float32."""

from __future__ import annotations

import torch

from problems.common import (
    FP8_E4M3_MAX,
    compute_dtype,
    generator,
    ragged_lengths,
    randn,
    randperm,
)
from problems.spec import Cost, Workload

ID = "p23"
SLUG = "mla_cache_gather_dequantize_fp8"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = (
    "vllm-project/vllm@b9b6306e: tests/kernels/attention/test_cache.py::"
    "test_gather_and_maybe_dequant_cache_mla; csrc/cache_kernels.cu::gather_and_maybe_dequant_cache"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Deviation from upstream (a Python float scale): the scale is a one-element float32 tensor "
    "(as vLLM's kernel takes it) because the contract's float64 anchor follows float tensor "
    "inputs and this problem has no other. Request lengths are a random ragged split of the total and every "
    "request's block table is an independent permutation of the pool, re-drawn per seed."
)
WORKLOAD = {"num_blocks": 1024, "block_size": 16, "entry": 576, "requests": 8,
            "total_tokens": 4096, "scale": 0.1}
SMOKE = {"num_blocks": 24, "block_size": 4, "entry": 48, "requests": 3, "total_tokens": 40,
         "scale": 0.1}
INPUTS = ("src_cache", "block_table", "seq_lens", "scale")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    values = randn(g, (w.num_blocks, w.block_size, w.entry), torch.float32, device)
    fp8 = (values / w.scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    src_cache = fp8.view(torch.uint8)
    block_table = torch.stack(
        [randperm(g, w.num_blocks, device) for _ in range(w.requests)]
    ).to(torch.int32)
    lengths = ragged_lengths(g, w.total_tokens, w.requests)
    seq_lens = torch.tensor(lengths, device=device, dtype=torch.int32)
    scale = torch.full((1,), w.scale, device=device, dtype=torch.float32)
    return [src_cache, block_table, seq_lens, scale]


def _token_slots(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int):
    """(physical block, offset) of every output row, requests in order."""
    lens = seq_lens.long()
    total = int(lens.sum())
    request = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens)
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(total, device=lens.device) - starts[request]
    blocks = block_table[request, pos // block_size].long()
    return blocks, pos % block_size


def reference(src_cache, block_table, seq_lens, scale):
    dt = compute_dtype(scale)
    blocks, offsets = _token_slots(block_table, seq_lens, src_cache.shape[1])
    fp8 = src_cache.view(torch.float8_e4m3fn)
    return (fp8[blocks, offsets].to(dt) * scale.to(dt)).to(scale.dtype)


def dropped_term(src_cache, block_table, seq_lens, scale):
    """Mutant: decodes the e4m3 values but forgets the scale."""
    blocks, offsets = _token_slots(block_table, seq_lens, src_cache.shape[1])
    fp8 = src_cache.view(torch.float8_e4m3fn)
    return fp8[blocks, offsets].to(scale.dtype)


def reordered(src_cache, block_table, seq_lens, scale):
    """Valid alternative: dequantise whole blocks per request, then slice and concatenate."""
    dt = compute_dtype(scale)
    block_size = src_cache.shape[1]
    fp8 = src_cache.view(torch.float8_e4m3fn)
    parts = []
    for r, length in enumerate(seq_lens.tolist()):
        nblk = -(-length // block_size)
        pages = fp8[block_table[r, :nblk].long()].to(dt) * scale.to(dt)
        parts.append(pages.reshape(-1, src_cache.shape[2])[:length])
    return torch.cat(parts).to(scale.dtype)


def cost(w: Workload) -> Cost:
    rows = w.total_tokens
    read = rows * w.entry + 4 * rows // w.block_size + 4 * w.requests + 4
    return Cost(flops={"fp32": float(rows * w.entry)}, bytes=float(read + 4 * rows * w.entry))
