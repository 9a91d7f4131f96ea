"""Multimodal embedding merge of Qwen3-VL-32B with an NVFP4 vision projection. Text token ids
[B, S] (int64) are looked up in a bfloat16 embedding table [151936, 8192]. Float32 vision
features [B, Nv, 3584] are projected to 8,192 channels by an NVFP4 weight — packed uint8
[1, 8192, 1792] (two E2M1 codes per byte, element 2j in the low nibble), float8_e4m3fn decode
scales [1, 8192, 224] (one per 16 input channels) and a float32 [1] global decode scale,
W = E2M1(code) · block_scale · global_scale, dequantized in software since Hopper has no FP4
tensor cores — plus a bfloat16 bias (float32 accumulation). The boolean mask [B, S] has exactly
Nv true positions per row: the i-th true position of row b receives vision embedding (b, i),
every other position keeps its text embedding. Returns bfloat16 [B, S, 8192]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from problems.common import compute_dtype, generator, rand, randint, randn
from problems.quantization import _fp4
from problems.spec import Cost, Workload

ID = "p55"
SLUG = "multimodal_embedding_projection_qwen3vl_nvfp4"
FAMILY = "Quantization"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench Quant/008_nvfp4_multimodal_embedding_projection (task 184), "
    "workload record 10 (batch 32 × seq 1024, 384 vision tokens)"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Upstream also quantizes the vision features to NVFP4 per call (W4A4, Blackwell FP4 tensor "
    "cores); on Hopper the projection is weight-only NVFP4 (W4A32): the float32 features are "
    "used as is. The global decode scale is a float32 [1] tensor (upstream: a Python float) so "
    "the float64 anchor promotes it. The weight is drawn N(0, 1/3584) instead of N(0, 1) so "
    "vision embeddings are O(1) like the text embeddings; bias N(0, 0.1²)."
)
WORKLOAD = {
    "batch": 32, "seq_len": 1024, "vision_tokens": 384, "hidden": 8192, "vocab": 151936,
    "vision_hidden": 3584,
}
SMOKE = {
    "batch": 2, "seq_len": 24, "vision_tokens": 8, "hidden": 128, "vocab": 1000,
    "vision_hidden": 96,
}
INPUTS = (
    "text_input_ids", "text_embedding_weight", "vision_features", "vision_proj_weight_fp4",
    "vision_proj_weight_scale", "vision_proj_weight_global_scale", "vision_proj_bias",
    "vision_token_mask",
)
OUTPUTS = ("merged_embeddings",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    ids = randint(g, 0, w.vocab, (w.batch, w.seq_len), device)
    table = randn(g, (w.vocab, w.hidden), torch.bfloat16, device)
    features = randn(g, (w.batch, w.vision_tokens, w.vision_hidden), torch.float32, device)
    weight = randn(g, (1, w.hidden, w.vision_hidden), torch.float32, device,
                   std=w.vision_hidden**-0.5)
    packed, scales, global_scale = _fp4.quantize(weight)
    bias = randn(g, (w.hidden,), torch.bfloat16, device, std=0.1)
    # exactly vision_tokens random positions per row: the smallest random keys
    keys = rand(g, (w.batch, w.seq_len), torch.float32, device)
    chosen = keys.argsort(dim=1)[:, : w.vision_tokens]
    mask = torch.zeros(w.batch, w.seq_len, dtype=torch.bool, device=device)
    mask.scatter_(1, chosen, True)
    return [ids, table, features, packed, scales, global_scale, bias, mask]


def _merge(text_input_ids, text_embedding_weight, vision, vision_token_mask):
    merged = F.embedding(text_input_ids, text_embedding_weight).to(vision.dtype)
    merged[vision_token_mask] = vision.reshape(-1, vision.shape[-1])
    return merged.to(text_embedding_weight.dtype)


def _project(vision_features, packed, scales, global_scale, bias, dt, global_last=False):
    if global_last:
        one = torch.ones(1, dtype=dt, device=packed.device)
        weight = _fp4.dequantize(packed[0], scales[0], one, dt)
        y = (vision_features.to(dt) @ weight.t()) * global_scale.to(dt)
    else:
        weight = _fp4.dequantize(packed[0], scales[0], global_scale, dt)
        y = vision_features.to(dt) @ weight.t()
    return y if bias is None else y + bias.to(dt)


def reference(text_input_ids, text_embedding_weight, vision_features, vision_proj_weight_fp4,
              vision_proj_weight_scale, vision_proj_weight_global_scale, vision_proj_bias,
              vision_token_mask):
    dt = compute_dtype(text_embedding_weight, vision_features, vision_proj_weight_global_scale,
                       vision_proj_bias)
    vision = _project(vision_features, vision_proj_weight_fp4, vision_proj_weight_scale,
                      vision_proj_weight_global_scale, vision_proj_bias, dt)
    return _merge(text_input_ids, text_embedding_weight, vision, vision_token_mask)


def dropped_term(text_input_ids, text_embedding_weight, vision_features, vision_proj_weight_fp4,
                 vision_proj_weight_scale, vision_proj_weight_global_scale, vision_proj_bias,
                 vision_token_mask):
    """Mutant: forgets the projection bias."""
    dt = compute_dtype(text_embedding_weight, vision_features, vision_proj_weight_global_scale,
                       vision_proj_bias)
    vision = _project(vision_features, vision_proj_weight_fp4, vision_proj_weight_scale,
                      vision_proj_weight_global_scale, None, dt)
    return _merge(text_input_ids, text_embedding_weight, vision, vision_token_mask)


def reordered(text_input_ids, text_embedding_weight, vision_features, vision_proj_weight_fp4,
              vision_proj_weight_scale, vision_proj_weight_global_scale, vision_proj_bias,
              vision_token_mask):
    """Valid alternative: GEMM on block-scaled codes, global scale applied to the product."""
    dt = compute_dtype(text_embedding_weight, vision_features, vision_proj_weight_global_scale,
                       vision_proj_bias)
    vision = _project(vision_features, vision_proj_weight_fp4, vision_proj_weight_scale,
                      vision_proj_weight_global_scale, vision_proj_bias, dt, global_last=True)
    return _merge(text_input_ids, text_embedding_weight, vision, vision_token_mask)


def cost(w: Workload) -> Cost:
    """Compulsory bytes count only the embedding rows that survive the merge."""
    m, k, n = w.batch * w.vision_tokens, w.vision_hidden, w.hidden
    text_rows = w.batch * (w.seq_len - w.vision_tokens)
    return Cost(
        flops={"fp32": 2.0 * m * n * k + 3.0 * n * k},
        bytes=(8.0 * w.batch * w.seq_len + 2.0 * text_rows * n + 4.0 * m * k + n * k / 2
               + n * k / _fp4.BLOCK + 4.0 + 2.0 * n + w.batch * w.seq_len
               + 2.0 * w.batch * w.seq_len * n),
    )
