"""Variable-length vision self-attention block of Qwen-Image-Edit-2509 (bfloat16): the tokens of
several images are concatenated into hidden_states [T, 1152]; cu_seqlens (int64, the running
ends of the sequences, without the leading 0) splits them. A fused projection with bias gives
q, k, v of 16 heads × 72 channels; rotary embedding is applied to q and k as x·cos +
rotate_half(x)·sin with per-token, per-head cos/sin tables [T, 16, 72] (rotate_half(x) =
[−x₂, x₁] for the two 36-channel halves). Each sequence attends only to itself (full,
non-causal softmax attention, scale 72^−½); the per-head outputs are concatenated and passed
through the output projection with bias, giving [T, 1152] bfloat16."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, ragged_lengths, randn
from problems.spec import Cost, Workload

ID = "p11"
SLUG = "varlen_vision_attention_qwen_image_edit_bf16"
FAMILY = "Attention"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench L2/018_cu_seqlens_variable_length_vision_attention "
    "(Qwen/Qwen-Image-Edit-2509), workload record 4"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Axes of record 4 (7,168 tokens in 28 sequences). Sequence lengths are a random ragged "
    "split (at least 32 tokens each) re-drawn per seed instead of the upstream equal split; "
    "cos/sin are real rotary tables (base 10000) built from each token's position within its "
    "sequence instead of random values; weights are scaled by 1/sqrt(1152) and biases drawn "
    "as 0.1·N(0,1) instead of zeros, so the bias terms matter. cost() uses the expected "
    "Σ len² of the ragged split (1.275·T²/N)."
)
WORKLOAD = {"total_seq_len": 7168, "num_sequences": 28, "num_heads": 16, "head_dim": 72,
            "min_len": 32, "rope_theta": 10000.0}
SMOKE = {"total_seq_len": 40, "num_sequences": 3, "num_heads": 2, "head_dim": 8,
         "min_len": 4, "rope_theta": 10000.0}
INPUTS = ("hidden_states", "cu_seqlens", "cos", "sin", "qkv_weight", "qkv_bias", "proj_weight",
          "proj_bias")
OUTPUTS = ("output",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    t, embed = w.total_seq_len, w.num_heads * w.head_dim
    lengths = torch.tensor(
        ragged_lengths(g, t, w.num_sequences, w.min_len), device=device, dtype=torch.int64
    )
    cu_seqlens = torch.cumsum(lengths, 0)
    positions = torch.arange(t, device=device) - torch.repeat_interleave(
        cu_seqlens - lengths, lengths
    )
    half = w.head_dim // 2
    inv_freq = w.rope_theta ** (-torch.arange(half, device=device, dtype=torch.float64) / half)
    angles = positions.double()[:, None] * inv_freq
    emb = torch.cat((angles, angles), dim=-1)[:, None, :].expand(t, w.num_heads, w.head_dim)
    cos = emb.cos().to(torch.bfloat16).contiguous()
    sin = emb.sin().to(torch.bfloat16).contiguous()
    x = randn(g, (t, embed), torch.bfloat16, device)
    std = 1.0 / math.sqrt(embed)
    qkv_w = randn(g, (3 * embed, embed), torch.bfloat16, device, std=std)
    qkv_b = randn(g, (3 * embed,), torch.bfloat16, device, std=0.1)
    proj_w = randn(g, (embed, embed), torch.bfloat16, device, std=std)
    proj_b = randn(g, (embed,), torch.bfloat16, device, std=0.1)
    return [x, cu_seqlens, cos, sin, qkv_w, qkv_b, proj_w, proj_b]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _qkv(hidden_states, cos, sin, qkv_weight, qkv_bias, rotate_k: bool = True):
    dt = compute_dtype(hidden_states, cos, sin, qkv_weight, qkv_bias)
    t, heads, head_dim = cos.shape
    qkv = hidden_states.to(dt) @ qkv_weight.to(dt).t() + qkv_bias.to(dt)
    q, k, v = qkv.view(t, 3, heads, head_dim).unbind(1)
    c, s = cos.to(dt), sin.to(dt)
    q = q * c + _rotate_half(q) * s
    if rotate_k:
        k = k * c + _rotate_half(k) * s
    return dt, q, k, v


def _attend(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias,
            rotate_k: bool = True):
    dt, q, k, v = _qkv(hidden_states, cos, sin, qkv_weight, qkv_bias, rotate_k)
    scale = q.shape[-1] ** -0.5
    bounds = [0, *cu_seqlens.tolist()]
    outs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (x[lo:hi].transpose(0, 1) for x in (q, k, v))  # [H, L, D]
        p = torch.softmax((qs @ ks.transpose(1, 2)) * scale, dim=-1)
        outs.append((p @ vs).transpose(0, 1))
    attn = torch.cat(outs).reshape(q.shape[0], -1)
    out = attn @ proj_weight.to(dt).t() + proj_bias.to(dt)
    return out.to(hidden_states.dtype)


def reference(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias):
    return _attend(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight,
                   proj_bias)


def dropped_term(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight,
                 proj_bias):
    """Mutant: applies the rotary embedding to q but not to k."""
    return _attend(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight,
                   proj_bias, rotate_k=False)


def reordered(hidden_states, cu_seqlens, cos, sin, qkv_weight, qkv_bias, proj_weight, proj_bias):
    """Valid alternative: all sequences at once under a block-diagonal mask, softmax
    normalised after the value product, output projection split over heads."""
    dt, q, k, v = _qkv(hidden_states, cos, sin, qkv_weight, qkv_bias)
    t, heads, head_dim = q.shape
    seq_id = torch.bucketize(torch.arange(t, device=q.device), cu_seqlens, right=True)
    same = seq_id[:, None] == seq_id[None, :]
    logits = torch.einsum("thd,shd->hts", q, k) / math.sqrt(head_dim)
    logits = logits.masked_fill(~same, -math.inf)
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    o = torch.einsum("hts,shd->thd", e, v) / e.sum(-1).transpose(0, 1).unsqueeze(-1)
    wp = proj_weight.to(dt).view(-1, heads, head_dim)
    out = torch.einsum("thd,ehd->te", o, wp) + proj_bias.to(dt)
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    t, embed = w.total_seq_len, w.num_heads * w.head_dim
    sum_sq = 1.275 * t * t / w.num_sequences
    proj = 2.0 * t * embed * 3 * embed + 2.0 * t * embed * embed
    attn = 4.0 * sum_sq * embed
    elementwise = 6.0 * t * 2 * embed + 5.0 * sum_sq * w.num_heads
    read = 2 * (t * embed + 2 * t * embed + 4 * embed * embed + 4 * embed) + 8 * w.num_sequences
    return Cost(flops={"bf16": proj + attn, "fp32": elementwise}, bytes=float(read + 2 * t * embed))
