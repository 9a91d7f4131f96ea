"""DeepSeek-style MLA prologue with a compressed-cache write (concat_and_cache_mla): each
bfloat16 token row holds [q_c (1536) | kv_c (512) | k_pe (64)]. q = q_c · W_qbᵀ is reshaped to
16 heads of 192 = 128 no-position channels + 64 rotary channels; NeoX rotary embedding (cos/sin
gathered from a bfloat16 [max_position, 64] table by the token's position) is applied to the 64
rotary channels of every q head and to k_pe. The compressed entry [kv_c | rotated k_pe] (576
channels) is written to the bfloat16 cache [num_blocks, block_size, 1, 576] at slot
``slot_mapping[t]`` (block = slot // block_size, offset = slot % block_size); slot −1 marks
padding tokens that are not stored. Returns q_out [T, 16, 192] and the cache, updated in place."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randint, randn, randperm
from problems.spec import Cost, Workload

ID = "p20"
SLUG = "mla_rope_compressed_cache_update_bf16"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = "vllm-project/vllm@b9b6306e: tests/compile/passes/test_mla_rope_kvcache_cat_fusion.py"
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry from the upstream fusion test (q_lora 1536, kv_lora 512, 16 heads of 128+64, "
    "page size 16). W_qb is drawn N(0, 0.02²) as upstream draws it; 1 to 128 trailing tokens "
    "are padding (slot −1)."
)
WORKLOAD = {
    "tokens": 2048, "max_pad": 128, "heads": 16, "q_lora": 1536, "kv_lora": 512, "nope_dim": 128,
    "rope_dim": 64, "block_size": 16, "num_blocks": 256, "max_position": 4096,
    "rope_base": 10000.0,
}
SMOKE = {
    "tokens": 40, "max_pad": 8, "heads": 2, "q_lora": 64, "kv_lora": 32, "nope_dim": 128,
    "rope_dim": 16, "block_size": 4, "num_blocks": 16, "max_position": 128, "rope_base": 10000.0,
}
INPUTS = ("qkv_lora", "q_b_weight", "positions", "cos_sin_cache", "slot_mapping", "kv_cache")
OUTPUTS = ("q_out", "kv_cache")
INPLACE = {"kv_cache": "kv_cache"}
DECISION_MARGIN = None
_Q_B_STD = 0.02  # upstream's weight scale


def _rope_table(w: Workload, device: str) -> torch.Tensor:
    half = w.rope_dim // 2
    inv_freq = w.rope_base ** (-torch.arange(half, device=device, dtype=torch.float64) / half)
    angles = torch.arange(w.max_position, device=device, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(torch.bfloat16)


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    width = w.q_lora + w.kv_lora + w.rope_dim
    qkv_lora = randn(g, (w.tokens, width), torch.bfloat16, device)
    q_b = randn(g, (w.heads * (w.nope_dim + w.rope_dim), w.q_lora), torch.bfloat16, device,
                std=_Q_B_STD)
    positions = randint(g, 0, w.max_position, (w.tokens,), device)
    slots = randperm(g, w.num_blocks * w.block_size, device)[: w.tokens].clone()
    pads = int(randint(g, 1, w.max_pad + 1, (1,), device)[0])
    slots[w.tokens - pads :] = -1
    kv_cache = randn(g, (w.num_blocks, w.block_size, 1, w.kv_lora + w.rope_dim), torch.bfloat16,
                     device)
    return [qkv_lora, q_b, positions, _rope_table(w, device), slots, kv_cache]


def _neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _split(qkv_lora, q_b_weight, positions, cos_sin_cache, kv_cache):
    """(dt, q [T, H, nope+rope], kv_c, k_pe, cos, sin) in the compute dtype."""
    dt = compute_dtype(qkv_lora, q_b_weight, cos_sin_cache)
    rope_dim = cos_sin_cache.shape[1]
    kv_lora = kv_cache.shape[-1] - rope_dim
    head_dim = WORKLOAD["nope_dim"] + rope_dim
    x = qkv_lora.to(dt)
    q_c, kv_c, k_pe = x.split([q_b_weight.shape[1], kv_lora, rope_dim], dim=-1)
    q = (q_c @ q_b_weight.to(dt).t()).view(x.shape[0], -1, head_dim)
    cos, sin = cos_sin_cache.index_select(0, positions).to(dt).chunk(2, dim=-1)
    return dt, q, kv_c, k_pe, cos, sin


def _store(kv_cache, kv_c, k_pe, slot_mapping):
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    block_size = kv_cache.shape[1]
    entry = torch.cat((kv_c, k_pe), dim=-1)[valid].to(kv_cache.dtype)
    kv_cache[slots // block_size, slots % block_size, 0] = entry


def reference(qkv_lora, q_b_weight, positions, cos_sin_cache, slot_mapping, kv_cache):
    dt, q, kv_c, k_pe, cos, sin = _split(qkv_lora, q_b_weight, positions, cos_sin_cache, kv_cache)
    nope = WORKLOAD["nope_dim"]
    q_pe = _neox(q[..., nope:], cos.unsqueeze(1), sin.unsqueeze(1))
    q_out = torch.cat((q[..., :nope], q_pe), dim=-1)
    _store(kv_cache, kv_c, _neox(k_pe, cos, sin), slot_mapping)
    return q_out.to(qkv_lora.dtype), kv_cache


def dropped_term(qkv_lora, q_b_weight, positions, cos_sin_cache, slot_mapping, kv_cache):
    """Mutant: stores k_pe without its rotary embedding."""
    dt, q, kv_c, k_pe, cos, sin = _split(qkv_lora, q_b_weight, positions, cos_sin_cache, kv_cache)
    nope = WORKLOAD["nope_dim"]
    q_pe = _neox(q[..., nope:], cos.unsqueeze(1), sin.unsqueeze(1))
    q_out = torch.cat((q[..., :nope], q_pe), dim=-1)
    _store(kv_cache, kv_c, k_pe, slot_mapping)
    return q_out.to(qkv_lora.dtype), kv_cache


def reordered(qkv_lora, q_b_weight, positions, cos_sin_cache, slot_mapping, kv_cache):
    """Valid alternative: the rotary part of q is rotated by rotating the rows of W_qb's
    output per token (projection split into two K-halves), rotation as a complex product."""
    dt = compute_dtype(qkv_lora, q_b_weight, cos_sin_cache)
    rope_dim = cos_sin_cache.shape[1]
    half = rope_dim // 2
    kv_lora = kv_cache.shape[-1] - rope_dim
    nope = WORKLOAD["nope_dim"]
    x = qkv_lora.to(dt)
    q_lora = q_b_weight.shape[1]
    q_c, kv_c, k_pe = x.split([q_lora, kv_lora, rope_dim], dim=-1)
    wq = q_b_weight.to(dt)
    k_half = q_lora // 2
    q = q_c[:, :k_half] @ wq[:, :k_half].t() + q_c[:, k_half:] @ wq[:, k_half:].t()
    q = q.view(x.shape[0], -1, nope + rope_dim)
    cs = cos_sin_cache.index_select(0, positions).to(dt)
    rot = torch.complex(cs[:, :half], cs[:, half:])
    zq = torch.complex(q[..., nope : nope + half], q[..., nope + half :]) * rot.unsqueeze(1)
    zk = torch.complex(k_pe[:, :half], k_pe[:, half:]) * rot
    q_out = torch.cat((q[..., :nope], zq.real, zq.imag), dim=-1)
    _store(kv_cache, kv_c, torch.cat((zk.real, zk.imag), dim=-1), slot_mapping)
    return q_out.to(qkv_lora.dtype), kv_cache


def cost(w: Workload) -> Cost:
    t = w.tokens
    head_dim = w.nope_dim + w.rope_dim
    q_width = w.heads * head_dim
    matmul = 2.0 * t * w.q_lora * q_width
    rope = 6.0 * t * (w.heads + 1) * (w.rope_dim // 2)
    entry = w.kv_lora + w.rope_dim
    stored = (t - w.max_pad // 2) * entry
    read = 2 * t * (w.q_lora + entry) + 2 * q_width * w.q_lora + 16 * t + 2 * t * w.rope_dim
    written = 2 * t * q_width + 2 * stored
    return Cost(flops={"bf16": matmul, "fp32": rope}, bytes=float(read + written))
