"""Gated linear attention (GLA) forward recurrence with a per-key-channel decay. Inputs are
bfloat16 in ``[batch, time, heads, dim]`` layout: ``q``, ``k [8, 1024, 4, 256]``,
``v [8, 1024, 4, 512]`` and the log-decay gate ``gk [8, 1024, 4, 256]`` (≤ 0, one value per key
channel). Each head keeps a ``[K, V]`` state ``h`` (zero at the start); for every token, in
order: ``h ← diag(exp(gk))·h + k ⊗ v`` and the output is ``o = (K^-1/2·q)ᵀh``. q and k are
used as given (no normalisation). Output: ``o [8, 1024, 4, 512]`` bfloat16 (no final state)."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.linear_attention._fla import log_decay_gate
from problems.spec import Cost, Workload

ID = "p69"
SLUG = "gated_linear_attention_gla_bf16"
FAMILY = "Linear Attention"
ORIGIN = "fla"
SOURCE = (
    "fla-org/flash-linear-attention: fla/ops/gla/naive.py (naive_recurrent_gla); inputs as in "
    "tests/ops/test_gla.py; head geometry from fla/models/gla/configuration_gla.py"
)
LICENSE = "MIT"
NOTES = (
    "Workload as in the public MetaKernelBench (B 8, T 1024, 4 heads, key dim 256, value dim "
    "512, gate logsigmoid(N(0,1))/16). All tensors are redrawn per seed."
)
WORKLOAD = {
    "batch": 8,
    "seq_len": 1024,
    "num_heads": 4,
    "key_dim": 256,
    "value_dim": 512,
    "gate_normalizer": 16.0,
}
SMOKE = {**WORKLOAD, "batch": 2, "seq_len": 40, "num_heads": 2, "key_dim": 16, "value_dim": 32}
INPUTS = ("q", "k", "v", "gk")
OUTPUTS = ("o",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None
_CHUNK = 16  # chunk length of the reordered (chunked) form


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    gen = generator(seed, device)
    b, t, h = w.batch, w.seq_len, w.num_heads
    q = randn(gen, (b, t, h, w.key_dim), torch.bfloat16, device)
    k = randn(gen, (b, t, h, w.key_dim), torch.bfloat16, device)
    v = randn(gen, (b, t, h, w.value_dim), torch.bfloat16, device)
    gk = log_decay_gate(gen, (b, t, h, w.key_dim), w.gate_normalizer, device)
    return [q, k, v, gk]


def _recurrence(q, k, v, gk, decay=True):
    dt = compute_dtype(q, k, v, gk)
    batch, seq_len, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    qs, kd, vd, a = q.to(dt) * key_dim**-0.5, k.to(dt), v.to(dt), gk.to(dt).exp()
    h = torch.zeros(batch, heads, key_dim, value_dim, dtype=dt, device=v.device)
    o = torch.empty(batch, seq_len, heads, value_dim, dtype=dt, device=v.device)
    for t in range(seq_len):
        update = kd[:, t, :, :, None] * vd[:, t, :, None, :]
        h = h * a[:, t, :, :, None] + update if decay else h + update
        o[:, t] = torch.einsum("bhk,bhkv->bhv", qs[:, t], h)
    return o.to(v.dtype)


def reference(q, k, v, gk):
    return _recurrence(q, k, v, gk)


def dropped_term(q, k, v, gk):
    """Mutant: forgets the decay gate (plain causal linear attention)."""
    return _recurrence(q, k, v, gk, decay=False)


def reordered(q, k, v, gk):
    """Valid alternative: the chunked form (state carried between chunks of 16 tokens, and a
    decay-weighted causal attention inside each chunk)."""
    dt = compute_dtype(q, k, v, gk)
    batch, seq_len, heads, key_dim = q.shape
    value_dim = v.shape[-1]
    qs = (q.to(dt) * key_dim**-0.5).transpose(1, 2)  # [B, H, T, K]
    kd, vd, lg = k.to(dt).transpose(1, 2), v.to(dt).transpose(1, 2), gk.to(dt).transpose(1, 2)
    h = torch.zeros(batch, heads, key_dim, value_dim, dtype=dt, device=v.device)
    out = []
    for start in range(0, seq_len, _CHUNK):
        end = min(start + _CHUNK, seq_len)
        qc, kc, vc = qs[:, :, start:end], kd[:, :, start:end], vd[:, :, start:end]
        b = lg[:, :, start:end].cumsum(dim=2)  # log of the decay from the chunk start
        n = end - start
        causal = torch.ones(n, n, dtype=torch.bool, device=v.device).tril()
        diff = b[:, :, :, None, :] - b[:, :, None, :, :]  # [B, H, t, s, K]
        diff = diff.masked_fill(~causal[:, :, None], float("-inf"))
        scores = torch.einsum("bhtk,bhsk,bhtsk->bhts", qc, kc, diff.exp())
        out.append(torch.einsum("bhtk,bhkv->bhtv", qc * b.exp(), h) + scores @ vc)
        last = b[:, :, -1:]
        h = h * last.exp().squeeze(2)[..., None] + torch.einsum(
            "bhsk,bhsv->bhkv", kc * (last - b).exp(), vc
        )
    return torch.cat(out, dim=2).transpose(1, 2).to(v.dtype)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq_len * w.num_heads
    state = w.key_dim * w.value_dim
    # per token and head: decay (1), outer product and add (2) and qᵀh (2) per state entry
    flops = tokens * (5.0 * state + 2.0 * w.key_dim)
    read = 2 * tokens * (3 * w.key_dim + w.value_dim)
    write = 2 * tokens * w.value_dim
    return Cost(flops={"fp32": float(flops)}, bytes=float(read + write))
