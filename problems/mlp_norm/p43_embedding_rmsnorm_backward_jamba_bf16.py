"""Backward pass of an embedding lookup followed by RMSNorm (Jamba-mini, vocab 65,536, hidden
4,096). Forward (saved by the caller): x = E[input_ids] kept in float32, rstd =
1/sqrt(mean(x²) + eps), y = x·rstd·w. Given the bfloat16 upstream gradient dy
[batch, seq, 4096], the int64 token ids [batch, seq], the saved float32 x and rstd
[batch, seq, 1] and the bfloat16 norm weight w, compute the norm-weight gradient Σ dy·x·rstd
over all tokens and the embedding-table gradient: each token's dx = rstd·(g − n·mean(g·n)) with
g = dy·w and n = x·rstd, scatter-added into row input_ids of a zero [65536, 4096] table (ids
repeat, so rows accumulate several tokens; rows never looked up stay zero). The vocabulary size
is passed as a Python int. Both outputs are bfloat16, accumulated in float32 or wider."""

from __future__ import annotations

from typing import Any

import torch

from problems.common import compute_dtype, generator, randint, randn
from problems.spec import Cost, Workload

ID = "p43"
SLUG = "embedding_rmsnorm_backward_jamba_bf16"
FAMILY = "MLP & Norm"
ORIGIN = "sol-execbench"
SOURCE = (
    "nvidia/SOL-ExecBench: L1/087_embedding_with_initial_layernorm_backward (task #87), "
    "workload record 2"
)
LICENSE = "NVIDIA Evaluation Dataset License (facts only; reference rewritten)"
NOTES = (
    "Saved x and rstd are consistent (rstd computed from x with eps 1e-6; upstream draws them "
    "independently). A quarter of the token ids come from 64 frequent ids so that some table "
    "rows accumulate many tokens; the rest are uniform over the vocabulary. The norm weight is "
    "drawn as 1 + 0.1·N(0, 1)."
)
WORKLOAD: dict[str, Any] = {"batch": 32, "seq": 1024, "hidden": 4096, "vocab": 65536, "frequent": 64,
            "eps": 1e-6}
SMOKE = {"batch": 2, "seq": 64, "hidden": 256, "vocab": 512, "frequent": 64, "eps": 1e-6}
INPUTS = ("grad_output", "input_ids", "hidden_states_fp32", "rstd", "norm_weight", "vocab_size")
OUTPUTS = ("grad_embed_weight", "grad_norm_weight")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[Any]:
    g = generator(seed, device)
    dy = randn(g, (w.batch, w.seq, w.hidden), torch.bfloat16, device)
    ids = randint(g, 0, w.vocab, (w.batch, w.seq), device)
    hot = randint(g, 0, w.frequent, (w.batch, w.seq), device)
    ids = torch.where(torch.rand(ids.shape, generator=g, device=device) < 0.25, hot, ids)
    scale = torch.rand((w.batch, w.seq, 1), generator=g, device=device) + 0.5
    x = randn(g, (w.batch, w.seq, w.hidden), torch.float32, device) * scale
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + w.eps)
    weight = randn(g, (w.hidden,), torch.bfloat16, device, std=0.1, mean=1.0)
    return [dy, ids, x, rstd, weight, int(w.vocab)]


def _token_grads(grad_output, hidden_states_fp32, rstd, norm_weight, scaled: bool = True):
    dt = compute_dtype(grad_output, hidden_states_fp32, rstd, norm_weight)
    dy = grad_output.to(dt)
    r = rstd.to(dt)
    n = hidden_states_fp32.to(dt) * r
    grad_w = (dy * n).sum(dim=(0, 1))
    gn = dy * norm_weight.to(dt)
    gn = gn - n * (gn * n).mean(dim=-1, keepdim=True)
    return (r * gn if scaled else gn), grad_w


def _backward(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight,
              vocab: int, scaled: bool = True):
    dx, grad_w = _token_grads(grad_output, hidden_states_fp32, rstd, norm_weight, scaled)
    hidden = dx.shape[-1]
    table = torch.zeros(vocab, hidden, dtype=dx.dtype, device=dx.device)
    table.index_add_(0, input_ids.reshape(-1), dx.reshape(-1, hidden))
    return table.to(grad_output.dtype), grad_w.to(norm_weight.dtype)


def reference(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight, vocab_size):
    return _backward(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight, vocab_size)


def dropped_term(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight, vocab_size):
    """Mutant: forgets the rstd factor of the RMSNorm backward (dx = g − n·mean(g·n))."""
    return _backward(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight, vocab_size,
                     scaled=False)


def reordered(grad_output, input_ids, hidden_states_fp32, rstd, norm_weight, vocab_size):
    """Valid alternative: tokens sorted by id and accumulated with index_put_(accumulate=True);
    the weight gradient summed per sequence first."""
    dx, _ = _token_grads(grad_output, hidden_states_fp32, rstd, norm_weight)
    hidden = dx.shape[-1]
    ids = input_ids.reshape(-1)
    order = torch.argsort(ids, descending=True, stable=True)
    table = torch.zeros(vocab_size, hidden, dtype=dx.dtype, device=dx.device)
    table.index_put_((ids[order],), dx.reshape(-1, hidden)[order], accumulate=True)
    dt = dx.dtype
    n = hidden_states_fp32.to(dt) * rstd.to(dt)
    grad_w = (grad_output.to(dt) * n).sum(dim=1).sum(dim=0)
    return table.to(grad_output.dtype), grad_w.to(norm_weight.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq
    elems = tokens * w.hidden
    read = 2 * elems + 8 * tokens + 4 * elems + 4 * tokens + 2 * w.hidden
    write = 2 * w.vocab * w.hidden + 2 * w.hidden
    return Cost(flops={"fp32": 9.0 * elems}, bytes=float(read + write))
