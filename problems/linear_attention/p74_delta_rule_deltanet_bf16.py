"""DeltaNet delta-rule recurrence from an initial state, without decay. Inputs in
``[batch, heads, time, dim]`` layout: ``q``, ``k``, ``v [8, 16, 1024, 128]`` bfloat16, the write
strength ``beta [8, 16, 1024]`` bfloat16 in (0, 1), and ``initial_state [8, 16, 128, 128]``
float32 (``[K, V]`` per head). q and k are L2-normalised over the head dimension and q is
scaled by ``K^-1/2``. Starting from ``S = initial_state``, for every token in order:
``u = kᵀS``, ``S ← S + k ⊗ β(v − u)``, and the output is ``o = qᵀS``. Outputs:
``o [8, 16, 1024, 128]`` bfloat16 and the final state ``S [8, 16, 128, 128]`` float32."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.linear_attention._fla import l2_normalize, write_strength
from problems.spec import Cost, Workload

ID = "p74"
SLUG = "delta_rule_deltanet_bf16"
FAMILY = "Linear Attention"
ORIGIN = "fla"
SOURCE = (
    "fla-org/flash-linear-attention: fla/ops/delta_rule/naive.py (delta_rule_recurrence); "
    "inputs as in tests/ops/test_delta.py; head geometry from "
    "fla/models/delta_net/configuration_delta_net.py"
)
LICENSE = "MIT"
NOTES = (
    "Workload as in the public MetaKernelBench (B 8, 16 heads, T 1024, head dim 128, a "
    "standard-normal float32 initial state). The final state is returned in the initial "
    "state's dtype (float32). All tensors are redrawn per seed."
)
WORKLOAD = {"batch": 8, "num_heads": 16, "seq_len": 1024, "key_dim": 128, "value_dim": 128}
SMOKE = {"batch": 2, "num_heads": 2, "seq_len": 32, "key_dim": 16, "value_dim": 16}
INPUTS = ("q", "k", "v", "beta", "initial_state")
OUTPUTS = ("o", "final_state")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list[torch.Tensor]:
    gen = generator(seed, device)
    b, h, t = w.batch, w.num_heads, w.seq_len
    q = randn(gen, (b, h, t, w.key_dim), torch.bfloat16, device)
    k = randn(gen, (b, h, t, w.key_dim), torch.bfloat16, device)
    v = randn(gen, (b, h, t, w.value_dim), torch.bfloat16, device)
    beta = write_strength(gen, (b, h, t), device)
    state = randn(gen, (b, h, w.key_dim, w.value_dim), torch.float32, device)
    return [q, k, v, beta, state]


def _delta_step(S, k_t, v_t, beta_t):
    u = torch.einsum("bhk,bhkv->bhv", k_t, S)
    return S + k_t[..., :, None] * (beta_t[..., None] * (v_t - u))[..., None, :]


def _remove_insert_step(S, k_t, v_t, beta_t):
    """``(I − βkkᵀ)S + βk ⊗ v`` with an elementwise reduction for ``kᵀS``."""
    u = (k_t[..., :, None] * S).sum(dim=-2)
    kb = beta_t[..., None] * k_t
    return S - kb[..., :, None] * u[..., None, :] + kb[..., :, None] * v_t[..., None, :]


def _recurrence(q, k, v, beta, initial_state, step=_delta_step, use_initial=True):
    dt = compute_dtype(q, k, v, beta, initial_state)
    seq_len, key_dim = q.shape[2], q.shape[3]
    qs = l2_normalize(q.to(dt)) * key_dim**-0.5
    kn, vd, bd = l2_normalize(k.to(dt)), v.to(dt), beta.to(dt)
    S = initial_state.to(dt) if use_initial else torch.zeros_like(initial_state, dtype=dt)
    o = torch.empty(v.shape, dtype=dt, device=v.device)
    for t in range(seq_len):
        S = step(S, kn[:, :, t], vd[:, :, t], bd[:, :, t])
        o[:, :, t] = torch.einsum("bhk,bhkv->bhv", qs[:, :, t], S)
    return o.to(v.dtype), S.to(initial_state.dtype)


def reference(q, k, v, beta, initial_state):
    return _recurrence(q, k, v, beta, initial_state)


def dropped_term(q, k, v, beta, initial_state):
    """Mutant: ignores the initial state (starts from zero)."""
    return _recurrence(q, k, v, beta, initial_state, use_initial=False)


def reordered(q, k, v, beta, initial_state):
    """Valid alternative: the update as remove-old / insert-new with another reduction order."""
    return _recurrence(q, k, v, beta, initial_state, step=_remove_insert_step)


def cost(w: Workload) -> Cost:
    tokens = w.batch * w.num_heads * w.seq_len
    state = w.key_dim * w.value_dim
    states = w.batch * w.num_heads * state
    # per token and head: kᵀS (2), rank-1 update (2) and qᵀS (2) per state entry; the
    # q/k normalisation and β(v − u)
    flops = tokens * (6.0 * state + 8.0 * w.key_dim + 2.0 * w.value_dim)
    read = 2 * tokens * (2 * w.key_dim + w.value_dim + 1) + 4 * states
    write = 2 * tokens * w.value_dim + 4 * states
    return Cost(flops={"fp32": float(flops)}, bytes=float(read + write))
