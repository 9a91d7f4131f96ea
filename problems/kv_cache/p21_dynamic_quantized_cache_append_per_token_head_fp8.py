"""Per-(token, head) dynamic FP8 quantisation of new keys and values, appended to a paged FP8
KV cache (reshape_and_cache_flash with per-token-head scales): for each token t and head h,
scale = max(absmax over head_dim of x[t, h] / 448, 1e-6); the row x / scale is clamped to
[−448, 448] and rounded to float8_e4m3fn (round to nearest even). For every non-padding token
(slot −1 marks padding) the e4m3 bit patterns are stored as uint8 in the key and value caches
[num_blocks, block_size, heads, head_dim] at block = slot // block_size, offset = slot %
block_size, and the float32 scales in the scale caches [num_blocks, block_size, heads]. Inputs
k and v are bfloat16. All four caches are updated in place and returned; byte caches compare
exactly."""

from __future__ import annotations

import torch

from problems.common import FP8_E4M3_MAX, compute_dtype, generator, rand, randint, randn, randperm
from problems.spec import Cost, Workload

ID = "p21"
SLUG = "dynamic_quantized_cache_append_per_token_head_fp8"
FAMILY = "KV Cache"
ORIGIN = "vllm"
SOURCE = (
    "vllm-project/vllm@b9b6306e: tests/quantization/test_per_token_kv_cache.py; "
    "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Rounding to e4m3 is a discrete decision: after drawing, every value whose scaled image "
    "x/scale lies within a relative DECISION_MARGIN of an e4m3 rounding midpoint is moved one "
    "bfloat16 step away from zero, so float32 and float64 references store the same bytes. "
    "1 to 128 trailing tokens are padding (slot −1)."
)
WORKLOAD = {"tokens": 2048, "max_pad": 128, "heads": 8, "head_dim": 128, "block_size": 16,
            "num_blocks": 256}
SMOKE = {"tokens": 48, "max_pad": 8, "heads": 2, "head_dim": 32, "block_size": 4,
         "num_blocks": 16}
INPUTS = ("key", "value", "slot_mapping", "key_cache", "value_cache", "k_scale_cache",
          "v_scale_cache")
OUTPUTS = ("key_cache", "value_cache", "k_scale_cache", "v_scale_cache")
INPLACE = {name: name for name in OUTPUTS}
DECISION_MARGIN = 1e-4
_SCALE_FLOOR = 1e-6


def _midpoint_distance(y: torch.Tensor) -> torch.Tensor:
    """Relative distance of |y| to the nearest e4m3 rounding midpoint (float64)."""
    a = y.abs().clamp(min=2.0**-9)
    exponent = torch.floor(torch.log2(a)).clamp(min=-6.0)
    spacing = torch.exp2(exponent - 3.0)
    frac = y.abs() / spacing
    dist = (frac - torch.floor(frac) - 0.5).abs() * spacing
    return dist / y.abs().clamp(min=2.0**-9)


def _away_from_midpoints(x: torch.Tensor) -> torch.Tensor:
    """Nudge bf16 values whose scaled images sit near an e4m3 midpoint."""
    for _ in range(8):
        wide = x.double()
        amax = wide.abs().amax(dim=-1, keepdim=True)
        y = wide / (amax / FP8_E4M3_MAX).clamp(min=_SCALE_FLOOR)
        close = (_midpoint_distance(y) < DECISION_MARGIN) & (y.abs() < FP8_E4M3_MAX)
        if not bool(close.any()):
            return x
        bumped = (wide * (1.0 + 2.0**-7)).to(x.dtype)
        x = torch.where(close, bumped, x)
    raise ValueError("could not move quantisation inputs off e4m3 rounding midpoints")


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    key = _away_from_midpoints(randn(g, (w.tokens, w.heads, w.head_dim), torch.bfloat16, device))
    value = _away_from_midpoints(randn(g, key.shape, torch.bfloat16, device))
    slots = randperm(g, w.num_blocks * w.block_size, device)[: w.tokens].clone()
    pads = int(randint(g, 1, w.max_pad + 1, (1,), device)[0])
    slots[w.tokens - pads :] = -1
    cache_shape = (w.num_blocks, w.block_size, w.heads, w.head_dim)
    key_cache = randint(g, 0, 256, cache_shape, device, torch.uint8)
    value_cache = randint(g, 0, 256, cache_shape, device, torch.uint8)
    k_scales = rand(g, cache_shape[:3], torch.float32, device, 0.5, 1.5)
    v_scales = rand(g, cache_shape[:3], torch.float32, device, 0.5, 1.5)
    return [key, value, slots, key_cache, value_cache, k_scales, v_scales]


def _quantize(x: torch.Tensor, scaled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    dt = compute_dtype(x)
    wide = x.to(dt)
    scale = (wide.abs().amax(dim=-1) / FP8_E4M3_MAX).clamp(min=_SCALE_FLOOR)
    # as upstream (and vLLM's kernel): multiply by the reciprocal scale, not divide
    y = wide * (1.0 / scale.unsqueeze(-1)) if scaled else wide
    q = y.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(torch.uint8), scale


def _append(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache,
            scaled: bool = True):
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    block_size = key_cache.shape[1]
    blocks, offsets = slots // block_size, slots % block_size
    for x, cache, scales in ((key, key_cache, k_scale_cache), (value, value_cache, v_scale_cache)):
        q, s = _quantize(x, scaled)
        cache[blocks, offsets] = q[valid]
        scales[blocks, offsets] = s[valid].to(scales.dtype)
    return key_cache, value_cache, k_scale_cache, v_scale_cache


def reference(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache):
    return _append(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache)


def dropped_term(key, value, slot_mapping, key_cache, value_cache, k_scale_cache,
                 v_scale_cache):
    """Mutant: stores the scales but quantises the unscaled values."""
    return _append(key, value, slot_mapping, key_cache, value_cache, k_scale_cache,
                   v_scale_cache, scaled=False)


def reordered(key, value, slot_mapping, key_cache, value_cache, k_scale_cache, v_scale_cache):
    """Valid alternative: multiply by the reciprocal scale, store through flat slot views."""
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    for x, cache, scales in ((key, key_cache, k_scale_cache), (value, value_cache, v_scale_cache)):
        dt = compute_dtype(x)
        wide = x.to(dt)[valid]
        amax = wide.abs().amax(dim=-1)
        inv = 1.0 / (amax * (1.0 / FP8_E4M3_MAX)).clamp(min=_SCALE_FLOOR)
        q = (wide * inv.unsqueeze(-1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
        flat_cache = cache.view(-1, *cache.shape[2:])
        flat_cache[slots] = q.to(torch.float8_e4m3fn).view(torch.uint8)
        scales.view(-1, scales.shape[-1])[slots] = (1.0 / inv).to(scales.dtype)
    return key_cache, value_cache, k_scale_cache, v_scale_cache


def cost(w: Workload) -> Cost:
    elems = w.tokens * w.heads * w.head_dim
    stored = (w.tokens - w.max_pad // 2) * w.heads
    read = 2 * 2 * elems + 8 * w.tokens
    written = 2 * stored * (w.head_dim + 4)
    return Cost(flops={"fp32": 2.0 * 3 * elems}, bytes=float(read + written))
