"""Kimi Delta Attention (KDA) forward recurrence: a gated delta rule whose decay is per key
channel. Inputs are bfloat16 in ``[batch, time, heads, dim]`` layout: ``q``, ``k`` ``[8, 1024,
16, 128]``, ``v [8, 1024, 16, 128]``, the log-decay gate ``g [8, 1024, 16, 128]`` (≤ 0, one
value per key channel) and the write strength ``beta [8, 1024, 16]`` in (0, 1). q and k are
L2-normalised over the head dimension and q is scaled by ``K^-1/2``. Each head keeps a
``[K, V]`` state ``S`` (zero at the start); for every token, in order: ``S ← diag(exp(g))·S``
(row ``i`` decays by ``exp(g_i)``), ``u = kᵀS``, ``S ← S + β·k ⊗ (v − u)``, and the output is
``o = qᵀS``. Output: ``o [8, 1024, 16, 128]`` bfloat16 (no final state is returned)."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.linear_attention._fla import l2_normalize, log_decay_gate, write_strength
from problems.spec import Cost, Workload

ID = "p68"
SLUG = "channelwise_gated_delta_rule_kda_bf16"
FAMILY = "Linear Attention"
ORIGIN = "fla"
SOURCE = (
    "fla-org/flash-linear-attention: fla/ops/kda/naive.py (naive_recurrent_kda); inputs as in "
    "tests/ops/test_kda.py; head geometry from fla/models/kda/configuration_kda.py"
)
LICENSE = "MIT"
NOTES = (
    "Workload as in the public MetaKernelBench (B 8, T 1024, 16 query/key and 16 value heads, "
    "head dim 128, gate logsigmoid(N(0,1))/16). The reference supports value heads that are a "
    "multiple of the query/key heads (grouped heads), as upstream; this workload has ratio 1. "
    "All tensors are redrawn per seed."
)
WORKLOAD = {
    "batch": 8,
    "seq_len": 1024,
    "num_heads": 16,
    "num_v_heads": 16,
    "head_dim": 128,
    "gate_normalizer": 16.0,
}
SMOKE = {**WORKLOAD, "batch": 2, "seq_len": 24, "num_heads": 2, "num_v_heads": 2, "head_dim": 16}
INPUTS = ("q", "k", "v", "g", "beta")
OUTPUTS = ("o",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    gen = generator(seed, device)
    b, t, h, hv, d = w.batch, w.seq_len, w.num_heads, w.num_v_heads, w.head_dim
    q = randn(gen, (b, t, h, d), torch.bfloat16, device)
    k = randn(gen, (b, t, h, d), torch.bfloat16, device)
    v = randn(gen, (b, t, hv, d), torch.bfloat16, device)
    g = log_decay_gate(gen, (b, t, hv, d), w.gate_normalizer, device)
    beta = write_strength(gen, (b, t, hv), device)
    return [q, k, v, g, beta]


def _delta_step(S, k_t, v_t, beta_t):
    """``S + β·k ⊗ (v − kᵀS)`` for ``S [B, H, K, V]``, ``k_t [B, H, K]``, ``v_t [B, H, V]``."""
    u = torch.einsum("bhk,bhkv->bhv", k_t, S)
    return S + (beta_t[..., None] * k_t)[..., :, None] * (v_t - u)[..., None, :]


def _remove_insert_step(S, k_t, v_t, beta_t):
    """The same update as ``S − βk ⊗ (kᵀS) + βk ⊗ v`` with an elementwise reduction."""
    u = (k_t[..., :, None] * S).sum(dim=-2)
    kb = beta_t[..., None] * k_t
    return S - kb[..., :, None] * u[..., None, :] + kb[..., :, None] * v_t[..., None, :]


def _recurrence(q, k, v, g, beta, step=_delta_step, decay=True):
    dt = compute_dtype(q, k, v, g, beta)
    batch, seq_len, heads, dim = q.shape
    v_heads, v_dim = v.shape[2], v.shape[3]
    group = v_heads // heads
    qs = l2_normalize(q.to(dt)).repeat_interleave(group, dim=2) * dim**-0.5
    ks = l2_normalize(k.to(dt)).repeat_interleave(group, dim=2)
    vd, bd, a = v.to(dt), beta.to(dt), g.to(dt).exp()
    S = torch.zeros(batch, v_heads, dim, v_dim, dtype=dt, device=v.device)
    o = torch.empty(batch, seq_len, v_heads, v_dim, dtype=dt, device=v.device)
    for t in range(seq_len):
        if decay:
            S = S * a[:, t, :, :, None]
        S = step(S, ks[:, t], vd[:, t], bd[:, t])
        o[:, t] = torch.einsum("bhk,bhkv->bhv", qs[:, t], S)
    return o.to(v.dtype)


def reference(q, k, v, g, beta):
    return _recurrence(q, k, v, g, beta)


def dropped_term(q, k, v, g, beta):
    """Mutant: forgets the per-channel decay (the state never decays)."""
    return _recurrence(q, k, v, g, beta, decay=False)


def reordered(q, k, v, g, beta):
    """Valid alternative: the update as remove-old / insert-new with another reduction order."""
    return _recurrence(q, k, v, g, beta, step=_remove_insert_step)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.seq_len
    heads, v_heads, d = w.num_heads, w.num_v_heads, w.head_dim
    state = d * d  # K × V per value head
    # per token and value head: decay (1), kᵀS (2), rank-1 update (3) and qᵀS (2) per state
    # entry; plus exp of the gate and the q/k normalisation
    flops = tokens * v_heads * (8.0 * state + d) + tokens * heads * 2 * 4.0 * d
    read = 2 * (tokens * heads * d * 2 + tokens * v_heads * (2 * d + 1))
    write = 2 * tokens * v_heads * d
    return Cost(flops={"fp32": float(flops)}, bytes=float(read + write))
