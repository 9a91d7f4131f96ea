"""MiniMax-M3 attention prologue writing two caches: a fused bfloat16 row per token is split
into main q (16 heads), main k and v (4 heads each), index q (4 heads) and one index k head,
all of head_dim 128. Main q, main k, index q and index k are each RMS-normalised over head_dim
(epsilon 1e-6) and scaled by (1 + weight) with their own weight vector, then get NeoX rotary
embedding on their first 64 channels (cos/sin from a bfloat16 [max_position, 64] table, base
5e6, gathered by position; the other 64 channels pass through). k and v are written to the main
cache [num_blocks, kv_heads, block_size, 2·head_dim] (k in the first half, v in the second) at
``slot_mapping[t]``, and index k to the index cache [num_blocks, block_size, head_dim] at
``index_slot_mapping[t]`` (block = slot // block_size, offset = slot % block_size). Returns the
rotated main q, the rotated index q and both caches (updated in place)."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randint, randn, randperm
from problems.spec import Cost, Workload

ID = "p22"
SLUG = "main_index_dual_cache_insert_minimax_m3_bf16"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = "vllm-project/vllm@b9b6306e: tests/kernels/test_fused_minimax_m3_qknorm_rope_kv_insert.py"
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry and token count from the upstream kernel test (513 tokens, 10 pages of 64). "
    "Both slot mappings are independent permutations, re-drawn per seed; no padding tokens. "
    "The reference keeps intermediates in the compute dtype and rounds once."
)
WORKLOAD = {
    "tokens": 513, "q_heads": 16, "kv_heads": 4, "index_q_heads": 4, "head_dim": 128,
    "rotary_dim": 64, "block_size": 64, "num_blocks": 10, "max_position": 4096,
    "rope_base": 5_000_000.0, "eps": 1e-6,
}
SMOKE = {
    "tokens": 40, "q_heads": 4, "kv_heads": 1, "index_q_heads": 1, "head_dim": 32,
    "rotary_dim": 16, "block_size": 8, "num_blocks": 6, "max_position": 256,
    "rope_base": 5_000_000.0, "eps": 1e-6,
}
INPUTS = (
    "qkv", "q_norm_weight", "k_norm_weight", "index_q_norm_weight", "index_k_norm_weight",
    "positions", "cos_sin_cache", "slot_mapping", "index_slot_mapping", "kv_cache", "index_cache",
)
OUTPUTS = ("q", "index_q", "kv_cache", "index_cache")
INPLACE = {"kv_cache": "kv_cache", "index_cache": "index_cache"}
DECISION_MARGIN = None


def _rope_table(w: Workload, device: str) -> torch.Tensor:
    half = w.rotary_dim // 2
    inv_freq = w.rope_base ** (-torch.arange(half, device=device, dtype=torch.float64) / half)
    angles = torch.arange(w.max_position, device=device, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(torch.bfloat16)


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    heads = w.q_heads + 2 * w.kv_heads + w.index_q_heads + 1
    qkv = randn(g, (w.tokens, heads * w.head_dim), torch.bfloat16, device)
    weights = [randn(g, (w.head_dim,), torch.bfloat16, device, std=0.1) for _ in range(4)]
    positions = randint(g, 0, w.max_position, (w.tokens,), device)
    slots = randperm(g, w.num_blocks * w.block_size, device)[: w.tokens].contiguous()
    index_slots = randperm(g, w.num_blocks * w.block_size, device)[: w.tokens].contiguous()
    kv_cache = randn(g, (w.num_blocks, w.kv_heads, w.block_size, 2 * w.head_dim),
                     torch.bfloat16, device)
    index_cache = randn(g, (w.num_blocks, w.block_size, w.head_dim), torch.bfloat16, device)
    return [qkv, *weights, positions, _rope_table(w, device), slots, index_slots, kv_cache,
            index_cache]


def _norm_rope(x, weight, cos, sin, dt, offset: float = 1.0):
    eps = WORKLOAD["eps"]
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (offset + weight.to(dt))
    rot = cos.shape[-1] * 2
    y1, y2, rest = y[..., : rot // 2], y[..., rot // 2 : rot], y[..., rot:]
    return torch.cat((y1 * cos - y2 * sin, y2 * cos + y1 * sin, rest), dim=-1)


def _run(qkv, weights, positions, cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache,
         index_cache, main_offset: float = 1.0):
    dt = compute_dtype(qkv, cos_sin_cache, *weights)
    kv_heads, block_size, head_dim = kv_cache.shape[1], kv_cache.shape[2], index_cache.shape[2]
    tokens = qkv.shape[0]
    index_q_heads = kv_heads  # MiniMax-M3 has as many index-q heads as kv heads
    x = qkv.to(dt).view(tokens, -1, head_dim)
    q_heads = x.shape[1] - 2 * kv_heads - index_q_heads - 1
    q, k, v, iq, ik = x.split([q_heads, kv_heads, kv_heads, index_q_heads, 1], dim=1)
    cos, sin = cos_sin_cache.index_select(0, positions).to(dt).unsqueeze(1).chunk(2, dim=-1)
    q_w, k_w, iq_w, ik_w = weights
    q = _norm_rope(q, q_w, cos, sin, dt, main_offset)
    k = _norm_rope(k, k_w, cos, sin, dt)
    iq = _norm_rope(iq, iq_w, cos, sin, dt)
    ik = _norm_rope(ik, ik_w, cos, sin, dt).squeeze(1)
    blocks, offsets = slot_mapping // block_size, slot_mapping % block_size
    kv_cache[blocks, :, offsets] = torch.cat((k, v), dim=-1).to(kv_cache.dtype)
    ib, io = index_slot_mapping // block_size, index_slot_mapping % block_size
    index_cache[ib, io] = ik.to(index_cache.dtype)
    return q.to(qkv.dtype), iq.to(qkv.dtype), kv_cache, index_cache


def reference(qkv, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight,
              positions, cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache, index_cache):
    weights = (q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight)
    return _run(qkv, weights, positions, cos_sin_cache, slot_mapping, index_slot_mapping,
                kv_cache, index_cache)


def dropped_term(qkv, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight,
                 positions, cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache,
                 index_cache):
    """Mutant: scales main q by weight instead of (1 + weight)."""
    weights = (q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight)
    return _run(qkv, weights, positions, cos_sin_cache, slot_mapping, index_slot_mapping,
                kv_cache, index_cache, main_offset=0.0)


def reordered(qkv, q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight,
              positions, cos_sin_cache, slot_mapping, index_slot_mapping, kv_cache, index_cache):
    """Valid alternative: sum of squares, weight applied first, rotation as a complex product,
    caches written head by head."""
    weights = (q_norm_weight, k_norm_weight, index_q_norm_weight, index_k_norm_weight)
    dt = compute_dtype(qkv, cos_sin_cache, *weights)
    kv_heads, block_size, head_dim = kv_cache.shape[1], kv_cache.shape[2], index_cache.shape[2]
    index_q_heads = kv_heads  # as many index-q heads as kv heads
    x = qkv.to(dt).view(qkv.shape[0], -1, head_dim)
    q_heads = x.shape[1] - 2 * kv_heads - index_q_heads - 1
    parts = x.split([q_heads, kv_heads, kv_heads, index_q_heads, 1], dim=1)
    cs = cos_sin_cache.index_select(0, positions).to(dt)
    half = cs.shape[1] // 2
    rot = torch.complex(cs[:, :half], cs[:, half:]).unsqueeze(1)

    def norm_rope(t, weight):
        scale = torch.rsqrt(t.pow(2).sum(-1, keepdim=True) / head_dim + WORKLOAD["eps"])
        t = (t * (1.0 + weight.to(dt))) * scale
        z = torch.complex(t[..., :half], t[..., half : 2 * half]) * rot
        return torch.cat((z.real, z.imag, t[..., 2 * half :]), dim=-1)

    q, k, iq, ik = (norm_rope(parts[i], wt) for i, wt in zip((0, 1, 3, 4), weights))
    v = parts[2]
    blocks, offsets = slot_mapping // block_size, slot_mapping % block_size
    for h in range(kv_heads):
        kv_cache[blocks, h, offsets, :head_dim] = k[:, h].to(kv_cache.dtype)
        kv_cache[blocks, h, offsets, head_dim:] = v[:, h].to(kv_cache.dtype)
    index_cache.view(-1, head_dim)[index_slot_mapping] = ik[:, 0].to(index_cache.dtype)
    return q.to(qkv.dtype), iq.to(qkv.dtype), kv_cache, index_cache


def cost(w: Workload) -> Cost:
    t, d = w.tokens, w.head_dim
    normed = w.q_heads + w.kv_heads + w.index_q_heads + 1
    heads = normed + w.kv_heads
    flops = t * normed * (5 * d + 3 * w.rotary_dim)
    read = 2 * t * heads * d + 2 * 4 * d + 8 * 3 * t + 2 * t * w.rotary_dim
    written = 2 * t * (w.q_heads + w.index_q_heads) * d + 2 * t * (2 * w.kv_heads + 1) * d
    return Cost(flops={"fp32": float(flops)}, bytes=float(read + written))
