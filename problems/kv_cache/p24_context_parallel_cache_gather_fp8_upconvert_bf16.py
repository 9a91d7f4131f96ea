"""Gather of a paged DeepSeek ``fp8_ds_mla`` cache into a compact bfloat16 buffer
(cp_gather_and_upconvert_fp8_kv_cache). Each cached token is a 656-byte entry in a uint8 cache
[num_blocks, block_size, 656]: bytes 0–511 are 512 e4m3 latent values, bytes 512–527 are four
float32 scales (one per group of 128 latent values) and bytes 528–655 are 64 bfloat16 rotary
values. For request r with length seq_lens[r], token i is in physical block
block_table[r, i // block_size] at offset i % block_size. The output stacks all requests'
tokens in order as [Σ seq_lens, 576] bfloat16: the 512 latent values decoded and multiplied by
their group scale (rounded once to bfloat16), followed by the 64 rotary values copied
unchanged. As in vLLM, the output buffer ``dst`` [Σ seq_lens, 576] bfloat16 is passed in and
written in place; its initial contents are garbage and every row is overwritten."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, ragged_lengths, rand, randn, randperm
from problems.spec import Cost, Workload

ID = "p24"
SLUG = "context_parallel_cache_gather_fp8_upconvert_bf16"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = (
    "vllm-project/vllm@b9b6306e: tests/kernels/test_cp_gather_fp8.py; "
    "csrc/cache_kernels.cu::cp_gather_and_upconvert_fp8_kv_cache"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Workload of the upstream test (16 blocks of 64, 3 requests, 641 tokens). Deviation from "
    "upstream (which returns a new tensor): the bfloat16 destination is an in-place input, as "
    "in the vLLM kernel, because the contract's float64 anchor follows float tensor inputs and "
    "the cache is uint8. Request lengths and disjoint block "
    "assignments are re-drawn per seed."
)
WORKLOAD = {"num_blocks": 16, "block_size": 64, "requests": 3, "total_tokens": 641}
SMOKE = {"num_blocks": 8, "block_size": 8, "requests": 3, "total_tokens": 29}
INPUTS = ("cache", "block_table", "seq_lens", "dst")
OUTPUTS = ("dst",)
INPLACE = {"dst": "dst"}
DECISION_MARGIN = None

_NOPE, _ROPE, _GROUPS, _ENTRY = 512, 64, 4, 656


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    lengths = ragged_lengths(g, w.total_tokens, w.requests)
    per_request = [-(-n // w.block_size) for n in lengths]
    if sum(per_request) > w.num_blocks:
        raise ValueError("the workload needs more blocks than the pool holds")
    perm = randperm(g, w.num_blocks, device).to(torch.int32)
    block_table = torch.zeros((w.requests, max(per_request)), device=device, dtype=torch.int32)
    cursor = 0
    for r, count in enumerate(per_request):
        block_table[r, :count] = perm[cursor : cursor + count]
        cursor += count
    slots = w.num_blocks * w.block_size
    latent = randn(g, (slots, _NOPE), torch.float32, device).to(torch.float8_e4m3fn)
    scales = rand(g, (slots, _GROUPS), torch.float32, device, 0.1, 2.1)
    rope = randn(g, (slots, _ROPE), torch.bfloat16, device)
    entries = torch.cat(
        (latent.view(torch.uint8), scales.view(torch.uint8), rope.view(torch.uint8)), dim=1
    )
    cache = entries.view(w.num_blocks, w.block_size, _ENTRY)
    seq_lens = torch.tensor(lengths, device=device, dtype=torch.int32)
    dst = randn(g, (w.total_tokens, _NOPE + _ROPE), torch.bfloat16, device, std=100.0)
    return [cache, block_table, seq_lens, dst]


def _gather_entries(cache, block_table, seq_lens) -> torch.Tensor:
    lens = seq_lens.long()
    request = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens)
    pos = torch.arange(int(lens.sum()), device=lens.device) - (torch.cumsum(lens, 0) - lens)[request]
    block_size = cache.shape[1]
    return cache[block_table[request, pos // block_size].long(), pos % block_size]


def _decode(entries: torch.Tensor, dst: torch.Tensor, scaled: bool = True) -> torch.Tensor:
    dt = compute_dtype(dst)
    rows = entries.shape[0]
    latent = entries[:, :_NOPE].contiguous().view(torch.float8_e4m3fn).to(dt)
    scales = entries[:, _NOPE : _NOPE + 4 * _GROUPS].contiguous().view(torch.float32).to(dt)
    if scaled:
        latent = (latent.view(rows, _GROUPS, -1) * scales.unsqueeze(-1)).view(rows, _NOPE)
    rope = entries[:, _NOPE + 4 * _GROUPS :].contiguous().view(torch.bfloat16)
    dst[:, :_NOPE] = latent.to(dst.dtype)
    dst[:, _NOPE:] = rope.to(dst.dtype)
    return dst


def reference(cache, block_table, seq_lens, dst):
    return _decode(_gather_entries(cache, block_table, seq_lens), dst)


def dropped_term(cache, block_table, seq_lens, dst):
    """Mutant: decodes the latent values without their group scales."""
    return _decode(_gather_entries(cache, block_table, seq_lens), dst, scaled=False)


def reordered(cache, block_table, seq_lens, dst):
    """Valid alternative: decode whole pages per request, scale group by group, then slice."""
    dt = compute_dtype(dst)
    block_size = cache.shape[1]
    parts = []
    for r, length in enumerate(seq_lens.tolist()):
        pages = cache[block_table[r, : -(-length // block_size)].long()]
        entries = pages.reshape(-1, _ENTRY)[:length]
        latent = entries[:, :_NOPE].contiguous().view(torch.float8_e4m3fn)
        scales = entries[:, _NOPE : _NOPE + 16].contiguous().view(torch.float32)
        width = _NOPE // _GROUPS
        groups = [
            (latent[:, i * width : (i + 1) * width].to(dt) * scales[:, i : i + 1].to(dt))
            for i in range(_GROUPS)
        ]
        rope = entries[:, _NOPE + 16 :].contiguous().view(torch.bfloat16)
        parts.append(torch.cat([x.to(dst.dtype) for x in groups] + [rope.to(dst.dtype)], dim=1))
    dst.copy_(torch.cat(parts))
    return dst


def cost(w: Workload) -> Cost:
    rows = w.total_tokens
    read = rows * _ENTRY + 4 * (rows // w.block_size + w.requests) + 4 * w.requests
    written = 2 * rows * (_NOPE + _ROPE)
    return Cost(flops={"fp32": float(rows * _NOPE)}, bytes=float(read + written))
