"""Gated delta rule (GDN) prefill over ragged sequences (Qwen3-Next-80B-A3B at tensor parallel
2: 8 query/key heads, 16 value heads, head size 128). Four sequences are packed along the token
axis by ``cu_seqlens`` (int64, 959 tokens). Inputs per token: ``q``, ``k [959, 8, 128]``
(L2-normalised, bfloat16), ``v [959, 16, 128]`` bfloat16, gate projections ``a``, ``b [959, 16]``
bfloat16; per head ``A_log``, ``dt_bias [16]`` float32; and each sequence's initial state
``state [4, 16, 128, 128]`` float32 in k-last layout ``[seq, head, v, k]``. Value head ``h``
reads q/k head ``h // 2``. With ``g = exp(−exp(A_log)·softplus(a + dt_bias))`` and
``β = sigmoid(b)``, each token updates its sequence's state ``S`` in order:
``S ← g·S; u = S·k; S ← S + β·(v − u)·kᵀ`` and emits ``o = scale·S·q``. Outputs:
``output [959, 16, 128]`` bfloat16 and ``new_state [4, 16, 128, 128]`` float32 (each sequence's
state after its last token)."""

from __future__ import annotations

import torch

from problems.common import compute_dtype, generator, randn
from problems.linear_attention._gdn import (
    expand_heads,
    gate_inputs,
    gates,
    step,
    step_remove_insert,
)
from problems.spec import Cost, Workload

ID = "p71"
SLUG = "gdn_varlen_prefill_qwen3next_bf16"
FAMILY = "Linear Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gdn/gdn_prefill_qk8_v16_d128_k_last.json, "
    "workload record 1a9da4c9"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Sequence lengths, scale and the captured A_log/dt_bias values from the record; value and "
    "gate-projection scales and the non-zero initial state (std 128^-1/2) follow the public "
    "MetaKernelBench's capture-measured choices. q and k are drawn L2-normalised, as the "
    "definition expects. Per seed: the sequence order is shuffled, the (A_log, dt_bias) pairs "
    "are assigned to heads in a fresh order, and all tensors are redrawn."
)
WORKLOAD = {
    "num_qk_heads": 8,
    "num_v_heads": 16,
    "head_size": 128,
    "seq_lens": (19, 31, 890, 19),
    "A_log": (
        1.3984375, 1.203125, 2.203125, 0.1474609375, 1.46875, -0.6171875, 1.8125, -1.359375,
        0.50390625, 1.03125, 2.953125, 1.2890625, 1.3203125, 2.109375, 3.34375, 1.78125,
    ),
    "dt_bias": (
        -2.34375, -3.421875, -4.03125, -1.65625, -3.25, 2.046875, -5.625, -2.65625, -2.375,
        -2.984375, -2.328125, -4.09375, -4.25, -3.71875, -4.96875, -3.578125,
    ),
    "a_mean": -0.12,
    "a_std": 1.26,
    "b_mean": 1.47,
    "b_std": 2.01,
    "v_std": 0.041,
    "state_std": 128**-0.5,
    "scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "seq_lens": (3, 1, 4)}
INPUTS = ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "cu_seqlens", "scale")
OUTPUTS = ("output", "new_state")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def _unit(g: torch.Generator, shape: tuple[int, ...], device: str) -> torch.Tensor:
    x = randn(g, shape, torch.float32, device)
    return (x / x.norm(dim=-1, keepdim=True)).to(torch.bfloat16)


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    cpu = torch.Generator().manual_seed((seed * 7919 + 17) & 0x7FFF_FFFF_FFFF_FFFF)
    lens = [w.seq_lens[i] for i in torch.randperm(len(w.seq_lens), generator=cpu).tolist()]
    total, hk, hv, d = sum(lens), w.num_qk_heads, w.num_v_heads, w.head_size
    q = _unit(g, (total, hk, d), device)
    k = _unit(g, (total, hk, d), device)
    v = randn(g, (total, hv, d), torch.bfloat16, device, std=w.v_std)
    state = randn(g, (len(lens), hv, d, d), torch.float32, device, std=w.state_std)
    A_log, a, dt_bias, b = gate_inputs(g, (total, hv), w, device)
    cu = torch.tensor([0, *lens], dtype=torch.int64).cumsum(0).to(device)
    return [q, k, v, state, A_log, a, dt_bias, b, cu, w.scale]


def _run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, step_fn, gated=True):
    dt = compute_dtype(q, k, v, state, A_log, a, dt_bias, b)
    hv = v.shape[1]
    g, beta = gates(A_log, a, dt_bias, b, dt)
    if not gated:
        g = torch.ones_like(g)
    qe = expand_heads(q.to(dt), hv, 1)
    ke = expand_heads(k.to(dt), hv, 1)
    vd = v.to(dt)
    out = torch.empty(v.shape, dtype=dt, device=v.device)
    new_state = torch.empty(state.shape, dtype=dt, device=state.device)
    bounds = cu_seqlens.tolist()
    for s in range(len(bounds) - 1):
        S = state[s].to(dt)
        for t in range(bounds[s], bounds[s + 1]):
            S, out[t] = step_fn(S, qe[t], ke[t], vd[t], g[t], beta[t], scale)
        new_state[s] = S
    return out.to(v.dtype), new_state.to(state.dtype)


def reference(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale: float):
    return _run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, step)


def dropped_term(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale: float):
    """Mutant: forgets the decay gate g (state never decays)."""
    return _run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, step, gated=False)


def reordered(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale: float):
    """Valid alternative: the update as remove-old-value / insert-blended-value."""
    return _run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale, step_remove_insert)


def cost(w: Workload) -> Cost:
    tokens, seqs, hv, d = sum(w.seq_lens), len(w.seq_lens), w.num_v_heads, w.head_size
    state_elems = seqs * hv * d * d
    token_bytes = tokens * (2 * w.num_qk_heads * d * 2 + 2 * hv * d * 2 + 2 * hv * 2)
    return Cost(
        # per token and head: decay (1), S·k (2), rank-1 update (2) and S·q (2) per state entry
        flops={"fp32": 7.0 * tokens * hv * d * d + 20.0 * tokens * hv},
        bytes=float(token_bytes + 2 * state_elems * 4 + 2 * hv * 4 + 8 * (seqs + 1)),
    )
