"""Gated delta rule (GDN) single-token decode with a recurrent state update (Qwen3-Next-80B-A3B
at tensor parallel 2: 8 query/key heads, 16 value heads, head size 128, batch 64). Inputs:
``q``, ``k [64, 1, 8, 128]`` and ``v [64, 1, 16, 128]`` bfloat16; gate projections ``a``,
``b [64, 1, 16]`` bfloat16; per head ``A_log``, ``dt_bias [16]`` float32; the recurrent state
``state [64, 16, 128, 128]`` float32 in k-last layout ``[batch, head, v, k]``. Value head ``h``
reads q/k head ``h // 2``. With ``g = exp(−exp(A_log)·softplus(a + dt_bias))`` and
``β = sigmoid(b)``: ``S ← g·S; u = S·k; S ← S + β·(v − u)·kᵀ; o = scale·S·q``. Outputs:
``output [64, 1, 16, 128]`` bfloat16 and ``new_state [64, 16, 128, 128]`` float32 (a new
tensor; the input state is left unchanged)."""

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

ID = "p72"
SLUG = "gdn_decode_qwen3next_bf16"
FAMILY = "Linear Attention"
ORIGIN = "flashinfer"
SOURCE = (
    "flashinfer-ai/flashinfer-trace: definitions/gdn/gdn_decode_qk8_v16_d128_k_last.json, "
    "workload record 35b0abd8"
)
LICENSE = "Apache-2.0"
NOTES = (
    "Batch size, scale and the captured A_log/dt_bias values from the record; tensor scales "
    "(q 0.18, k 0.13, v 0.073, state 0.009, gate projections) follow the public "
    "MetaKernelBench's capture-measured choices. Per seed: the (A_log, dt_bias) pairs are "
    "assigned to heads in a fresh order and all tensors are redrawn. The reference is "
    "vectorised over batch and heads (upstream loops over both)."
)
WORKLOAD = {
    "batch": 64,
    "num_qk_heads": 8,
    "num_v_heads": 16,
    "head_size": 128,
    "A_log": (
        -0.169921875, 2.34375, 1.3359375, 2.1875, -0.9375, -1.09375, 1.765625, -0.443359375,
        0.91015625, -0.8125, 2.328125, 0.205078125, 1.375, 2.796875, -0.88671875, -1.3046875,
    ),
    "dt_bias": (
        -2.078125, -5.625, -4.3125, -3.421875, -3.796875, -3.296875, -4.375, -6.25, -3.703125,
        -0.2890625, -5.21875, -6.1875, -3.046875, -5.0625, -4.875, -5.34375,
    ),
    "a_mean": 1.33,
    "a_std": 1.56,
    "b_mean": 0.4,
    "b_std": 1.38,
    "q_std": 0.18,
    "k_std": 0.13,
    "v_std": 0.073,
    "state_std": 0.009,
    "scale": 0.08838834764831843,
}
SMOKE = {**WORKLOAD, "batch": 3}
INPUTS = ("q", "k", "v", "state", "A_log", "a", "dt_bias", "b", "scale")
OUTPUTS = ("output", "new_state")
INPLACE: dict[str, str] = {}
DECISION_MARGIN = None


def make_inputs(seed: int, device: str, w: Workload) -> list:
    g = generator(seed, device)
    B, hk, hv, d = w.batch, w.num_qk_heads, w.num_v_heads, w.head_size
    q = randn(g, (B, 1, hk, d), torch.bfloat16, device, std=w.q_std)
    k = randn(g, (B, 1, hk, d), torch.bfloat16, device, std=w.k_std)
    v = randn(g, (B, 1, hv, d), torch.bfloat16, device, std=w.v_std)
    state = randn(g, (B, hv, d, d), torch.float32, device, std=w.state_std)
    A_log, a, dt_bias, b = gate_inputs(g, (B, 1, hv), w, device)
    return [q, k, v, state, A_log, a, dt_bias, b, w.scale]


def _run(q, k, v, state, A_log, a, dt_bias, b, scale, step_fn, gated=True):
    dt = compute_dtype(q, k, v, state, A_log, a, dt_bias, b)
    hv = v.shape[2]
    g, beta = gates(A_log, a, dt_bias, b, dt)
    if not gated:
        g = torch.ones_like(g)
    qe = expand_heads(q[:, 0].to(dt), hv, 1)
    ke = expand_heads(k[:, 0].to(dt), hv, 1)
    S, out = step_fn(state.to(dt), qe, ke, v[:, 0].to(dt), g[:, 0], beta[:, 0], scale)
    return out.unsqueeze(1).to(v.dtype), S.to(state.dtype)


def reference(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    return _run(q, k, v, state, A_log, a, dt_bias, b, scale, step)


def dropped_term(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    """Mutant: forgets the decay gate g."""
    return _run(q, k, v, state, A_log, a, dt_bias, b, scale, step, gated=False)


def reordered(q, k, v, state, A_log, a, dt_bias, b, scale: float):
    """Valid alternative: the update as remove-old-value / insert-blended-value."""
    return _run(q, k, v, state, A_log, a, dt_bias, b, scale, step_remove_insert)


def cost(w: Workload) -> Cost:
    B, hv, d = w.batch, w.num_v_heads, w.head_size
    state_elems = B * hv * d * d
    token_bytes = B * (2 * w.num_qk_heads * d * 2 + 2 * hv * d * 2 + 2 * hv * 2)
    return Cost(
        flops={"fp32": 7.0 * state_elems + 20.0 * B * hv},
        bytes=float(token_bytes + 2 * state_elems * 4 + 2 * hv * 4),
    )
