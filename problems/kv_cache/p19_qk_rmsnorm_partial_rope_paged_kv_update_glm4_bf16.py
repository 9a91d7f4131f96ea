"""GLM-4.5 attention prologue with a paged KV-cache write: split a fused bfloat16 qkv row into
q (32 heads), k and v (8 heads each) of head_dim 128; RMS-normalise every q head and every k
head over head_dim (epsilon 1e-5) and scale by per-channel weights; apply NeoX-style rotary
embedding to the first 64 channels of each q and k head (cos/sin gathered from a bfloat16
[max_position, 64] table by each token's position; the last 64 channels pass through); then
store k and v of each token into the bfloat16 cache [2, num_blocks, block_size, kv_heads,
head_dim] at slot ``slot_mapping[t]`` (block = slot // block_size, offset = slot % block_size);
tokens with slot −1 are padding and are not stored. Returns q and the cache (updated in place)."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randint, randn, randperm
from problems.spec import Cost, Workload

ID = "p19"
SLUG = "qk_rmsnorm_partial_rope_paged_kv_update_glm4_bf16"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = "vllm-project/vllm@b9b6306e: tests/compile/passes/test_rocm_aiter_qk_norm_rope_kvcache_fusion.py"
LICENSE = "Apache-2.0"
NOTES = (
    "Geometry from the upstream fusion test (GLM-4.5 heads, partial rotary 64 of 128, page size "
    "16). Norm weights are standard normal, as upstream draws them; 1 to 128 trailing tokens "
    "are padding (slot −1). The reference keeps intermediates in the compute dtype and rounds "
    "once at the end."
)
WORKLOAD = {
    "tokens": 2048, "max_pad": 128, "q_heads": 32, "kv_heads": 8, "head_dim": 128,
    "rotary_dim": 64, "block_size": 16, "num_blocks": 256, "max_position": 4096,
    "rope_base": 10000.0, "eps": 1e-5,
}
SMOKE = {
    "tokens": 48, "max_pad": 8, "q_heads": 8, "kv_heads": 2, "head_dim": 32,
    "rotary_dim": 16, "block_size": 4, "num_blocks": 16, "max_position": 256,
    "rope_base": 10000.0, "eps": 1e-5,
}
INPUTS = (
    "qkv", "positions", "q_norm_weight", "k_norm_weight", "cos_sin_cache", "slot_mapping",
    "kv_cache", "eps",
)
OUTPUTS = ("q", "kv_cache")
INPLACE = {"kv_cache": "kv_cache"}
DECISION_MARGIN = None


def _rope_table(w: Workload, device: str) -> torch.Tensor:
    half = w.rotary_dim // 2
    inv_freq = w.rope_base ** (-torch.arange(half, device=device, dtype=torch.float64) / half)
    angles = torch.arange(w.max_position, device=device, dtype=torch.float64)[:, None] * inv_freq
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(torch.bfloat16)


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    width = (w.q_heads + 2 * w.kv_heads) * w.head_dim
    qkv = randn(g, (w.tokens, width), torch.bfloat16, device)
    positions = randint(g, 0, w.max_position, (w.tokens,), device)
    q_w = randn(g, (w.head_dim,), torch.bfloat16, device)
    k_w = randn(g, (w.head_dim,), torch.bfloat16, device)
    slots = randperm(g, w.num_blocks * w.block_size, device)[: w.tokens].clone()
    pads = int(randint(g, 1, w.max_pad + 1, (1,), device)[0])
    slots[w.tokens - pads :] = -1
    cache_shape = (2, w.num_blocks, w.block_size, w.kv_heads, w.head_dim)
    kv_cache = randn(g, cache_shape, torch.bfloat16, device)
    return [qkv, positions, q_w, k_w, _rope_table(w, device), slots, kv_cache, w.eps]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _neox_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    rot = cos.shape[-1] * 2
    x1, x2, rest = x[..., : rot // 2], x[..., rot // 2 : rot], x[..., rot:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)


def _prologue(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, kv_cache, eps,
              norm_q: bool = True):
    dt = compute_dtype(qkv, q_norm_weight, k_norm_weight, cos_sin_cache)
    kv_heads, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    tokens = qkv.shape[0]
    q_heads = qkv.shape[1] // head_dim - 2 * kv_heads
    x = qkv.to(dt).view(tokens, q_heads + 2 * kv_heads, head_dim)
    q, k, v = x.split([q_heads, kv_heads, kv_heads], dim=1)
    if norm_q:
        q = _rms_norm(q, q_norm_weight.to(dt), eps)
    k = _rms_norm(k, k_norm_weight.to(dt), eps)
    cos, sin = cos_sin_cache.index_select(0, positions).to(dt).unsqueeze(1).chunk(2, dim=-1)
    return _neox_rope(q, cos, sin), _neox_rope(k, cos, sin), v


def _store(kv_cache, k, v, slot_mapping):
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    block_size = kv_cache.shape[2]
    blocks, offsets = slots // block_size, slots % block_size
    kv_cache[0, blocks, offsets] = k[valid].to(kv_cache.dtype)
    kv_cache[1, blocks, offsets] = v[valid].to(kv_cache.dtype)


def reference(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, slot_mapping,
              kv_cache, eps):
    q, k, v = _prologue(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, kv_cache, eps)
    _store(kv_cache, k, v, slot_mapping)
    return q.to(qkv.dtype), kv_cache


def dropped_term(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, slot_mapping,
                 kv_cache, eps):
    """Mutant: skips the RMSNorm of q."""
    q, k, v = _prologue(
        qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, kv_cache, eps, norm_q=False
    )
    _store(kv_cache, k, v, slot_mapping)
    return q.to(qkv.dtype), kv_cache


def reordered(qkv, positions, q_norm_weight, k_norm_weight, cos_sin_cache, slot_mapping,
              kv_cache, eps):
    """Valid alternative: weight folded before the rsqrt scale, rotation as a complex product,
    tokens stored one block of slots at a time in reverse order."""
    dt = compute_dtype(qkv, q_norm_weight, k_norm_weight, cos_sin_cache)
    kv_heads, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    tokens = qkv.shape[0]
    q_heads = qkv.shape[1] // head_dim - 2 * kv_heads
    x = qkv.to(dt).view(tokens, q_heads + 2 * kv_heads, head_dim)
    q, k, v = x.split([q_heads, kv_heads, kv_heads], dim=1)
    half = cos_sin_cache.shape[1] // 2
    cs = cos_sin_cache.index_select(0, positions).to(dt)
    rot = torch.complex(cs[:, :half], cs[:, half:]).unsqueeze(1)

    def norm_rope(t, weight):
        ss = t.pow(2).sum(-1, keepdim=True)
        t = (t * weight.to(dt)) * torch.rsqrt(ss / head_dim + eps)
        z = torch.complex(t[..., :half], t[..., half : 2 * half]) * rot
        return torch.cat((z.real, z.imag, t[..., 2 * half :]), dim=-1)

    q, k = norm_rope(q, q_norm_weight), norm_rope(k, k_norm_weight)
    block_size = kv_cache.shape[2]
    for t in range(tokens - 1, -1, -1):
        s = int(slot_mapping[t])
        if s >= 0:
            kv_cache[0, s // block_size, s % block_size] = k[t].to(kv_cache.dtype)
            kv_cache[1, s // block_size, s % block_size] = v[t].to(kv_cache.dtype)
    return q.to(qkv.dtype), kv_cache


def cost(w: Workload) -> Cost:
    t, d = w.tokens, w.head_dim
    heads = w.q_heads + w.kv_heads
    flops = t * heads * (4 * d + 3 * w.rotary_dim)
    stored = (t - w.max_pad // 2) * 2 * w.kv_heads * d  # expected non-padding k/v elements
    read = 2 * t * (w.q_heads + 2 * w.kv_heads) * d + 8 * t * 2 + 2 * t * w.rotary_dim + 4 * d
    written = 2 * t * w.q_heads * d + 2 * stored
    return Cost(flops={"fp32": float(flops)}, bytes=float(read + written))
