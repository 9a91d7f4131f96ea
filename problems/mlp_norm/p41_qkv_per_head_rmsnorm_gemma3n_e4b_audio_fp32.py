"""Gemma-3n audio-encoder attention input stage in float32: project 1,024-channel tokens to
queries, keys and values with three bias-free linear layers ([1024, 1024] each, nn.Linear
layout), view each as 8 heads of 128, and RMS-normalise every query head and every key head
over its 128 channels (x / sqrt(mean(x²) + 1e-6)) followed by a per-channel weight (one
[128] weight for queries, one for keys); values are returned unnormalised. Outputs: three
[batch, seq, 8, 128] float32 tensors (query, key, value)."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p41"
SLUG = "qkv_per_head_rmsnorm_gemma3n_e4b_audio_fp32"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/054_audio_attention_qkv_projection_with_normalization "
    "(task #54), workload record 5"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "eps is a constant (1e-6, the record's scalar). Projections drawn as N(0, 1/1024); norm "
    "weights as 1 + 0.1·N(0, 1)."
)
WORKLOAD = {"batch": 64, "seq": 128, "hidden": 1024, "heads": 8, "head_dim": 128, "eps": 1e-6}
SMOKE = {"batch": 2, "seq": 12, "hidden": 64, "heads": 2, "head_dim": 32, "eps": 1e-6}
INPUTS = ("hidden_states", "q_proj_weight", "k_proj_weight", "v_proj_weight", "q_norm_weight",
          "k_norm_weight")
OUTPUTS = ("query_states", "key_states", "value_states")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    f32 = torch.float32
    out = w.heads * w.head_dim
    x = randn(g, (w.batch, w.seq, w.hidden), f32, device)
    std = 1.0 / math.sqrt(w.hidden)
    wq, wk, wv = (randn(g, (out, w.hidden), f32, device, std=std) for _ in range(3))
    qn = randn(g, (w.head_dim,), f32, device, std=0.1, mean=1.0)
    kn = randn(g, (w.head_dim,), f32, device, std=0.1, mean=1.0)
    return [x, wq, wk, wv, qn, kn]


def _rmsnorm(t: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    y = t / torch.sqrt(t.pow(2).mean(dim=-1, keepdim=True) + WORKLOAD["eps"])
    return y if weight is None else y * weight


def _forward(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
             k_norm_weight, key_weight: bool = True):
    dt = compute_dtype(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight)
    b, s, _ = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    x = hidden_states.to(dt)
    q, k, v = (
        (x @ wt.to(dt).t()).reshape(b, s, -1, head_dim)
        for wt in (q_proj_weight, k_proj_weight, v_proj_weight)
    )
    q = _rmsnorm(q, q_norm_weight.to(dt))
    k = _rmsnorm(k, k_norm_weight.to(dt) if key_weight else None)
    return tuple(t.to(hidden_states.dtype) for t in (q, k, v))


def reference(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
              k_norm_weight):
    return _forward(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
                    k_norm_weight)


def dropped_term(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
                 k_norm_weight):
    """Mutant: forgets the key norm weight."""
    return _forward(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
                    k_norm_weight, key_weight=False)


def reordered(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight, q_norm_weight,
              k_norm_weight):
    """Valid alternative: one fused QKV GEMM, then rsqrt-scaled norms with the weight first."""
    dt = compute_dtype(hidden_states, q_proj_weight, k_proj_weight, v_proj_weight)
    b, s, _ = hidden_states.shape
    head_dim = q_norm_weight.shape[0]
    wqkv = torch.cat([q_proj_weight, k_proj_weight, v_proj_weight]).to(dt)
    qkv = torch.nn.functional.linear(hidden_states.to(dt), wqkv).reshape(b, s, 3, -1, head_dim)
    q, k, v = qkv.unbind(dim=2)
    eps = WORKLOAD["eps"]
    q = (q * q_norm_weight.to(dt)) * torch.rsqrt((q * q).sum(-1, keepdim=True) / head_dim + eps)
    k = (k * k_norm_weight.to(dt)) * torch.rsqrt((k * k).sum(-1, keepdim=True) / head_dim + eps)
    return tuple(t.contiguous().to(hidden_states.dtype) for t in (q, k, v))


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    out = w.heads * w.head_dim
    matmul = 3 * 2.0 * tokens * w.hidden * out
    elementwise = 2 * 5.0 * tokens * out
    read = tokens * w.hidden + 3 * out * w.hidden + 2 * w.head_dim
    return Cost(flops={"fp32": matmul + elementwise}, bytes=4.0 * (read + 3 * tokens * out))
