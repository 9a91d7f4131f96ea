"""RetNet multi-scale retention, parallel (attention-like) form. Inputs are bfloat16 in
``[batch, heads, time, dim]`` layout: ``q``, ``k [8, 8, 1024, 256]`` and ``v [8, 8, 1024, 512]``.
Head ``h`` has the fixed decay ``γ_h = 1 − 2^(−5−h)`` (h = 0 … 7). The output is
``o = (S ⊙ D) v`` with scores ``S = (K^-1/2·q) kᵀ`` and the causal decay matrix
``D[t, s] = γ_h^(t−s)`` for ``s ≤ t`` and 0 otherwise (no softmax, no normalisation).
Equivalently, a per-head state ``h_t = γ·h_{t−1} + k_t ⊗ v_t`` read as ``o_t = (K^-1/2·q_t)ᵀh_t``.
Output: ``o [8, 8, 1024, 512]`` bfloat16."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.spec import Cost, Workload

ID = "p70"
SLUG = "multiscale_retention_retnet_bf16"
FAMILY = "Linear Attention"
ORIGIN = "fla"
SOURCE = (
    "fla-org/flash-linear-attention: fla/ops/retention/naive.py (naive_retention); inputs as "
    "in tests/ops/test_retention.py; head geometry from fla/models/retnet/configuration_retnet.py"
)
LICENSE = "MIT"
NOTES = (
    "Workload as in the public MetaKernelBench (B 8, 8 heads, T 1024, key dim 256, value dim "
    "512). The per-head decays depend on the head index, so the smoke workload keeps all 8 "
    "heads. All tensors are redrawn per seed."
)
WORKLOAD = {"batch": 8, "num_heads": 8, "seq_len": 1024, "key_dim": 256, "value_dim": 512}
SMOKE = {"batch": 2, "num_heads": 8, "seq_len": 48, "key_dim": 16, "value_dim": 32}
INPUTS = ("q", "k", "v")
OUTPUTS = ("o",)
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    gen = generator(seed, device)
    b, h, t = w.batch, w.num_heads, w.seq_len
    q = randn(gen, (b, h, t, w.key_dim), torch.bfloat16, device)
    k = randn(gen, (b, h, t, w.key_dim), torch.bfloat16, device)
    v = randn(gen, (b, h, t, w.value_dim), torch.bfloat16, device)
    return [q, k, v]


def _log2_decays(heads: int, dt: torch.dtype, device: torch.device) -> torch.Tensor:
    """``log2(γ_h)`` with ``γ_h = 1 − 2^(−5−h)``."""
    index = torch.arange(heads, dtype=dt, device=device)
    return torch.log2(1 - torch.exp2(-5.0 - index))


def _parallel(q, k, v, decay=True):
    dt = compute_dtype(q, k, v)
    heads, seq_len, key_dim = q.shape[1], q.shape[2], q.shape[3]
    pos = torch.arange(seq_len, dtype=dt, device=q.device)
    dist = pos[:, None] - pos[None, :]  # t − s
    causal = dist >= 0
    if decay:
        log2_gamma = _log2_decays(heads, dt, q.device)[:, None, None]
        mask = torch.exp2(dist.clamp_min(0) * log2_gamma) * causal  # [H, T, T]
    else:
        mask = causal.to(dt)
    scores = (q.to(dt) * key_dim**-0.5) @ k.to(dt).transpose(-1, -2)
    return ((scores * mask) @ v.to(dt)).to(v.dtype)


def reference(q, k, v):
    return _parallel(q, k, v)


def dropped_term(q, k, v):
    """Mutant: forgets the decay (plain causal linear attention)."""
    return _parallel(q, k, v, decay=False)


def reordered(q, k, v):
    """Valid alternative: the recurrent form, one token at a time over a [K, V] state."""
    dt = compute_dtype(q, k, v)
    batch, heads, seq_len, key_dim = q.shape
    gamma = torch.exp2(_log2_decays(heads, dt, q.device))[None, :, None, None]
    qs, kd, vd = q.to(dt) * key_dim**-0.5, k.to(dt), v.to(dt)
    state = torch.zeros(batch, heads, key_dim, v.shape[-1], dtype=dt, device=v.device)
    out = torch.empty(batch, heads, seq_len, v.shape[-1], dtype=dt, device=v.device)
    for t in range(seq_len):
        state = gamma * state + kd[:, :, t, :, None] * vd[:, :, t, None, :]
        out[:, :, t] = torch.einsum("bhk,bhkv->bhv", qs[:, :, t], state)
    return out.to(v.dtype)


def cost(w: Workload) -> Cost:
    pairs = w.batch * w.num_heads * w.seq_len * (w.seq_len + 1) / 2  # causal (t, s) pairs
    tokens = w.batch * w.num_heads * w.seq_len
    return Cost(
        # q·k and (S⊙D)·v on tensor cores over the causal half; the decay weighting as fp32
        flops={"bf16": 2.0 * pairs * (w.key_dim + w.value_dim), "fp32": 2.0 * pairs},
        bytes=2.0 * tokens * (2 * w.key_dim + 2 * w.value_dim),
    )
