"""Ling-flash-2.0 multi-token-prediction input fusion in bfloat16: shift the token ids one
place left within each sequence (the last position gets id 0), look the shifted ids up in the
[157184, 4096] embedding table, RMSNorm the embeddings and, separately, the incoming hidden
states (eps 1e-6, each with its own learned weight; the normalised values are rounded to bf16
before the weight is applied, and the weighted values are bf16), concatenate
[embeddings, hidden] to 8,192 channels and project back to 4,096 with a bias-free linear layer
([4096, 8192], nn.Linear layout). Output [batch, seq, 4096] bfloat16."""

from __future__ import annotations

import math

import torch

from problems.common import compute_dtype, generator, randint, randn
from problems.spec import Cost, Workload

ID = "p42"
SLUG = "shifted_embedding_dual_rmsnorm_ling_mtp_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/057_mtp_shifted_embedding_with_dual_rms_norm_fusion (task #57), "
    "workload record 0"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Rounding points follow upstream (normalised values and weighted values in the input dtype, "
    "GEMM at the input dtype; no-ops on the float64 anchor). Norm weights drawn as "
    "1 + 0.1·N(0, 1) (upstream 0.01) and the projection as N(0, 1/8192) so outputs are O(1)."
)
WORKLOAD = {"batch": 32, "seq": 256, "hidden": 4096, "vocab": 157184, "eps": 1e-6}
SMOKE = {"batch": 2, "seq": 12, "hidden": 128, "vocab": 1000, "eps": 1e-6}
INPUTS = ("input_ids", "hidden_states", "word_embeddings", "enorm_weight", "hnorm_weight",
          "eh_proj_weight")
OUTPUTS = ("fused_hidden_states",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    g = generator(seed, device)
    bf = torch.bfloat16
    ids = randint(g, 0, w.vocab, (w.batch, w.seq), device)
    x = randn(g, (w.batch, w.seq, w.hidden), bf, device)
    table = randn(g, (w.vocab, w.hidden), bf, device)
    enw = randn(g, (w.hidden,), bf, device, std=0.1, mean=1.0)
    hnw = randn(g, (w.hidden,), bf, device, std=0.1, mean=1.0)
    proj = randn(g, (w.hidden, 2 * w.hidden), bf, device, std=1.0 / math.sqrt(2 * w.hidden))
    return [ids, x, table, enw, hnw, proj]


def _shifted_ids(input_ids: torch.Tensor) -> torch.Tensor:
    shifted = torch.roll(input_ids, shifts=-1, dims=-1)
    shifted[:, -1] = 0
    return shifted


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, dt: torch.dtype) -> torch.Tensor:
    io = x.dtype
    xf = x.to(dt)
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + WORKLOAD["eps"])).to(io)
    return y if weight is None else (y.to(dt) * weight.to(dt)).to(io)


def _fuse(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
          eh_proj_weight, hidden_weight: bool = True):
    dt = compute_dtype(hidden_states, word_embeddings, enorm_weight, hnorm_weight)
    emb = word_embeddings[_shifted_ids(input_ids)]
    e = _rmsnorm(emb, enorm_weight, dt)
    h = _rmsnorm(hidden_states, hnorm_weight if hidden_weight else None, dt)
    return torch.cat([e, h], dim=-1) @ eh_proj_weight.t()


def reference(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
              eh_proj_weight):
    return _fuse(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
                 eh_proj_weight)


def dropped_term(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
                 eh_proj_weight):
    """Mutant: forgets the hidden-state norm weight."""
    return _fuse(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
                 eh_proj_weight, hidden_weight=False)


def reordered(input_ids, hidden_states, word_embeddings, enorm_weight, hnorm_weight,
              eh_proj_weight):
    """Valid alternative: gather with index_select, no concatenation — the projection is the sum
    of two K-halves accumulated in the compute dtype."""
    dt = compute_dtype(hidden_states, word_embeddings, enorm_weight, hnorm_weight)
    b, s = input_ids.shape
    ids = torch.cat([input_ids[:, 1:], torch.zeros_like(input_ids[:, :1])], dim=1)
    emb = word_embeddings.index_select(0, ids.reshape(-1)).reshape(b, s, -1)
    e = _rmsnorm(emb, enorm_weight, dt)
    h = _rmsnorm(hidden_states, hnorm_weight, dt)
    hidden = e.shape[-1]
    we, wh = eh_proj_weight[:, :hidden].to(dt), eh_proj_weight[:, hidden:].to(dt)
    out = e.to(dt) @ we.t() + h.to(dt) @ wh.t()
    return out.to(hidden_states.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    matmul = 2.0 * tokens * 2 * w.hidden * w.hidden
    elementwise = 2 * 5.0 * tokens * w.hidden
    read = 8 * tokens + 2 * (2 * tokens * w.hidden + 2 * w.hidden + 2 * w.hidden * w.hidden)
    return Cost(flops={"bf16": matmul, "fp32": elementwise},
                bytes=float(read + 2 * tokens * w.hidden))
